"""What a study kind's report builder hands back: a module of its own, so that the study
report imports the section builders and they import this, never each other."""

from __future__ import annotations

from dataclasses import dataclass, field

from trainscope.reports.tables import Table


@dataclass
class Section:
    """What a study kind's builder returns: tables (for tables.tex) and headline findings."""

    tables: dict[str, Table] = field(default_factory=dict)
    findings: list[str] = field(default_factory=list)
