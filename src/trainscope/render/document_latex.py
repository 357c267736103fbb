"""A report :class:`~trainscope.render.document.Document` as a standalone LaTeX article.

:func:`document_to_latex` renders the same blocks as ``to_markdown`` and ``to_html``;
:func:`write_latex_document` writes ``report.tex`` and, where ``pdflatex`` is on PATH,
compiles it to ``report.pdf``.

Every piece of text is literal: it goes through ``textsafe.latex_escape`` one character
at a time (so ``\\input{/etc/passwd}`` prints as those characters and runs nothing), and
whatever non-ASCII character pdflatex cannot typeset from T1 and TS1 is shown as a
``<U+1F600>`` marker instead of stopping the run. Code (spans and blocks), and any word
too long for a line, may break between any two characters, most cheaply after ``/ _ - ,
=`` and the like, so a 300-character command line wraps instead of sticking out of the
page. Code is escaped text, not a verbatim environment: no input can end the block early.

Tables and figures stand where they are in the text, between two paragraphs (a table is
a ``[H]`` float, a figure a box), so no paragraph is broken around one; a table is sized
to the page's line (see :mod:`trainscope.render.latex_layout`), never scaled.

The preamble uses only packages of TeX Live's latex-base and latex-recommended:
fontenc, inputenc, textcomp, geometry, graphicx (figures), float (``[H]``) and what the
tables need (:data:`~trainscope.render.table.LATEX_PACKAGES`: booktabs, longtable).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import unicodedata
from dataclasses import replace
from pathlib import Path

from trainscope.errors import TrainscopeError
from trainscope.render.document import (
    Block,
    Bullets,
    CodeBlock,
    Document,
    Figure,
    Heading,
    Note,
    Paragraph,
    TableBlock,
    _Bold,
    _code_text,
    _parse_spans,
    _read_png,
    _Span,
    _Text,
    unique_labels,
)
from trainscope.render.table import LATEX_PACKAGES
from trainscope.util.textsafe import latex_escape, one_line

__all__ = ["document_to_latex", "write_latex_document"]

# Seconds one pdflatex run may take (the first run on a machine may draw its fonts).
PDFLATEX_TIMEOUT_S = 120
# The text's line: an A4 page less 2.5cm margins is 455pt, 45.5 em of the 10pt text.
REPORT_LINE_EM = 45.5

# ---------------------------------------------------------------------------------------
# Preamble
# ---------------------------------------------------------------------------------------

_PREAMBLE_HEAD = r"""\documentclass{article}
% T1: real glyphs for < > | " and accented letters; the text is UTF-8.
\usepackage[T1]{fontenc}
\usepackage[utf8]{inputenc}
% \textquotesingle and \textasciigrave in code (part of the kernel since 2020).
\usepackage{textcomp}
% A line 455pt wide (REPORT_LINE_EM), which the tables are sized for.
% No hyperref: the report has no links, and bookmarks would carry record text.
\usepackage[a4paper,margin=2.5cm]{geometry}
\usepackage{graphicx}
% [H]: a table stands where it is in the text, never inside a paragraph.
\usepackage{float}
"""

_PREAMBLE_TAIL = r"""
\setlength{\parindent}{0pt}
\setlength{\parskip}{0.5\baselineskip plus 2pt}
% A paragraph that cannot be set well is set loosely rather than past the margin.
\setlength{\emergencystretch}{3em}
% Breaks in code and overlong words: free after punctuation, costly elsewhere; the tiny
% stretch keeps a line of code alone feasible in justified text (as url.sty does).
\DeclareRobustCommand*{\tsbrk}{\penalty0\hskip0pt plus0.05em\relax}
\DeclareRobustCommand*{\tsany}{\penalty1000\hskip0pt plus0.05em\relax}
% A character no font here has, shown by its code point.
\DeclareRobustCommand*{\tsglyph}[1]{{\ttfamily\textless U+#1\textgreater}}
% A numbered figure caption outside a float (what capt-of does, without the package).
\makeatletter
\newcommand{\tsfigurecaption}[1]{\def\@captype{figure}\caption{#1}}
\makeatother
% Code: one paragraph a line, continuation lines indented under their first.
\newenvironment{tscode}{\par\smallskip\small\ttfamily\raggedright
  \setlength{\leftskip}{1em}\setlength{\parskip}{0pt}}{\par\smallskip}
\newcommand*{\tscl}{\par\hangindent=2em\hangafter=1\leavevmode\strut}
"""


def _preamble() -> str:
    packages = "".join(rf"\usepackage{{{p}}}" + "\n" for p in LATEX_PACKAGES)
    return _PREAMBLE_HEAD + packages + _PREAMBLE_TAIL


# ---------------------------------------------------------------------------------------
# Text
# ---------------------------------------------------------------------------------------

# A line may break after these inside code at no cost (paths, options, key=value lists).
_BREAK_AFTER = frozenset("/\\_-,=.:;&|+?!@#%)]}>")
# Plain words longer than this (a path, a run name) may break like code.
_LONG_WORD = 20
# Pairs T1 fonts turn into one glyph ("--" an en dash, ",," a low quote): kept apart.
_LIG_FIRST, _LIG_SECOND = frozenset("-–—`',!?"), frozenset("-–—`',")
# Code shows the characters as typed: straight quotes, and dashes that are not "--".
_CODE_CHARS = {
    " ": "\\ ",
    "`": r"\textasciigrave{}",
    "'": r"\textquotesingle{}",
    "–": r"\textendash{}",
    "—": r"\textemdash{}",
}


def _escape_run(text: str, *, code: bool, breakable: bool) -> str:
    """Escaped characters of one-line ``text``, with break points or ligature breakers
    between them (never next to a space, which is a break point itself)."""
    out: list[str] = []
    prev = ""
    for c in text:
        if prev and prev != " " and c != " ":
            if breakable:
                out.append(r"\tsbrk " if prev in _BREAK_AFTER else r"\tsany ")
            elif prev in _LIG_FIRST and c in _LIG_SECOND:
                out.append("{}")
        out.append(_CODE_CHARS.get(c, latex_escape(c)) if code else latex_escape(c))
        prev = c
    return "".join(out)


def _text(text: str) -> str:
    """Literal text on one line; overlong words may break anywhere."""
    words = one_line(unicodedata.normalize("NFC", text)).split(" ")
    return " ".join(_escape_run(w, code=False, breakable=len(w) > _LONG_WORD) for w in words)


def _code(text: str) -> str:
    """Literal code, spaces kept, breakable between any two characters."""
    return _escape_run(unicodedata.normalize("NFC", text), code=True, breakable=True)


def _inline(spans: list[_Span]) -> str:
    out = []
    for span in spans:
        if isinstance(span, _Text):
            out.append(_text(span.text))
        elif isinstance(span, _Bold):
            out.append(rf"\textbf{{{_inline(list(span.parts))}}}")
        else:
            out.append(rf"\texttt{{{_code(one_line(span.text))}}}")
    return "".join(out)


# Latin-1 and Latin Extended-A have T1/TS1 glyphs but for these; past them, the extra
# characters are those pdflatex set with T1 and TS1 (checked, TeX Live 2022).
_NATIVE_GAPS = frozenset("ĦħĸĿŀŉŦŧſ")
_NATIVE_EXTRA = frozenset("‚„‹›‐‑‒–—―‖‘’“”†‡•…‰‱※‽⁄⁒℃℗℞™℧℮←↑→↓◦◯♪⟨⟩␣€₤₦₩₫₡₱")
_GREEK = (
    "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi o pi rho "
    "varsigma sigma tau upsilon phi chi psi omega"
).split()
# U+0391..U+03A9; U+03A2 ("-") is unassigned. Latin look-alikes where math has no macro.
_GREEK_UPPER = (
    "A B Gamma Delta E Z H Theta I K Lambda M N Xi O Pi P - Sigma T Upsilon Phi X Psi Omega"
).split()
_MATH = {chr(0x3B1 + i): (rf"\{n}" if len(n) > 1 else n) for i, n in enumerate(_GREEK)}
_MATH |= {
    chr(0x391 + i): (rf"\{n}" if len(n) > 1 else rf"\mathrm{{{n}}}")
    for i, n in enumerate(_GREEK_UPPER)
    if n != "-"
}
_MATH |= {"−": "-", "≠": r"\neq", "≡": r"\equiv", "∼": r"\sim", "∈": r"\in", "√": r"\surd"}
_MATH |= {"′": "{}^{\\prime}", "″": "{}^{\\prime\\prime}", "\u2126": r"\Omega", "\u2206": r"\Delta"}
_NON_ASCII = re.compile(r"[^\x00-\x7f]")


def _glyph(char: str) -> str:
    if ("\xa0" <= char <= "\u017f" and char not in _NATIVE_GAPS) or char in _NATIVE_EXTRA:
        return char
    if char in _MATH:
        return rf"\ensuremath{{{_MATH[char]}}}"
    if char in "\ufe0e\ufe0f":  # text/emoji presentation selectors: nothing to show
        return ""
    if unicodedata.category(char) == "Zs":  # thin, en, em... spaces
        return "\\ "
    return rf"\tsglyph{{{ord(char):04X}}}"


def _unicode_safe(tex: str) -> str:
    """Every non-ASCII character pdflatex would stop at, replaced by what it can set.

    Applied to the whole rendered file (the tables' LaTeX included): outside text no
    character is non-ASCII (labels and commands are ASCII), so each one found is text.
    """
    tex = unicodedata.normalize("NFC", tex)  # "e" + combining accent -> one "é"
    return _NON_ASCII.sub(lambda m: _glyph(m.group(0)), tex)


# ---------------------------------------------------------------------------------------
# Blocks
# ---------------------------------------------------------------------------------------

# Unnumbered: the Markdown and HTML renderings have no numbers, and the three should
# read alike; it also keeps headings out of .toc/.aux, so nothing needs a second pass.
_HEADINGS = {2: "section*", 3: "subsection*", 4: "subsubsection*"}

# A figure's path as LaTeX takes it safely in \includegraphics: plain directory names
# (or ".."), a file name with one dot. Anything else is copied under a plain name.
_SAFE_PATH = re.compile(r"(?:\.\./|[A-Za-z0-9_+-]+/)*[A-Za-z0-9_+-]+\.png")
_FIGURE_DIR = "latex-figures"


def _relative(path: Path, base_dir: Path) -> str:
    return Path(os.path.relpath(path, base_dir)).as_posix()


def _figure(block: Figure, base_dir: Path) -> str:
    _read_png(block.path)  # a clear error now, not a missing image in the PDF
    rel = _relative(block.path, base_dir)
    if not _SAFE_PATH.fullmatch(rel):
        raise TrainscopeError(
            one_line(
                f"figure {block.path}: its path from {base_dir} has characters LaTeX cannot "
                "take in a file name (write_latex_document copies such figures)"
            )
        )
    # No alt text: pdflatex writes none without a tagged PDF; the caption says it.
    caption = rf"\tsfigurecaption{{{_text(block.caption)}}}" if block.caption else ""
    return "\n".join(
        [
            r"\par\medskip",
            r"\noindent\begin{minipage}{\linewidth}",
            r"\centering",
            r"\includegraphics[width=\linewidth,height=0.4\textheight,keepaspectratio]"
            + f"{{{rel}}}",
            *([caption] if caption else []),
            r"\end{minipage}",
            r"\par\medskip",
        ]
    )


def _code_block(block: CodeBlock) -> str:
    lines = _code_text(block.text).expandtabs(8).split("\n")
    body = "\n".join(r"\tscl " + _code(line.rstrip()) for line in lines)
    return "\\begin{tscode}\n" + body + "\n\\end{tscode}"


def _block(block: Block, base_dir: Path) -> str:
    if isinstance(block, Heading):
        command = _HEADINGS.get(max(block.level, 2), "paragraph*")
        return rf"\{command}{{{_text(block.text)}}}"
    if isinstance(block, Paragraph):
        return _inline(_parse_spans(block.text))
    if isinstance(block, Note):
        text = _inline(_parse_spans(block.text))
        return "\\begin{quote}\n\\textbf{Note.} " + text + "\n\\end{quote}"
    if isinstance(block, Bullets):
        if not block.items:  # an empty itemize is a LaTeX error
            return ""
        items = "".join(rf"\item {_inline(_parse_spans(i))}" + "\n" for i in block.items)
        return "\\begin{itemize}\n" + items + "\\end{itemize}"
    if isinstance(block, TableBlock):
        return block.table.to_latex(line_em=REPORT_LINE_EM, placement="H").rstrip("\n")
    if isinstance(block, Figure):
        return _figure(block, base_dir)
    if isinstance(block, CodeBlock):
        return _code_block(block)
    raise TypeError(f"unknown block {block!r}")


def document_to_latex(doc: Document, base_dir: Path) -> str:
    """``doc`` as a complete LaTeX article; figure paths are relative to ``base_dir``.

    Raises TrainscopeError for a figure whose relative path LaTeX cannot take as a file
    name (``#``, ``%``, spaces...): :func:`write_latex_document` copies those first.
    """
    base = Path(base_dir)
    blocks = [_block(b, base) for b in unique_labels(doc.blocks)]
    title = "\\begin{center}\n{\\LARGE\\bfseries " + _text(doc.title) + "\\par}\n\\end{center}"
    body = "\n\n".join([title, *(b for b in blocks if b)])
    tex = _preamble() + "\n\\begin{document}\n\n" + body + "\n\n\\end{document}\n"
    return _unicode_safe(tex)


# ---------------------------------------------------------------------------------------
# Files and pdflatex
# ---------------------------------------------------------------------------------------

# The file name is an argument of pdflatex: no leading "-", nothing TeX reads specially.
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")
# What pdflatex leaves beside the PDF that nobody reads (the .log is kept for reading).
_LEFTOVERS = (".aux", ".out", ".toc")


def _with_safe_figures(doc: Document, out_dir: Path) -> Document:
    """``doc``, with each figure whose path LaTeX cannot take copied to a plain name."""
    blocks: list[Block] = []
    copied = 0
    for block in doc.blocks:
        if isinstance(block, Figure) and not _SAFE_PATH.fullmatch(_relative(block.path, out_dir)):
            _read_png(block.path)
            copied += 1
            dest = out_dir / _FIGURE_DIR / f"figure-{copied}.png"
            dest.parent.mkdir(exist_ok=True)
            shutil.copyfile(block.path, dest)
            block = replace(block, path=dest)
        blocks.append(block)
    if not copied:
        return doc
    safe = Document(doc.title)
    safe.blocks = blocks
    return safe


def _first_error(log: Path, stdout: bytes) -> str:
    """The first ``!`` line of the LaTeX log (its input line where the log says), else
    the last line pdflatex printed."""
    try:
        text = log.read_text(encoding="utf-8", errors="replace")
    except OSError:
        text = stdout.decode("utf-8", errors="replace")
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("!"):
            where = next(
                (m for ln in lines[i + 1 : i + 20] if (m := re.match(r"l\.(\d+)", ln))), None
            )
            return line[1:].strip() + (f" (line {where.group(1)})" if where else "")
    tail = [ln for ln in lines if ln.strip()]
    return tail[-1].strip() if tail else "no error message"


def _compile(pdflatex: str, tex: Path) -> Path:
    """Run pdflatex twice on ``tex`` (longtables settle their widths on the second run)."""
    pdf, log = tex.with_suffix(".pdf"), tex.with_suffix(".log")
    pdf.unlink(missing_ok=True)  # a stale PDF must not pass for this one
    # No shell escape at all: the text is escaped, and this is the second lock.
    argv = [pdflatex, "-interaction=nonstopmode", "-halt-on-error", "-no-shell-escape", tex.name]
    try:
        for _ in range(2):
            try:
                proc = subprocess.run(
                    argv,
                    cwd=tex.parent,
                    stdin=subprocess.DEVNULL,
                    capture_output=True,
                    timeout=PDFLATEX_TIMEOUT_S,
                    check=False,
                )
            except subprocess.TimeoutExpired:
                raise TrainscopeError(
                    one_line(f"pdflatex took over {PDFLATEX_TIMEOUT_S} s on {tex}; gave up")
                ) from None
            except OSError as e:
                raise TrainscopeError(one_line(f"cannot run pdflatex on {tex}: {e}")) from e
            if proc.returncode != 0:
                error = _first_error(log, proc.stdout)
                raise TrainscopeError(one_line(f"pdflatex failed on {tex}: {error}"))
    finally:
        for suffix in _LEFTOVERS:
            tex.with_suffix(suffix).unlink(missing_ok=True)
    if not pdf.is_file():
        raise TrainscopeError(one_line(f"pdflatex wrote no PDF for {tex} (see {log})"))
    return pdf


def write_latex_document(
    doc: Document, out_dir: Path, name: str = "report"
) -> tuple[Path, Path | None]:
    """Write ``out_dir/<name>.tex`` and, where pdflatex is on PATH, ``<name>.pdf``.

    Returns (tex path, PDF path or None without pdflatex). The ``.log`` stays beside
    them. Raises TrainscopeError, one line naming the file and the first LaTeX error,
    when pdflatex fails.
    """
    if not _NAME.fullmatch(name):
        raise ValueError(f"name {name!r} must be letters, digits, '_' and '-'")
    out = Path(out_dir)
    tex = out / f"{name}.tex"
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise TrainscopeError(one_line(f"cannot create {out}: {e}")) from e
    # Rendered before writing: a missing figure raises as it does for the other outputs.
    source = document_to_latex(_with_safe_figures(doc, out), out)
    try:
        tex.write_text(source, encoding="utf-8")
    except OSError as e:
        raise TrainscopeError(one_line(f"cannot write {tex}: {e}")) from e
    pdflatex = shutil.which("pdflatex")
    return tex, (_compile(pdflatex, tex) if pdflatex else None)
