"""The end-of-run summary on the terminal: the run's tables, printed as every command
prints (:mod:`trainscope.render.console`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from trainscope.analysis.memory import memory_table
from trainscope.render.console import print_table
from trainscope.reports.tables import overview_table, per_class_table, stage_table

if TYPE_CHECKING:
    import rich.console


def print_summary(
    console: rich.console.Console, summary: dict[str, Any], env: dict[str, Any] | None = None
) -> None:
    """The end-of-run summary: key figures (versions from ``env``, the run's env.json),
    per-class accuracy, time by stage, memory."""
    tables = (overview_table(summary, env), per_class_table(summary), stage_table(summary))
    for table in (*tables, memory_table(summary)):
        if table.rows:
            print_table(console, table)
