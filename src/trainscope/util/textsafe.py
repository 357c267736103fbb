"""Text from run records and data files made inert wherever it lands (torch-free).

Users share run directories, so every string a record holds (summary fields, config
values, env.json, metrics lines, directory names, study labels and argv) is text someone
else chose. Printed or written as it is, it could act: an ANSI/OSC escape retitles or
clears the terminal, rich markup restyles it, ``<script>`` or ``[x](javascript:...)``
runs in a Markdown viewer, ``\\input{/etc/passwd}`` runs in LaTeX, ``$...$`` switches a
matplotlib label into mathtext. Each destination has one function here, applied where
text is rendered for it, never at the call sites that build the content:

- the terminal: :func:`terminal_text` (and :func:`rich_text` / :func:`rich_markup` for rich);
- Markdown: :func:`markdown_text` (literal text), :func:`markdown_code_span`;
- HTML: :func:`html_text` (``html.escape``, controls shown as in the other outputs);
- LaTeX: :func:`latex_escape` (cells, captions, and ``%`` comments alike);
- matplotlib: :func:`plot_text`.

rich is imported inside the functions that need it, so importing this module is free.
"""

from __future__ import annotations

import html
import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.text import Text

# ---------------------------------------------------------------------------------------
# Control characters: shown, never obeyed
# ---------------------------------------------------------------------------------------

# C0 controls, DEL and C1 controls (ESC, BEL, CR, backspace, CSI 0x9b, OSC 0x9d, NEL...),
# plus the Unicode characters that reorder or break lines behind the reader's back: bidi
# embeddings/overrides/isolates/marks ("Trojan Source") and the line/paragraph separators.
# Lone surrogates too: a file name that is not UTF-8 (os.fsdecode's surrogateescape turns
# its byte 0xff into "\udcff") cannot be encoded as UTF-8, drawn by a font or written to
# a report file.
_CONTROL = re.compile(
    "[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029\ud800-\udfff]"
)


def _visible(char: str) -> str:
    # As Python writes it in a string literal: "\x1b", "\r", "\u202e". Printable ASCII,
    # so a reader sees that the text held a control character, and which one. A byte of a
    # non-UTF-8 file name (surrogate-escaped) is shown as that byte: "\xff".
    if "\udc80" <= char <= "\udcff":
        return f"\\x{ord(char) - 0xDC00:02x}"
    return char.encode("unicode_escape").decode("ascii")


def terminal_text(text: Any, *, newlines: bool = False) -> str:
    """``text`` safe to print on a terminal: every control character shown as an escape.

    ESC (ANSI CSI/OSC sequences), BEL, CR, backspace, the other C0/C1 controls and bidi
    overrides become printable escapes (``"\\x1b"``, ``"\\r"``). ``newlines=True`` keeps
    line feeds (CRLF becomes LF) and tabs, for text meant to span lines (a traceback); by
    default they are shown as ``"\\n"`` / ``"\\t"`` too, so one value stays on one line.
    Idempotent. Does not touch rich markup: see :func:`rich_text` and :func:`rich_markup`.
    """
    s = str(text)
    if newlines:
        s = s.replace("\r\n", "\n")

    def repl(m: re.Match[str]) -> str:
        c = m.group(0)
        return c if newlines and c in "\n\t" else _visible(c)

    return _CONTROL.sub(repl, s)


def one_line(text: Any) -> str:
    """``text`` on one line: line breaks and tabs become spaces, other controls escapes."""
    return terminal_text(re.sub(r"\r\n|[\r\n\t\u2028\u2029\x85]", " ", str(text)))


def rich_text(text: Any, *, newlines: bool = False, style: str = "") -> Text:
    """``text`` as a rich ``Text``: printed literally (no markup parsing), controls shown.

    Use it for any record text handed to rich as a renderable (a table cell, a column
    header, a title, a printed line): rich parses plain ``str`` renderables as markup.
    """
    from rich.text import Text

    return Text(terminal_text(text, newlines=newlines), style=style)


def rich_markup(text: Any, *, newlines: bool = False) -> str:
    """``text`` to embed in a rich markup string: controls shown, ``[tags]`` escaped."""
    from rich.markup import escape

    return escape(terminal_text(text, newlines=newlines))


# ---------------------------------------------------------------------------------------
# Markdown
# ---------------------------------------------------------------------------------------

# Characters that open HTML, entities or inline markup anywhere in a line: "<", ">" and
# "&" become entities (a renderer shows them as the character; no "<script" or "<http:"
# survives in the file), the rest get a backslash ("$" too: GitHub and VS Code render
# "$...$" as math). An "_" between two letters or digits can neither open nor close
# emphasis (CommonMark's flanking rules), so "num_workers" stays readable in the file.
_MD_CHARS = re.compile(r"[<>&\\`*\[\]#|~$]|(?<![^\W_])_|_(?![^\W_])")
_MD_ENTITIES = {"<": "&lt;", ">": "&gt;", "&": "&amp;"}
# What only means something at the start of a block: list items ("- ", "+ ", "1. ") and
# thematic breaks ("---"). "#", "*", "_" and ">" are escaped everywhere already.
_MD_BLOCK_START = re.compile(r"^(?:[-+](?=\s|$)|-{3,}|\d+(?=[.)](?:\s|$)))")


