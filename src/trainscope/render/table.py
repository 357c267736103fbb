"""The report Table and the number formats every report uses, rendered as Markdown,
HTML or LaTeX (booktabs) (torch-free, records-free).

Cells are formatted to strings when a table is built, so the Markdown, HTML, LaTeX and
console renderings of one table always show the same digits.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

# MISSING (an en dash) is shown wherever a value is missing or null; LATEX_NEEDS and
# LATEX_PACKAGES name what a .tex file of these tables needs in its preamble.
from trainscope.render.latex_layout import (  # noqa: F401 (re-exported)
    LATEX_NEEDS,
    LATEX_PACKAGES,
    MISSING,
    TEXTWIDTH_EM,
    table_to_latex,
)

# Every number with significant digits is written by this one function: plain digits,
# never an exponent (1670, not 1.67e+03).
from trainscope.util.numfmt import fmt_bytes as fmt_bytes
from trainscope.util.numfmt import fmt_sig as fmt_sig

# The escapers live in trainscope.util.textsafe, one per output format; latex_escape is
# re-exported here, where table code has always found it.
from trainscope.util.textsafe import html_text, markdown_text
from trainscope.util.textsafe import latex_escape as latex_escape

# ---------------------------------------------------------------------------------------
# Number formatting
# ---------------------------------------------------------------------------------------


def is_number(x: Any) -> bool:
    """A measurement: an int or float (bool is an int subclass, but never one)."""
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def fmt_seconds(x: Any) -> str:
    """Seconds with 3 decimals; tiny non-zero values keep 4 significant digits.

    A stage of 0.00004 s would otherwise read as "0.000" and look unmeasured.
    Negative values (``other`` on asynchronous GPU runs) are shown as they are.
    """
    if not is_number(x) or not math.isfinite(x):
        return MISSING
    if x != 0 and abs(x) < 0.0005:
        decimals = min(3 - math.floor(math.log10(abs(x))), 9)
        return f"{x:.{decimals}f}"
    return f"{x:.3f}"


def fmt_pct(fraction: Any, digits: int = 1) -> str:
    """A fraction as a percentage: ``0.1234`` -> ``"12.3%"``."""
    if not is_number(fraction) or not math.isfinite(fraction):
        return MISSING
    return f"{100.0 * fraction:.{digits}f}%"


def fmt_float(x: Any, digits: int = 4) -> str:
    """A plain float with fixed decimals (losses); missing/non-finite -> en dash or nan."""
    if not is_number(x):
        return MISSING
    if not math.isfinite(x):
        return str(x)  # a nan/inf loss is a finding, not a missing value
    return f"{x:.{digits}f}"


def fmt_rate(x: Any) -> str:
    """Throughput: thousands separators, no decimals above 100/s."""
    if not is_number(x) or not math.isfinite(x):
        return MISSING
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.1f}"


def fmt_int(x: Any) -> str:
    """An integer with thousands separators."""
    if not is_number(x):
        return MISSING
    return f"{int(x):,}"


def cell_text(x: Any) -> str:
    """A cell's text: the value as a string, MISSING for None or empty."""
    if x is None or x == "":
        return MISSING
    return str(x)


# ---------------------------------------------------------------------------------------
# Table model and renderers
# ---------------------------------------------------------------------------------------

# Looks like a formatted number: "1,234.5", "-0.012", "12.3%", "333.8 MiB", "44,426".
_NUMERIC = re.compile(r"^[-+]?[\d,]*\.?\d+(e[-+]?\d+)?\s*(%|[KMGT]i?B|B|s)?$")


