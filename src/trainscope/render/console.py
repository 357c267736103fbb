"""Printing report tables on the terminal with rich (torch-free).

Every string printed here can come from a run record (a run's name, a workload, a
summary field), so none reaches rich as markup or with its control characters: cells,
headers and titles are ``rich.text.Text`` built by ``trainscope.util.textsafe.rich_text``,
and lines go through :func:`print_line`.

One rule for every command: on a terminal a table is drawn by rich; piped or redirected
to a file it is written as plain aligned lines, whole (rich would cut cells and headers
to its default 80 columns: ``Fin…``, ``1.1…``). :func:`make_console` and
:func:`print_table` are how every command prints.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from trainscope.render.table import Table
from trainscope.util.textsafe import rich_text, terminal_text

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


def table_to_plain(table: Table) -> list[str]:
    """One report Table as plain text lines for a pipe or a file: the caption on one line,
    then columns aligned with spaces (no box drawing, nothing wrapped or cut, no trailing
    blanks); every cell is record text with its control characters shown as escapes."""
    head = [terminal_text(c) for c in table.columns]
    rows = [[terminal_text(c) for c in row] for row in table.cells()]
    widths = [max(len(r[j]) for r in [head, *rows]) for j in range(len(head))]
    align = table.alignment()

    def line(cells: list[str]) -> str:
        parts = [c.rjust(w) if a == "r" else c.ljust(w) for c, w, a in zip(cells, widths, align)]
        return "  ".join(parts).rstrip()

    caption = [terminal_text(table.caption)] if table.caption else []
    return [*caption, line(head), *(line(r) for r in rows)]


def make_console(*, stderr: bool = False) -> rich.console.Console:
    """A rich console on stdout (or stderr); when that is not a terminal, lines are
    written whole (soft wrap), never folded at rich's default 80 columns."""
    from rich.console import Console

    console = Console(stderr=stderr)
    if not console.is_terminal:
        console.soft_wrap = True
    return console


def print_table(console: rich.console.Console, table: Table) -> None:
    """One report Table: drawn by rich on a terminal, else plain lines, whole."""
    if console.is_terminal:
        console.print(table_to_rich(table))
    else:  # piped or redirected: plain lines, whole, for grep and for files
        console.file.write("\n".join(table_to_plain(table)) + "\n")
        console.file.flush()


def print_line(console: rich.console.Console, text: Any, *, newlines: bool = False) -> None:
    """Print ``text`` as it is: no markup, no highlighting, control characters shown."""
    console.print(rich_text(text, newlines=newlines))