def markdown_text(text: Any, at_line_start: bool = False) -> str:
    """``text`` as literal Markdown (CommonMark/GFM) on one line.

    A renderer shows exactly ``text``: it cannot open an HTML tag, entity or autolink,
    make a link, image, emphasis or code span, end a table cell or row, or (with
    ``at_line_start``, for text that starts a block) start a heading, list or rule.
    Line breaks become spaces, other control characters printable escapes.
    """
    out = _MD_CHARS.sub(lambda m: _MD_ENTITIES.get(m.group(0), "\\" + m.group(0)), one_line(text))
    if at_line_start:
        m = _MD_BLOCK_START.match(out)
        if m:  # "1. x" -> "1\. x", "- x" -> "\- x"
            g = m.group(0)
            out = (g + "\\" + out[len(g) :]) if g[0].isdigit() else "\\" + out
    return out


def markdown_code_span(text: Any) -> str:
    """``text`` shown as inline code.

    Inside backticks nothing is interpreted, but a ``<``, ``>`` or ``&`` would still be
    a raw tag in the file for any tool that is not a CommonMark renderer, so such text
    goes into an HTML ``<code>`` element instead, escaped like any other text (as does
    text with a backtick, which would end the span).
    """
    s = one_line(text)
    if any(c in s for c in "<>&`"):
        return f"<code>{markdown_text(s)}</code>"
    # CommonMark strips one space from each end of a code span that has both: pad them.
    if s.startswith(" ") and s.endswith(" ") and s.strip():
        s = f" {s} "
    return f"`{s}`"


# ---------------------------------------------------------------------------------------
# HTML
# ---------------------------------------------------------------------------------------


def html_text(text: Any) -> str:
    """``text`` as HTML text or attribute value: ``html.escape``, controls shown as escapes.

    Escaping alone already makes any text inert in a page; control characters are shown
    too, so the page says what the Markdown says and ``cat report.html`` obeys nothing.
    """
    return html.escape(terminal_text(text, newlines=True))


# ---------------------------------------------------------------------------------------
# LaTeX
# ---------------------------------------------------------------------------------------

_LATEX_SPECIALS = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    # A "[" right after "\\", "\midrule" or "\toprule" would be read as their optional
    # argument; braced, it is a plain bracket everywhere.
    "[": "{[}",
    "]": "{]}",
    # Not commands, but in the default OT1 font encoding they print as other glyphs.
    "<": r"\textless{}",
    ">": r"\textgreater{}",
    "|": r"\textbar{}",
    # A few non-ASCII characters our own formatting emits; plain pdflatex may lack them.
    "–": "--",
    "—": "---",
    "±": r"\ensuremath{\pm}",
    "≈": r"\ensuremath{\approx}",
    "≥": r"\ensuremath{\geq}",
    "≤": r"\ensuremath{\leq}",
    "×": r"\ensuremath{\times}",
    "µ": r"\ensuremath{\mu}",
    "α": r"\ensuremath{\alpha}",
    "β": r"\ensuremath{\beta}",
    "·": r"\ensuremath{\cdot}",
    "∞": r"\ensuremath{\infty}",
}
# Pairs the fonts set as one glyph ("--" an en dash, "''" a closing quote, "!`" an
# inverted "!"): the first of such a pair gets an empty group after it, so the text
# prints as typed ("--flag" stays two hyphens).
_LIGATURE_FIRST = r"[-,'`!?](?=[-,'`])"
_LATEX_RE = re.compile("|".join([_LIGATURE_FIRST, *(re.escape(k) for k in _LATEX_SPECIALS)]))


def latex_escape(text: Any) -> str:
    """``text`` as literal LaTeX text on one line, safe in a cell, caption or ``%`` comment.

    Every special (``\\ { } $ & # ^ _ ~ %`` and brackets) is escaped in one pass, so
    the backslashes added are not escaped again. Line breaks become spaces and other
    control characters printable escapes first: a newline would end a ``%`` comment
    (and a blank line ends a paragraph, an error inside a table).
    """
    return _LATEX_RE.sub(lambda m: _LATEX_SPECIALS.get(m.group(0), m.group(0) + "{}"),
                         one_line(text))  # fmt: skip


# ---------------------------------------------------------------------------------------
# matplotlib
# ---------------------------------------------------------------------------------------


def plot_text(text: Any) -> str:
    """``text`` for a matplotlib title, label, legend entry or tick: shown as written.

    An unescaped ``$`` pair would switch matplotlib into mathtext (``$\\invalid$``
    raises when drawn); ``\\$`` is a literal dollar and, with no unescaped ``$`` left,
    backslashes stay literal. Control characters are shown as escapes. (LaTeX rendering,
    ``text.usetex``, must be off as well: see ``trainscope.render.plots``.)
    """
    return terminal_text(text, newlines=True).replace("$", r"\$")
