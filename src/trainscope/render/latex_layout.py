"""LaTeX for trainscope's tables, sized to fit a page (booktabs rules).

Nothing is scaled: a table scaled down to its line is set in print too small to read.
Its width is estimated here from measured glyph widths instead, and it is set to fit, the
first of these that does: in the normal size as it is; its long headers stacked over
their columns (in two lines, else three); its columns closer; its text columns wrapped
(``p{}``); the same in ``\\small``, then in ``\\footnotesize`` (8pt, 80% of the text,
the smallest); any of its widest columns wrapped (numbers stay right-aligned, a spread
wraps before its range); split into parts of as many columns as fit, the first (label)
column repeated. No word is broken but a name wider than a part. A short table is a
float (one taller than a page is a longtable instead), a long one a ``longtable`` that
breaks across pages. :meth:`trainscope.render.table.Table.to_latex` is the entry point.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from trainscope.util.textsafe import latex_escape, one_line


class Table(Protocol):
    """What the layout needs of a :class:`trainscope.render.table.Table` (a protocol,
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

# The packages a tables.tex (or compare.tex) needs: longtable is in TeX Live's
# latex-base, booktabs in latex-recommended. Nothing is scaled, so graphicx is not one.
LATEX_PACKAGES = ("booktabs", "longtable")
# The header comment line that says so (a file's second line).
LATEX_NEEDS = (
    "% Needs "
    + ", ".join(rf"\usepackage{{{p}}}" for p in LATEX_PACKAGES[:-1])
    + rf" and \usepackage{{{LATEX_PACKAGES[-1]}}} in the preamble; \input{{tables.tex}}"
    " where wanted."
)

# A table of more body rows is a longtable, which breaks across pages.
LONG_TABLE_ROWS = 40
# A table of up to that many rows is a float, set at most in the largest of these sizes
# where its lines (rows, wrapped cells and caption, estimated at the normal size) are at
# most as many as given: measured on the default (10pt) article's page, which holds 43
# such lines of normal text, 46 small or 52 footnotesize ones; three are spare. Where
# none fits, the table is a longtable too.
_FLOAT_SIZES = (("", 40), (r"\small", 43), (r"\footnotesize", 49))

# Nothing is scaled (a scaled table is set in print too small to read): a table's width
# is estimated instead, in em of 10pt text, and the table is set to fit its line. The
# default article's line (tables.tex, compare.tex) is 345pt; a document passes its own.
TEXTWIDTH_EM = 34.5
# \tabcolsep either side of every column: the default 6pt, else 3pt (a 6pt gap between
# two columns, still clear) before a column has to be wrapped.
_TABCOLSEP_EM = 0.6
_TIGHT_TABCOLSEP_EM = 0.3
# Font sizes a table may use, largest first, with how wide their glyphs are relative to
# the normal size (measured: 9pt and 8pt Computer Modern are drawn relatively wider).
# \footnotesize (8pt, 80% of the text) is the smallest: below it print is hard to read.
_SIZES = (("", 1.0), (r"\small", 0.925), (r"\footnotesize", 0.85))
_SPARE = 1.02  # kerning and rounding: estimates are taken 2% wider still
_P_SPARE_EM = 0.1  # and lines wrapped in a p{} column 1pt narrower than it
_CAPTION_PIECE_EM = 8.0  # a caption may break inside a word wider than this
_MIN_P_EM = 5.0  # a wrapped (p{}) column is at least this wide, unless it must not be
# A header wider than its column's body may be stacked over it in about this many lines
# at most: two where that is enough, else three.
_STACK_LINES = (1, 2, 3)

# Glyph widths in em of Computer Modern Roman, as measured in both the OT1 and the T1
# encodings (cmr10, ecrm1000), rounded up by class: the estimate is never below the real
# width, so a table estimated to fit does.
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


def _caption_lines(caption: str, line_em: float) -> int:
    # "Table 10: " (4 em) and the caption, on lines as wide as the text.
    return 1 + int((_text_em(caption) + 4.0) // (line_em - 0.5)) if caption else 0


def _latex_cell(text: str) -> str:
    tex = _times(latex_escape(text))
    # A cell starting with "*" right after the previous row's "\\" would be read as
    # "\\*" (and the star dropped): an empty group in front keeps it text.
    return "{}" + tex if tex.startswith("*") else tex


def _latex_caption(caption: str) -> str:
    """A caption may break inside a long word (a run name, a path), every 8 em at most:
    a word wider than the line would stick out."""
    words = []
    for word in one_line(caption).split(" "):
        pieces = _wrap(word, _CAPTION_PIECE_EM) if _text_em(word) > _CAPTION_PIECE_EM else [word]
        words.append(r"\allowbreak{}".join(_times(latex_escape(p)) for p in pieces))
    return " ".join(words)


def _latex_label(label: str) -> str:
    # Labels are identifiers, not text: keep only characters LaTeX accepts there.
    return re.sub(r"[^A-Za-z0-9:._-]", "-", label)


def _wrap(text: str, width_em: float) -> list[str]:
    """``text`` in lines no wider than ``width_em`` (estimated): at spaces where a word
    fits, inside a word (a name, a path) where it does not; a parenthesised group kept
    whole where it fits (:func:`_units`)."""
    lines: list[str] = []
    line, used = "", 0.0
    for word in _units(text, width_em):
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


def _units(text: str, width_em: float) -> list[str]:
    """The words of ``text``, a parenthesised group of them as one where it is at most
    ``width_em`` wide: a spread wraps before its range ("12.3" over "(11.9–12.8)"), and
    "(all equal)" stays whole."""
    units: list[str] = []
    group: list[str] = []
    for word in one_line(text).split(" "):
        if not group and not word.startswith("("):
            units.append(word)
            continue
        group.append(word)
        if word.endswith(")"):
            joined = " ".join(group)
            units += [joined] if _text_em(joined) <= width_em else group
            group = []
    return units + group


# ---------------------------------------------------------------------------------------
# Layout: font size, column gap, stacked headers, wrapped columns, parts
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Column:
    """One column's text and its estimated widths, in em of 10pt text (normal size)."""

    head: str
    align: str
    cells: tuple[str, ...]  # its body
    body_em: float  # its widest body cell
    head_em: float  # its header on one line
    stacks: tuple[tuple[str, ...], ...]  # its header in lines, by _STACK_LINES
    stack_ems: tuple[float, ...]  # the widest line of each
    word_em: float  # its widest body word, at least _MIN_P_EM: a p{} column is never narrower


def _stack(head: str, body_em: float, lines: int) -> list[str]:
    """``head`` in at most ``lines`` lines at spaces (never inside a word), as narrow as
    that allows but no narrower than its column's body."""
    words = one_line(head).split(" ")
    least = max([body_em, *(_text_em(w) for w in words)])
    # The narrowest is as wide as some run of its words: try each, narrowest first.
    runs = {_text_em(" ".join(words[i:j])) for i in range(len(words))
            for j in range(i + 1, len(words) + 1)}  # fmt: skip
    for width in sorted(w for w in runs | {least} if w >= least):
        if len(wrapped := _wrap(head, width)) <= lines:
            return wrapped
    return [head]


def _columns(table: Table, cells: list[list[str]]) -> list[_Column]:
    out = []
    for j, (head, align) in enumerate(zip(table.columns, table.alignment())):
        body = [r[j] for r in cells if j < len(r)]
        body_em = max((_text_em(c) for c in body), default=0.0)
        stacks = [tuple(_stack(head, body_em, n)) for n in _STACK_LINES]
        words = [_text_em(w) for c in body for w in one_line(c).split(" ")]
        out.append(
            _Column(
                head=head,
                align=align,
                cells=tuple(body),
                body_em=body_em,
                head_em=_text_em(head),
                stacks=tuple(stacks),
                stack_ems=tuple(max(_text_em(line) for line in st) for st in stacks),
                word_em=max([_MIN_P_EM, *words]),
            )
        )
    return out


@dataclass(frozen=True)
class _Layout:
    """How a table, or one part of it, is set."""

    columns: tuple[int, ...]  # the table's columns shown
    size: tuple[str, float]  # a font size command and its glyph scale (see _SIZES)
    sep_em: float  # \tabcolsep
    stack: int  # headers wider than their body in _STACK_LINES[stack] lines over it
    wrap: dict[int, float]  # p{} columns (positions in ``columns``): width, em of 10pt


def _need(col: _Column, scale: float, stack: int) -> float:
    """Estimated width of a column's text in a font ``scale`` as wide (em of 10pt)."""
    return max(col.body_em, col.stack_ems[stack]) * scale * _SPARE


# What each font size tries, best first: as it is; headers in two lines, in three;
# columns closer. The last is how a wrapped table is set too.
_STEPS = ((_TABCOLSEP_EM, 0), (_TABCOLSEP_EM, 1), (_TABCOLSEP_EM, 2), (_TIGHT_TABCOLSEP_EM, 2))
_MOST = _STEPS[-1][1]


def _fit(
    cols: list[_Column],
    shown: list[int],
    line_em: float,
    sizes: Sequence[tuple[str, float]],
    fixed: dict[int, float] | None = None,
) -> _Layout | None:
    """The first layout of columns ``shown`` that fits a line ``line_em`` wide: in the
    largest of ``sizes`` where one of ``_STEPS`` fits, or where its text (``l``) columns
    wrapped (``p{}``) do; else in the smallest with any of its widest columns wrapped;
    never a word broken. None where none fits. ``fixed`` columns (positions in
    ``shown``) are wrapped at the width given, so only the last way is tried."""
    part = [cols[j] for j in shown]
    for size in sizes if not fixed else ():
        for sep, stack in _STEPS:
            width = sum(_need(c, size[1], stack) for c in part) + 2 * sep * len(part)
            if width <= line_em:
                return _Layout(tuple(shown), size, sep, stack, {})
        text = {k for k, c in enumerate(part) if c.align == "l"}
        if text and (layout := _wrapped(part, shown, line_em, size, None, text)) is not None:
            return layout
    return _wrapped(part, shown, line_em, sizes[-1], fixed, None)


def _wrapped(
    part: list[_Column],
    shown: list[int],
    line_em: float,
    size: tuple[str, float],
    fixed: dict[int, float] | None,
    allowed: set[int] | None,
) -> _Layout | None:
    """Columns ``shown`` in ``size``, headers stacked and columns closer, the widest of
    those ``allowed`` (positions; None: any) wrapped so that all fit (:func:`_p_widths`),
    each as narrow as its lines then need; None where that would break a word."""
    need = [_need(c, size[1], _MOST) for c in part]
    least = [c.word_em * size[1] * _SPARE for c in part]
    room = line_em - 2 * _TIGHT_TABCOLSEP_EM * len(part)
    wrap = _p_widths(need, least, room, fixed, allowed)
    if wrap is None:
        return None
    snug = {k: _snug(part[k], w, size[1]) for k, w in wrap.items()}
    return _Layout(tuple(shown), size, _TIGHT_TABCOLSEP_EM, _MOST, snug)


def _snug(col: _Column, width: float, scale: float) -> float:
    """A wrapped column's width (em of 10pt) cut down to its widest line once wrapped at
    ``width``: an equal share of the line is often more than its lines need."""
    inner = (width - _P_SPARE_EM) / (scale * _SPARE)
    lines = [line for text in (col.head, *col.cells) for line in _wrap(text, inner)]
    widest = max(_text_em(line) for line in lines) * scale * _SPARE + _P_SPARE_EM
    # Rounded up, so that the same lines fit again when the cells are wrapped at it.
    return min(width, math.ceil(widest * 100) / 100)


def _plan(cols: list[_Column], line_em: float, sizes: Sequence[tuple[str, float]]) -> list[_Layout]:
    """A table's layout (:func:`_fit`), else its parts: as many columns as fit each, in
    the smallest size, the first (label) column again in each, wrapped to a third of the
    line where wider. A part too wide with a single column wraps inside words too."""
    whole = _fit(cols, list(range(len(cols))), line_em, sizes)
    if whole is not None:
        return [whole]
    smallest = sizes[-1:]
    scale = smallest[0][1]
    fixed = {0: line_em / 3} if _need(cols[0], scale, _MOST) > line_em / 3 else {}
    parts: list[list[int]] = []
    for j in range(1, len(cols)):
        if parts and _fit(cols, [0, *parts[-1], j], line_em, smallest, fixed) is not None:
            parts[-1].append(j)
        else:
            parts.append([j])
    plan = []
    for part in [[0, *p] for p in parts] or [[0]]:
        layout = _fit(cols, part, line_em, smallest, fixed)
        if layout is None:  # one column too wide on its own: its words are cut as well
            room = line_em - 2 * _TIGHT_TABCOLSEP_EM * len(part)
            need = [_need(cols[j], scale, _MOST) for j in part]
            wrap = _p_widths(need, [0.0] * len(part), room, fixed) or {}
            layout = _Layout(tuple(part), smallest[0], _TIGHT_TABCOLSEP_EM, _MOST, wrap)
        plan.append(layout)
    return plan


def _p_widths(
    need: list[float],
    least: list[float],
    room: float,
    fixed: dict[int, float] | None = None,
    allowed: set[int] | None = None,
) -> dict[int, float] | None:
    """The columns to wrap, and their width (em of 10pt text), so that columns whose
    text is ``need`` wide fit ``room``: columns narrower than an equal share keep their
    width, and so do those not ``allowed`` (None: all are), the others share the rest
    equally; ``fixed`` columns are wrapped at the width given. ``{}`` where all fit
    unwrapped, None where a wrapped column would be narrower than ``least`` (its widest
    word)."""
    fixed = fixed or {}
    need = [fixed.get(j, n) for j, n in enumerate(need)]
    if sum(need) <= room:
        return dict(fixed)
    wide = set(range(len(need)) if allowed is None else allowed) - set(fixed)
    share = 0.0
    while wide:
        share = (room - sum(n for j, n in enumerate(need) if j not in wide)) / len(wide)
        narrow = {j for j in wide if need[j] <= share}
        if not narrow:
            break
        wide -= narrow
    if not wide or any(least[j] > share - _P_SPARE_EM for j in wide):
        return None
    return {**fixed, **{j: share for j in sorted(wide)}}


# ---------------------------------------------------------------------------------------
# Rendering a layout
# ---------------------------------------------------------------------------------------


def _lines(text: str, k: int, layout: _Layout) -> list[str]:
    """The lines of a cell in column position ``k``: one, unless its column is wrapped."""
    if k not in layout.wrap:
        return [text]
    # Lines a little narrower than the column: clear of its edge.
    return _wrap(text, (layout.wrap[k] - _P_SPARE_EM) / (layout.size[1] * _SPARE))


def _cell(text: str, k: int, layout: _Layout, align: str) -> str:
    """A cell in column position ``k``; in a wrapped (``p{}``) column, its lines."""
    lines = [_latex_cell(p) for p in _lines(text, k, layout)]
    if k in layout.wrap and align == "r":
        # A right-aligned column keeps its lines right-aligned when wrapped: "fill"
        # glue before each line outstretches the "fil" of \newline and of the paragraph's
        # end (\raggedleft would redefine "\\", which ends the table's row).
        lines = [r"\hspace*{\fill}" + line for line in lines]
    return r"\newline ".join(lines)


def _row(values: list[str], layout: _Layout, cols: list[_Column]) -> str:
    aligns = [cols[j].align for j in layout.columns]
    cells = [_cell(v, k, layout, a) for k, (v, a) in enumerate(zip(values, aligns))]
    return " & ".join(cells) + r" \\"


def _head_row(layout: _Layout, cols: list[_Column]) -> str:
    """The header row; a stacked header is a bottom-aligned box as wide as estimated,
    its lines aligned as its column is."""
    cells = []
    for k, j in enumerate(layout.columns):
        col = cols[j]
        stack = col.stacks[layout.stack]
        if k in layout.wrap or len(stack) == 1:
            cells.append(_cell(col.head, k, layout, col.align))
            continue
        width = math.ceil(col.stack_ems[layout.stack] * layout.size[1] * _SPARE * 100) / 10
        ragged = r"\raggedleft" if col.align == "r" else r"\raggedright"
        lines = r"\\".join(_latex_cell(line) for line in stack)
        cells.append(rf"\parbox[b]{{{width:.1f}pt}}{{{ragged} {lines}}}")
    return " & ".join(cells) + r" \\"


def _height(layout: _Layout, cols: list[_Column], cells: list[list[str]]) -> int:
    """Lines a layout's rows take, its header's beyond the first included."""
    heads = [
        len(_lines(cols[j].head, k, layout))
        if k in layout.wrap
        else len(cols[j].stacks[layout.stack])
        for k, j in enumerate(layout.columns)
    ]
    rows = [max([1, *(len(_lines(v, k, layout)) for k, v in enumerate(r))]) for r in cells]
    return max(heads, default=1) - 1 + sum(rows)


def _spec(layout: _Layout, cols: list[_Column]) -> str:
    return "".join(
        f"p{{{math.floor(layout.wrap[k] * 100) / 10:.1f}pt}}" if k in layout.wrap else cols[j].align
        for k, j in enumerate(layout.columns)
    )


def _setup(layout: _Layout) -> list[str]:
    """The size and column gap a layout is set in (inside a group or float)."""
    lines = [layout.size[0]] if layout.size[0] else []
    if layout.sep_em != _TABCOLSEP_EM:
        lines.append(rf"\setlength{{\tabcolsep}}{{{layout.sep_em * 10:g}pt}}")
    return lines


def _latex_float(
    layout: _Layout,
    cols: list[_Column],
    cells: list[list[str]],
    caption: str,
    label: str,
    placement: str,
) -> str:
    lines = [rf"\begin{{table}}[{placement}]", r"\centering", *_setup(layout)]
    lines += [rf"\begin{{tabular}}{{{_spec(layout, cols)}}}", r"\toprule"]
    lines += [_head_row(layout, cols), r"\midrule", *(_row(r, layout, cols) for r in cells)]
    lines += [r"\bottomrule", r"\end{tabular}"]
    if caption:
        lines.append(rf"\caption{{{_latex_caption(caption)}}}")
    if label:
        lines.append(rf"\label{{{_latex_label(label)}}}")
    lines.append(r"\end{table}")
    return "\n".join(lines) + "\n"


def _longtable(
    layout: _Layout, cols: list[_Column], cells: list[list[str]], caption: str, label: str
) -> str:
    """One longtable: caption and header on its first page, the header again (with a
    "continued" caption) on the next ones, a bottom rule on every page."""
    head = [r"\toprule", _head_row(layout, cols), r"\midrule"]
    setup = _setup(layout)
    lines = [r"\begingroup", *setup] if setup else []
    lines.append(rf"\begin{{longtable}}{{{_spec(layout, cols)}}}")
    if caption:
        tag = rf"\label{{{_latex_label(label)}}}" if label else ""
        lines.append(rf"\caption{{{_latex_caption(caption)}}}{tag} \\")
    lines += [*head, r"\endfirsthead"]
    if caption:
        lines.append(r"\caption[]{(continued)} \\")
    lines += [*head, r"\endhead", r"\bottomrule", r"\endfoot"]
    lines += [_row(r, layout, cols) for r in cells]
    lines.append(r"\end{longtable}")
    if setup:
        lines.append(r"\endgroup")
    return "\n".join(lines) + "\n"


_RATIO_X = re.compile(r"(?<=\d)x(?=$|[\s),;])")


def _times(tex: str) -> str:
    """A ratio such as ``1.45x`` typeset as ``1.45$\\times$`` (escaped text in, out)."""
    return _RATIO_X.sub(lambda _: r"$\times$", tex)


def _parts(
    plan: list[_Layout], table: Table, cells: list[list[str]]
) -> list[tuple[_Layout, list[list[str]], str, str]]:
    """Each part of a plan with its rows, caption and label (the first part's alone).
    The first part has the table's caption; the next ones say they continue it, rather
    than repeat a caption of several lines."""
    out = []
    for k, layout in enumerate(plan, 1):
        split = len(plan) > 1
        rows = [[r[i] if i < len(r) else MISSING for i in layout.columns] for r in cells]
        caption = table.caption if k == 1 or not table.caption else "The table above, continued"
        caption += f" (part {k} of {len(plan)})" if split else ""
        out.append((layout, rows if split else cells, caption, table.label if k == 1 else ""))
    return out


def table_to_latex(table: Table, *, line_em: float = TEXTWIDTH_EM, placement: str = "ht") -> str:
    """A table as LaTeX that fits a line ``line_em`` wide, in em of 10pt text (see
    :meth:`Table.to_latex`); a float (a short table) is placed as ``placement`` says."""
    cells = table.cells()
    cols = _columns(table, cells)
    if len(cells) <= LONG_TABLE_ROWS:
        floats = _float_parts(table, cells, cols, line_em)
        if floats is not None:
            return "".join(
                _latex_float(layout, cols, rows, cap, lab, placement)
                for layout, rows, cap, lab in floats
            )
    parts = _parts(_plan(cols, line_em, _SIZES), table, cells)
    return "".join(_longtable(layout, cols, rows, cap, lab) for layout, rows, cap, lab in parts)


def _float_parts(
    table: Table, cells: list[list[str]], cols: list[_Column], line_em: float
) -> list[tuple[_Layout, list[list[str]], str, str]] | None:
    """A short table's parts as floats, each in a size where it is not taller than a
    page; None where it would be (it is a longtable then)."""
    caption = _caption_lines(table.caption, line_em)
    first = next((k for k, (_, m) in enumerate(_FLOAT_SIZES) if len(cells) + caption <= m), None)
    if first is None:
        return None
    most = dict(_FLOAT_SIZES)
    parts = _parts(_plan(cols, line_em, _SIZES[first:]), table, cells)
    if any(_height(p, cols, rows) + caption > most[p.size[0]] for p, rows, _, _ in parts):
        return None
    return parts