@dataclass
class Table:
    """A small rectangular table: header, rows of cells, caption and label.

    ``align`` holds one ``l``/``r`` per column; when None, the first column is left
    aligned and every other column is right aligned if all its cells look numeric.
    """

    columns: list[str]
    rows: list[list[object]] = field(default_factory=list)
    caption: str = ""
    label: str = ""
    align: str | None = None

    def cells(self) -> list[list[str]]:
        """Rows as display strings (None -> en dash)."""
        return [[cell_text(c) for c in row] for row in self.rows]

    def alignment(self) -> str:
        """The effective per-column alignment string, e.g. ``"lrr"``."""
        if self.align is not None:
            if len(self.align) != len(self.columns) or set(self.align) - {"l", "r"}:
                raise ValueError(f"align {self.align!r} does not fit {len(self.columns)} columns")
            return self.align
        out = []
        cells = self.cells()
        for j in range(len(self.columns)):
            col = [r[j] for r in cells if j < len(r) and r[j] != MISSING]
            numeric = j > 0 and bool(col) and all(_NUMERIC.match(c) for c in col)
            out.append("r" if numeric else "l")
        return "".join(out)

    def to_markdown(self) -> str:
        """A GitHub pipe table; right-aligned columns use ``---:``."""
        align = self.alignment()
        # Cells are literal text: no tag, link or code span, no "|" ending the cell.
        header = [markdown_text(c) for c in self.columns]
        body = [[markdown_text(c) for c in row] for row in self.cells()]
        widths = [
            max([len(header[j]), 3] + [len(r[j]) for r in body if j < len(r)])
            for j in range(len(header))
        ]

        def line(cells: list[str]) -> str:
            padded = [
                c.rjust(w) if a == "r" else c.ljust(w) for c, w, a in zip(cells, widths, align)
            ]
            return "| " + " | ".join(padded) + " |"

        rule = (
            "| "
            + " | ".join(
                "-" * (w - 1) + ":" if a == "r" else ":" + "-" * (w - 1)
                for w, a in zip(widths, align)
            )
            + " |"
        )
        return "\n".join([line(header), rule, *(line(r) for r in body)]) + "\n"

    def to_html(self) -> str:
        """An HTML ``<table>`` with caption; alignment as in :meth:`alignment`.

        Alignment is an inline style on every cell (not a class), so the fragment keeps
        its right-aligned numbers when pasted into a page without our stylesheet.
        """
        align = ["right" if a == "r" else "left" for a in self.alignment()]

        def row(tag: str, cells: list[str]) -> str:
            tds = "".join(
                f'<{tag} style="text-align: {a}">{html_text(c)}</{tag}>'
                for c, a in zip(cells, align)
            )
            return f"<tr>{tds}</tr>"

        # Labels are identifiers ("tab:run-stages"); ids keep the same readable form.
        ident = re.sub(r"[^A-Za-z0-9_-]", "-", self.label)
        lines = [f'<table id="{ident}">' if ident else "<table>"]
        if self.caption:
            lines.append(f"<caption>{html_text(self.caption)}</caption>")
        lines += ["<thead>", row("th", self.columns), "</thead>", "<tbody>"]
        lines += [row("td", r) for r in self.cells()]
        lines += ["</tbody>", "</table>"]
        return "\n".join(lines) + "\n"

    def to_latex(self, *, line_em: float = TEXTWIDTH_EM, placement: str = "ht") -> str:
        """The table as LaTeX with booktabs rules, sized to fit a line ``line_em`` wide
        (em of 10pt text; the default article's, where a tables.tex goes, by default).

        Nothing is scaled (scaled print soon gets too small to read): the table's width
        is estimated from the glyphs of its cells and it is set to fit, in a smaller
        font (\\footnotesize at the smallest), its long headers stacked, its columns
        closer, its text columns wrapped (``p{}``) or split into parts (the first column
        repeated), as that needs. A table of up to :data:`LONG_TABLE_ROWS` rows is a
        ``table`` float (``placement``: ``"ht"``; a document that keeps tables where
        they stand passes ``"H"``, which needs the float package); a longer one is a
        ``longtable`` that breaks across pages and repeats its header. The file needs
        :data:`LATEX_PACKAGES` (the header comment :data:`LATEX_NEEDS` says so).
        """
        return table_to_latex(self, line_em=line_em, placement=placement)
