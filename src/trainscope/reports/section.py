"""What a study kind's report builder hands back, and the pieces the builders share: a
module of its own, so that the study report imports the section builders and they import
this, never each other."""

from __future__ import annotations

from dataclasses import dataclass, field

from trainscope.records.run_dir import RunRecord
from trainscope.records.study_dir import PlannedRun, StudyRecord
from trainscope.render.document import Document, escape_inline
from trainscope.render.table import Table


@dataclass
class Section:
    """What a study kind's builder returns: tables (for tables.tex) and headline findings."""

    tables: dict[str, Table] = field(default_factory=dict)
    findings: list[str] = field(default_factory=list)

    def add_table(self, doc: Document, key: str, table: Table) -> None:
        """Keep ``table`` for tables.tex under ``key`` and show it in ``doc``."""
        self.tables[key] = table
        doc.table(table)


@dataclass(kw_only=True)
class ConfigRows:
    """A comparison table's rows and the configurations' labels, in plan order: what a
    study kind's rows function computes before anything is rendered."""

    rows: list[list[object]] = field(default_factory=list)
    labels: list[str] = field(default_factory=list)


@dataclass
class ConfigRuns:
    """A configuration of a study, named by its label, with its measured runs."""

    name: str
    planned: PlannedRun
    """The configuration's first planned run: its labels, and why it cannot run here."""
    runs: list[RunRecord]
    """Its completed measured runs; none for a configuration that cannot run here."""

    @property
    def missing(self) -> str:
        """What a table's row says of it when it has no measured run."""
        return "not applicable" if not self.planned.applicable else "no completed run"


def each_config(study: StudyRecord, label: str) -> list[ConfigRuns]:
    """Every configuration in plan order, named by its ``label`` (else its config name)."""
    return [
        ConfigRuns(
            str(c.labels.get(label, c.config)),
            c,
            study.measured(c.config) if c.applicable else [],
        )
        for c in study.configs()
    ]


def not_applicable_list(study: StudyRecord, doc: Document, where: str) -> None:
    """List the configurations that cannot run on this ``where`` ("device", "machine"),
    each with the planner's reason (too long for a table cell); nothing if all could."""
    na = [
        f"{escape_inline(c.config)}: {escape_inline(str(c.reason))}"
        for c in study.configs()
        if not c.applicable
    ]
    if na:
        doc.paragraph(f"Not applicable on this {where} (not run, not faked):")
        doc.bullets(na)
