"""``trainscope doctor``: what to fix in a run, from its record (torch-free).

:func:`diagnose` reads a run directory (never torch), runs every rule of
:data:`~trainscope.diagnosis.rules.RULES` and returns the findings, most important first,
each with its evidence, its estimated gain and the fix as a command line. A healthy run
has none above minor. What the record could not give is listed in ``unread``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainscope import registry
from trainscope.diagnosis.facts import RunFacts, facts_of, read_facts
from trainscope.diagnosis.findings import (
    Finding,
    fix_command,
    rank,
    script_change,
    script_command,
)
from trainscope.diagnosis.rules import RULES
from trainscope.records.run_dir import RunRecord


@dataclass
class Diagnosis:
    """The findings on one run, most important first."""

    run_dir: Path
    status: str
    steps: int
    findings: list[Finding] = field(default_factory=list)
    unread: list[str] = field(default_factory=list)
    script: bool = False
    """A run of the user's own script: fixes are code changes (no commands, no --apply)."""

    def as_list(self) -> list[dict[str, Any]]:
        """The findings as ``--json`` prints them."""
        return [f.as_dict() for f in self.findings]


def diagnose(
    run_dir: str | Path,
    *,
    memory_limit_bytes: int | None = None,
    link_fits: dict[str, Any] | None = None,
    link_where: str = "",
) -> Diagnosis:
    """Every rule's finding on ``run_dir``, ranked; a directory that is not a run is one
    clear :class:`~trainscope.errors.TrainscopeError`.

    ``memory_limit_bytes``: the memory the run must fit in (default: its device's);
    ``link_fits``: α–β fits of the ranks' link (:mod:`trainscope.comm.cost_model`), for
    the sync rules to predict with.
    """
    facts = read_facts(run_dir)
    facts.memory_limit_bytes = memory_limit_bytes
    facts.link_fits, facts.link_where = dict(link_fits or {}), link_where
    return diagnosis_of(facts)


def diagnose_record(record: RunRecord) -> Diagnosis:
    """The same for a run record already read (the run report's "What to fix")."""
    return diagnosis_of(facts_of(record))


def diagnosis_of(facts: RunFacts) -> Diagnosis:
    """Every rule's finding on ``facts``, ranked."""
    found = []
    rules = {**RULES, **{n: registry.load(e.target) for n, e in registry.RULES.items()}}
    for name, rule in rules.items():
        finding = rule(facts)
        if finding is not None:
            if facts.is_script and finding.fix:  # no config: --inject, or a code change
                finding.command = script_command(facts.summary, facts.path, name, finding.fix)
                change = script_change(finding.fix)
                finding.notes.append(
                    f"in the script, the same as the code change {change}, measured with "
                    "--inject on the unchanged script (the command)"
                    if finding.command
                    else f"in the script, this is a code change: {change}"
                )
            else:
                finding.command = fix_command(facts.path, name, finding.fix)
            found.append(finding)
    steps = facts.summary.get("steps")
    return Diagnosis(
        facts.path,
        str(facts.summary.get("status")),
        steps if isinstance(steps, int) else 0,
        rank(found),
        facts.unread,
        facts.is_script,
    )


__all__ = ["Diagnosis", "Finding", "diagnose", "diagnose_record"]
