"""Study kinds: ``trainscope study NAME``, each a planner, a report builder and its flags."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from trainscope.registry.base import Table, load


@dataclass(frozen=True)
class Flag:
    """One flag of a study's command line: argparse's ``add_argument(*names, **kwargs)``."""

    names: tuple[str, ...]
    kwargs: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class StudyEntry:
    """A study kind: ``trainscope study NAME``."""

    name: str
    help: str
    planner: str
    """``"module:function"``: ``plan(base_config, device, **options) -> StudyPlan``."""
    report: str
    """``"module:function"``: ``sections(study, doc, plots) -> Section`` for its report."""
    options: str | None = None
    """``"module:function"``: ``(args, overrides) -> (options, notes)``: its flags as the
    planner's keyword arguments (it may move run overrides it reads itself, such as the
    strategies study's ``--nproc``), and notes to print. None: no options of its own."""
    flags: tuple[Flag, ...] = ()
    fresh_process: bool = False
    """Run each configuration in a process of its own unless told otherwise (studies that
    compare setup time or memory)."""
    sets: Mapping[str, str] = field(default_factory=dict)
    """Run settings (dotted keys) it sets per configuration -> the study flag to use
    instead: a run flag for one of them is refused, never silently overridden."""
    replaces: tuple[str, ...] = ()
    """Run flags its own flags take the place of (``study scaling --nproc 1,2,4``: a
    list where ``run --nproc`` takes one number)."""
    adaptive: str | None = None
    """``"module:function"``: ``more(plan, study_dir) -> runs`` for a study that plans
    later runs from earlier ones' results (a search); None: every run planned up front."""
    script: str | None = None
    """``"module:function"``: ``runs(repeats, cuda, **options) -> [PlannedRun]``, its
    configurations as ``--inject`` settings on the user's script (``study NAME --
    SCRIPT.py``); None: the study needs trainscope's own workloads."""


STUDIES: Table[str, StudyEntry] = Table(lambda e: e.name)
"""Name -> entry, in registration order (add with :func:`register_study`)."""
register_study = STUDIES.add
unregister_study = STUDIES.remove

# Studies that are not study NAME subcommands but keep a study record (a report knows
# their builder): ``trainscope collectives``.
RECORD_ONLY: dict[str, str] = {}


def report_builder(kind: str) -> Callable[..., Any] | None:
    """The report builder of a study kind (a ``study`` subcommand's, or one that only keeps
    a study record, such as ``collectives``), or None for a kind nobody registered."""
    target = STUDIES[kind].report if kind in STUDIES else RECORD_ONLY.get(kind)
    return load(target) if target else None
