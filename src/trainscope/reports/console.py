"""Printing report tables on the terminal with rich (torch-free)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from trainscope.reports.tables import Table, overview_table, per_class_table, stage_table

if TYPE_CHECKING:
    import rich.console
    import rich.table

    from trainscope.reports.run_report import RunReport


def table_to_rich(table: Table) -> rich.table.Table:
    """One report Table as a rich table (same cells, same alignment)."""
    from rich.table import Table as RichTable

    rt = RichTable(title=table.caption, title_justify="left")
    for name, a in zip(table.columns, table.alignment()):
        rt.add_column(name, justify="right" if a == "r" else "left")
    for row in table.cells():
        rt.add_row(*row)
    return rt


def print_summary(console: rich.console.Console, summary: dict[str, Any]) -> None:
    """The end-of-run summary: key figures, per-class accuracy, time by stage."""
    for table in (overview_table(summary), per_class_table(summary), stage_table(summary)):
        if table.rows:
            console.print(table_to_rich(table))


def print_report(report: RunReport) -> None:
    """Print a built report's tables and the files it wrote."""
    from rich.console import Console

    from trainscope.reports.run_report import render_tables_rich

    console = Console()
    for rt in render_tables_rich(report):
        console.print(rt)
    console.print(f"wrote {len(report.files)} files to {report.out_dir}:")
    for f in report.files:
        # Relative names (plots/loss.png) read better than the same long prefix repeated.
        shown = f.relative_to(report.out_dir) if f.is_relative_to(report.out_dir) else f
        console.print(f"  {shown}")
    console.print(f"open in a browser: {report.html_path}")
