"""Printing report tables on the terminal with rich (torch-free).

Every string printed here can come from a run record (a run's name, a workload, a
summary field), so none reaches rich as markup or with its control characters: cells,
headers and titles are ``rich.text.Text`` built by ``trainscope.textsafe.rich_text``,
and lines go through :func:`print_line`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from trainscope.reports.tables import Table, overview_table, per_class_table, stage_table
from trainscope.textsafe import rich_text

if TYPE_CHECKING:
    import rich.console
    import rich.table


def table_to_rich(table: Table) -> rich.table.Table:
    """One report Table as a rich table (same cells, same alignment), all text literal."""
    from rich.table import Table as RichTable

    rt = RichTable(title=rich_text(table.caption), title_justify="left")
    for name, a in zip(table.columns, table.alignment()):
        rt.add_column(rich_text(name), justify="right" if a == "r" else "left")
    for row in table.cells():
        rt.add_row(*(rich_text(c) for c in row))
    return rt


def print_line(console: rich.console.Console, text: Any, *, newlines: bool = False) -> None:
    """Print ``text`` as it is: no markup, no highlighting, control characters shown."""
    console.print(rich_text(text, newlines=newlines))


def print_summary(
    console: rich.console.Console, summary: dict[str, Any], env: dict[str, Any] | None = None
) -> None:
    """The end-of-run summary: key figures (versions from ``env``, the run's env.json),
    per-class accuracy, time by stage, memory."""
    from trainscope.reports.memory import memory_table

    tables = (overview_table(summary, env), per_class_table(summary), stage_table(summary))
    for table in (*tables, memory_table(summary)):
        if table.rows:
            console.print(table_to_rich(table))
