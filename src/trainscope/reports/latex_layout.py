"""LaTeX for trainscope's tables, sized to fit a page (booktabs rules).

A short table is a float whose tabular TeX scales down to the line width when wider; a
long one is a ``longtable`` whose width is estimated here from measured glyph widths, set
smaller, wrapped or split as it needs. :meth:`trainscope.reports.tables.Table.to_latex`
is the entry point.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Protocol

from trainscope.util.textsafe import latex_escape, one_line


class Table(Protocol):
    """What the layout needs of a :class:`trainscope.reports.tables.Table` (a protocol,
    so that this module need not import the one that imports it)."""

    columns: Sequence[str]
    caption: str
    label: str

    def alignment(self) -> str:
        """One tabular alignment letter per column."""
        ...

    def cells(self) -> list[list[str]]:
        """Every cell as text."""
        ...


# Shown wherever a value is missing or null (an en dash, as in printed tables).
MISSING = "–"

# ---------------------------------------------------------------------------------------
# LaTeX: fitting the page
# ---------------------------------------------------------------------------------------

# The packages a tables.tex (or compare.tex) needs; all are in TeX Live's latex-base
# (graphicx, longtable) and latex-recommended (booktabs).
LATEX_PACKAGES = ("booktabs", "graphicx", "longtable")
# The header comment line that says so (a file's second line).
LATEX_NEEDS = (
    "% Needs "
    + ", ".join(rf"\usepackage{{{p}}}" for p in LATEX_PACKAGES[:-1])
    + rf" and \usepackage{{{LATEX_PACKAGES[-1]}}} in the preamble; \input{{tables.tex}}"
    " where wanted."
)

# A table of more body rows is a longtable, which breaks across pages.
LONG_TABLE_ROWS = 40
# A table of up to that many rows is a float, set in the largest of these sizes where
# its body rows and caption lines (estimated at the normal size) are at most as many as
# given: measured on the default (10pt) article's page, which holds 43 such lines of
# normal text (rows and caption), 46 small or 52 footnotesize ones; three are spare.
# Where none fits, the table is a longtable too.
_FLOAT_SIZES = (("", 40), (r"\small", 43), (r"\footnotesize", 49))

# A longtable cannot be scaled: its width is estimated instead, for the default article
# (10pt text, \textwidth 345pt, \tabcolsep 6pt either side of every column). Widths are
# in em of that text (10pt).
_TEXTWIDTH_EM = 34.5
_TABCOLSEP_EM = 0.6
# Font sizes a longtable may use, largest first, with how wide their glyphs are relative
# to the normal size (measured: 9pt and 8pt Computer Modern are drawn relatively wider).
_LONG_SIZES = (("", 1.0), (r"\small", 0.925), (r"\footnotesize", 0.85))
_SPARE = 1.02  # kerning and rounding: estimates are taken 2% wider still
_P_SPARE_EM = 0.1  # and lines wrapped in a p{} column 1pt narrower than it
_CAPTION_PIECE_EM = 8.0  # a caption may break inside a word wider than this
_MIN_P_EM = 5.0  # a wrapped (p{}) column is at least this wide, unless it must not be

# Glyph widths in em of Computer Modern Roman, as measured in both the OT1 and the T1
# encodings (cmr10, ecrm1000), rounded up by class: the estimate is never below the real
# width, so a longtable estimated to fit does.
_EM_CLASSES = (
    ("il.,:;'!|`[]", 0.28),
    (" ", 0.34),
    ("()fjrts", 0.4),
    ('ceza0123456789-/*?"${}gox\\–', 0.53),
    ("bdhknpquvy", 0.56),
    ("^~µαβ·∞", 0.62),
    ("w", 0.73),
    ("m%&#@=+<>_×≈±≤≥", 0.84),
    ("MW", 1.03),
)
_EM = {ch: em for chars, em in _EM_CLASSES for ch in chars}


def _char_em(ch: str) -> float:
    if ch in _EM:
        return _EM[ch]
    if "A" <= ch <= "Z":
        return 0.79
    return 1.0  # anything else, wider than any glyph above


def _text_em(text: str) -> float:
    """Estimated width of ``text`` (a display cell) in em of 10pt text."""
    return sum(_char_em(ch) for ch in _RATIO_X.sub("×", one_line(text)))


def _caption_lines(caption: str) -> int:
    # "Table 10: " (4 em) and the caption, on lines 34.5 em wide.
    return 1 + int((_text_em(caption) + 4.0) // 34.0) if caption else 0


def _latex_cell(text: str) -> str:
    tex = _times(latex_escape(text))
    # A cell starting with "*" right after the previous row's "\\" would be read as
    # "\\*" (and the star dropped): an empty group in front keeps it text.
    return "{}" + tex if tex.startswith("*") else tex


def _latex_row(cells: list[str]) -> str:
    return " & ".join(_latex_cell(c) for c in cells) + r" \\"


def _latex_caption(caption: str) -> str:
    """A caption may break inside a long word (a run name, a path), every 8 em at most:
    a caption cannot be scaled, and a word wider than the line would stick out."""
    words = []
    for word in one_line(caption).split(" "):
        pieces = _wrap(word, _CAPTION_PIECE_EM) if _text_em(word) > _CAPTION_PIECE_EM else [word]
        words.append(r"\allowbreak{}".join(_times(latex_escape(p)) for p in pieces))
    return " ".join(words)


def _latex_label(label: str) -> str:
    # Labels are identifiers, not text: keep only characters LaTeX accepts there.
    return re.sub(r"[^A-Za-z0-9:._-]", "-", label)


def _fits(widths_em: list[float], scale: float) -> bool:
    """Whether columns of these estimated widths, in a font ``scale`` as wide, fit."""
    text = sum(widths_em) * scale * _SPARE
    return text + 2 * _TABCOLSEP_EM * len(widths_em) <= _TEXTWIDTH_EM


def _wrap(text: str, width_em: float) -> list[str]:
    """``text`` in lines no wider than ``width_em`` (estimated): at spaces where a word
    fits, inside a word (a name, a path) where it does not."""
    lines: list[str] = []
    line, used = "", 0.0
    for word in one_line(text).split(" "):
        word_em = _text_em(word)
        space = _char_em(" ") if line else 0.0
        if line and used + space + word_em <= width_em:
            line, used = f"{line} {word}", used + space + word_em
            continue
        if line:
            lines.append(line)
        line, used = "", 0.0
        for ch in word:
            ch_em = _char_em(ch)
            if line and used + ch_em > width_em:
                lines.append(line)
                line, used = "", 0.0
            line, used = line + ch, used + ch_em
    lines.append(line)
    return lines


def _latex_long(table: Table, cells: list[list[str]]) -> str:
    """A long table as one or more longtables that fit the text width.

    In the largest font size it fits in; else in the smallest, with its widest columns
    wrapped (``p{}``) where that breaks no word; else in parts of as many columns as fit
    that way, each with the first (label) column again. A part that still does not fit
    wraps inside words (a long name) too.
    """
    header = list(table.columns)
    align = table.alignment()
    columns = [[header[j]] + [r[j] for r in cells if j < len(r)] for j in range(len(header))]
    widths = [max(_text_em(c) for c in col) for col in columns]
    # The widest word of each column's body: a wrapped column is never narrower (a
    # header may wrap inside a word, a long run name; a number never does).
    words = [
        max([_MIN_P_EM] + [_text_em(w) for c in col[1:] for w in one_line(c).split(" ")])
        for col in columns
    ]
    for command, scale in _LONG_SIZES:
        if _fits(widths, scale):
            return _longtable(
                header, cells, align, table.caption, table.label, (command, scale), {}
            )
    size = _LONG_SIZES[-1]
    wrap = _p_widths(widths, words, size[1])
    if wrap is not None:
        return _longtable(header, cells, align, table.caption, table.label, size, wrap)
    # Parts: a label column wider than a third of the line is wrapped to that third.
    fixed = {0: _TEXTWIDTH_EM / 3} if widths[0] * size[1] * _SPARE > _TEXTWIDTH_EM / 3 else {}
    parts: list[list[int]] = []
    for j in range(1, len(header)):
        part = [0, *parts[-1], j] if parts else []
        sub = ([widths[i] for i in part], [words[i] for i in part])
        if part and _p_widths(*sub, size[1], fixed) is not None:
            parts[-1].append(j)
        else:
            parts.append([j])
    out = []
    for k, part in enumerate([[0, *p] for p in parts] or [[0]], 1):
        part_widths = [widths[i] for i in part]
        wrap = _p_widths(part_widths, [words[i] for i in part], size[1], fixed)
        if wrap is None:  # one column too wide on its own: its words are cut as well
            wrap = _p_widths(part_widths, [0.0] * len(part), size[1], fixed) or {}
        caption = table.caption + (f" (part {k} of {len(parts)})" if len(parts) > 1 else "")
        out.append(
            _longtable(
                [header[i] for i in part],
                [[r[i] if i < len(r) else MISSING for i in part] for r in cells],
                "".join(align[i] for i in part),
                caption,
                table.label if k == 1 else "",
                size,
                wrap,
            )
        )
    return "".join(out)


def _p_widths(
    widths: list[float], words: list[float], scale: float, fixed: dict[int, float] | None = None
) -> dict[int, float] | None:
    """The columns to wrap, and their width (em of 10pt text), so that all fit: columns
    narrower than an equal share of the line keep their width, the others share the
    rest equally; ``fixed`` columns are wrapped at the width given. ``{}`` where all fit
    unwrapped, None where a column wrapped here would be narrower than its widest word
    (``words``)."""
    fixed = fixed or {}
    need = [fixed.get(j, w * scale * _SPARE) for j, w in enumerate(widths)]
    room = _TEXTWIDTH_EM - 2 * _TABCOLSEP_EM * len(widths)
    if sum(need) <= room:
        return dict(fixed)
    wide = set(range(len(widths))) - set(fixed)
    share = 0.0
    while wide:
        share = (room - sum(n for j, n in enumerate(need) if j not in wide)) / len(wide)
        narrow = {j for j in wide if need[j] <= share}
        if not narrow:
            break
        wide -= narrow
    if not wide or any(words[j] * scale * _SPARE > share - _P_SPARE_EM for j in wide):
        return None
    return {**fixed, **{j: share for j in sorted(wide)}}


def _longtable(
    header: list[str],
    cells: list[list[str]],
    align: str,
    caption: str,
    label: str,
    size: tuple[str, float],
    wrap: dict[int, float],
) -> str:
    """One longtable: caption and header on its first page, the header again (with a
    "continued" caption) on the next ones, a bottom rule on every page.

    ``size`` is a font size command and how wide its glyphs are (see ``_LONG_SIZES``);
    ``wrap`` maps a column to a width in em of 10pt text: that column is a ``p{}`` column
    whose cells are broken into lines (``\\newline``) that fit it.
    """
    command, scale = size
    spec = "".join(
        f"p{{{math.floor(wrap[j] * 100) / 10:.1f}pt}}" if j in wrap else a
        for j, a in enumerate(align)
    )
    # Lines a little narrower than the column: clear of its edge.
    line_em = {j: (w - _P_SPARE_EM) / (scale * _SPARE) for j, w in wrap.items()}

    def row(values: list[str]) -> str:
        out = [
            r"\newline ".join(_latex_cell(p) for p in _wrap(v, line_em[j]))
            if j in wrap
            else _latex_cell(v)
            for j, v in enumerate(values)
        ]
        return " & ".join(out) + r" \\"

    head = [r"\toprule", row(header), r"\midrule"]
    lines = [r"\begingroup", command] if command else []
    lines.append(rf"\begin{{longtable}}{{{spec}}}")
    if caption:
        tag = rf"\label{{{_latex_label(label)}}}" if label else ""
        lines.append(rf"\caption{{{_latex_caption(caption)}}}{tag} \\")
    lines += [*head, r"\endfirsthead"]
    if caption:
        lines.append(r"\caption[]{(continued)} \\")
    lines += [*head, r"\endhead", r"\bottomrule", r"\endfoot"]
    lines += [row(r) for r in cells]
    lines.append(r"\end{longtable}")
    if command:
        lines.append(r"\endgroup")
    return "\n".join(lines) + "\n"


_RATIO_X = re.compile(r"(?<=\d)x(?=$|[\s),;])")


def _times(tex: str) -> str:
    """A ratio such as ``1.45x`` typeset as ``1.45$\\times$`` (escaped text in, out)."""
    return _RATIO_X.sub(lambda _: r"$\times$", tex)


def table_to_latex(table: Table) -> str:
    """A table as LaTeX that fits the page (see :meth:`Table.to_latex`)."""
    cells = table.cells()
    if len(cells) <= LONG_TABLE_ROWS:
        lines = len(cells) + _caption_lines(table.caption)
        for command, most in _FLOAT_SIZES:
            if lines <= most:
                return _latex_float(table, cells, command)
    return _latex_long(table, cells)


def _latex_float(table: Table, cells: list[list[str]], command: str) -> str:
    lines = [r"\begin{table}[ht]", r"\centering", *([command] if command else [])]
    lines += [
        # Scaled only where wider than the line (never enlarged): TeX measures it.
        r"\resizebox{\ifdim\width>\linewidth\linewidth\else\width\fi}{!}"
        rf"{{\begin{{tabular}}{{{table.alignment()}}}",
        r"\toprule",
        _latex_row(table.columns),
        r"\midrule",
        *(_latex_row(row) for row in cells),
        r"\bottomrule",
        # No line break before the closing brace: it would be a space in the box.
        r"\end{tabular}}",
    ]
    if table.caption:
        lines.append(rf"\caption{{{_latex_caption(table.caption)}}}")
    if table.label:
        lines.append(rf"\label{{{_latex_label(table.label)}}}")
    lines.append(r"\end{table}")
    return "\n".join(lines) + "\n"
