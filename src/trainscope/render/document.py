"""A tiny document model rendered to Markdown and to one self-contained HTML file.

A report is built once as a :class:`Document` (headings, paragraphs, notes, bullet
lists, tables, figures, code blocks) and written twice by :func:`write_document`, so
``report.md`` and ``report.html`` always say the same thing.

Inline markup in paragraphs, notes and bullets is deliberately minimal: a backtick
code span and ``**bold**`` (which may hold code spans). Everything else is literal text,
escaped once, when it is rendered, for each output: ``trainscope.util.textsafe.markdown_text``
(entities for ``< > &``, backslashes for the rest) and ``textsafe.html_text``. Text from a run
record is someone else's text: rendered this way it cannot open a tag, link or table
cell in either file. A backslash before a backslash, a backtick or an asterisk makes
that character literal; :func:`escape_inline` applies this to text that is not markup
(an error message, a run name), so it prints verbatim whatever it contains. Line breaks
inside such text are soft (a space). Code blocks are verbatim in both outputs (a fenced
block in Markdown), with control characters shown as escapes.

The HTML has an inline stylesheet, figures embedded as ``data:image/png;base64`` URIs,
no scripts and no external URLs: it opens offline, attached to a mail or a ticket. A
Content-Security-Policy meta tag makes the browser refuse anything else, so a stray
external reference shows up as an error instead of silently loading.
"""

from __future__ import annotations

import base64
import os
import re
import struct
from dataclasses import dataclass, replace
from pathlib import Path
from urllib.parse import quote

from trainscope.render.table import Table
from trainscope.util.textsafe import html_text, markdown_code_span, markdown_text, terminal_text

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

# ---------------------------------------------------------------------------------------
# Inline markup: `code`, **bold**, backslash escapes; everything else literal
# ---------------------------------------------------------------------------------------

_ESCAPABLE = "\\`*"


@dataclass(frozen=True)
class _Text:
    text: str


@dataclass(frozen=True)
class _Code:
    text: str


@dataclass(frozen=True)
class _Bold:
    parts: tuple[_Text | _Code, ...]


_Span = _Text | _Code | _Bold


def escape_inline(text: str) -> str:
    """Make ``text`` literal inside inline markup: backslash-escape backslash, backtick, ``*``."""
    return re.sub(r"([\\`*])", r"\\\1", text)


def inline_code(text: str) -> str:
    """Inline markup showing ``text`` (a name, a value from a record) as a code span.

    A backtick would end the span early, so text holding one (or empty text) is shown
    as plain literal text instead, through :func:`escape_inline`.
    """
    return f"`{text}`" if text and "`" not in text else escape_inline(text)


def _parse_inline(
    text: str, start: int = 0, in_bold: bool = False
) -> tuple[list[_Span], int, bool]:
    # Returns (spans, index after the last consumed character, closed). Inside a bold
    # span, parsing stops at the closing "**"; "closed" says whether one was found.
    spans: list[_Span] = []
    buf: list[str] = []

    def flush() -> None:
        if buf:
            spans.append(_Text("".join(buf)))
            buf.clear()

    i, n = start, len(text)
    while i < n:
        c = text[i]
        if c == "\\" and i + 1 < n and text[i + 1] in _ESCAPABLE:
            buf.append(text[i + 1])
            i += 2
            continue
        if c == "`":
            end = text.find("`", i + 1)
            if end > i + 1:  # a code span is literal up to the next backtick
                flush()
                spans.append(_Code(text[i + 1 : end]))
                i = end + 1
                continue
        elif text.startswith("**", i):
            # As in Markdown, "**" opens before a non-space and closes after one, so
            # "2 ** 3 ** 4" stays arithmetic and both renderings agree on what is bold.
            if in_bold and not text[i - 1].isspace():
                flush()
                return spans, i + 2, True
            if not in_bold and i + 2 < n and not text[i + 2].isspace():
                inner, after, closed = _parse_inline(text, i + 2, in_bold=True)
                if closed and inner:
                    flush()
                    spans.append(_Bold(tuple(inner)))
                    i = after
                    continue
            buf.append("**")  # not a delimiter here: the markers are literal text
            i += 2
            continue
        buf.append(c)
        i += 1
    flush()
    return spans, i, False


def _parse_spans(text: str) -> list[_Span]:
    """Inline markup as spans. Line breaks are soft (a space), as in Markdown."""
    return _parse_inline(re.sub(r"\s*[\r\n]\s*", " ", text.strip()))[0]


def _md_inline(spans: list[_Span], at_line_start: bool = True) -> str:
    out = []
    for k, span in enumerate(spans):
        if isinstance(span, _Text):
            out.append(markdown_text(span.text, at_line_start=at_line_start and k == 0))
        elif isinstance(span, _Code):
            out.append(markdown_code_span(span.text))
        else:
            out.append(f"**{_md_inline(list(span.parts), at_line_start=False)}**")
    return "".join(out)


def _html_inline(spans: list[_Span]) -> str:
    out = []
    for span in spans:
        if isinstance(span, _Text):
            out.append(html_text(span.text))
        elif isinstance(span, _Code):
            out.append(f"<code>{html_text(span.text)}</code>")
        else:
            out.append(f"<strong>{_html_inline(list(span.parts))}</strong>")
    return "".join(out)


# ---------------------------------------------------------------------------------------
# Blocks
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Heading:
    """A section heading (level 2..6; level 1 is the document title)."""

    text: str
    level: int


@dataclass(frozen=True)
class Paragraph:
    """Text with inline markup."""

    text: str


@dataclass(frozen=True)
class Note:
    """A highlighted call-out with inline markup."""

    text: str


@dataclass(frozen=True)
class Bullets:
    """An unordered list; each item has inline markup."""

    items: tuple[str, ...]


@dataclass(frozen=True)
class TableBlock:
    """A report table."""

    table: Table


@dataclass(frozen=True)
class Figure:
    """A PNG file shown with alt text and an optional caption."""

    path: Path
    alt: str
    caption: str | None


@dataclass(frozen=True)
class CodeBlock:
    """Preformatted text, shown verbatim."""

    text: str


Block = Heading | Paragraph | Note | Bullets | TableBlock | Figure | CodeBlock


def _read_png(path: Path) -> bytes:
    # A clear error here beats a broken-image icon in the report nobody notices.
    if not path.is_file():
        raise FileNotFoundError(f"figure {path} does not exist (draw it before adding it)")
    data = path.read_bytes()
    if data[:8] != PNG_MAGIC:
        raise ValueError(f"figure {path} is not a PNG file")
    return data


def unique_labels(blocks: list[Block]) -> list[Block]:
    """``blocks`` with every table's label unique: a table whose label an earlier one
    has is relabelled ``label-2``, ``label-3``... A label (a LaTeX ``\\label``, an HTML
    ``id``) must name one table, though two sections may build the same table (two
    chapters that each run a precision study)."""
    seen: set[str] = set()
    out: list[Block] = []
    for block in blocks:
        label = block.table.label if isinstance(block, TableBlock) else ""
        if label:
            unique, n = label, 1
            while unique in seen:
                n += 1
                unique = f"{label}-{n}"
            seen.add(unique)
            if unique != label:
                block = TableBlock(replace(block.table, label=unique))
        out.append(block)
    return out


def _png_size(data: bytes) -> tuple[int, int] | None:
    # IHDR is the first chunk: width and height as big-endian uint32 at bytes 16..24.
    if len(data) < 24 or data[12:16] != b"IHDR":
        return None
    return struct.unpack(">II", data[16:24])


class Document:
    """A report's content, rendered to Markdown (:meth:`to_markdown`) and HTML (:meth:`to_html`).

    Blocks are appended in reading order by the methods below; ``blocks`` holds them.
    """

    def __init__(self, title: str) -> None:
        self.title = title
        self.blocks: list[Block] = []

    def heading(self, text: str, level: int = 2) -> None:
        """A section heading; ``level`` 2..6 (the title is the only level 1)."""
        if not 2 <= level <= 6:
            raise ValueError(f"heading level must be 2..6 (1 is the title), got {level}")
        self.blocks.append(Heading(text, level))

    def paragraph(self, text: str) -> None:
        """A paragraph; backtick code spans and ``**bold**``, everything else literal."""
        self.blocks.append(Paragraph(text))

    def note(self, text: str) -> None:
        """A highlighted call-out (a blockquote); same inline markup as a paragraph."""
        self.blocks.append(Note(text))

    def bullets(self, items: list[str]) -> None:
        """An unordered list; each item takes the paragraph's inline markup."""
        self.blocks.append(Bullets(tuple(items)))

    def table(self, table: Table) -> None:
        """A table, caption included."""
        self.blocks.append(TableBlock(table))

    def figure(self, path: Path, alt: str, caption: str | None = None) -> None:
        """A PNG written earlier; raises FileNotFoundError / ValueError if it is not one."""
        path = Path(path)
        _read_png(path)
        self.blocks.append(Figure(path, alt, caption))

    def code(self, text: str) -> None:
        """A preformatted block (a traceback, a command), shown verbatim."""
        self.blocks.append(CodeBlock(text))

    # -- Markdown ------------------------------------------------------------------------

    def to_markdown(self, base_dir: Path) -> str:
        """GitHub-flavoured Markdown; figure links are relative to ``base_dir``."""
        parts = [f"# {markdown_text(self.title)}"]
        for block in self.blocks:
            parts.append(_block_markdown(block, Path(base_dir)))
        return "\n\n".join(p.rstrip("\n") for p in parts) + "\n"

    # -- HTML ----------------------------------------------------------------------------

    def to_html(self) -> str:
        """One self-contained HTML page: inline CSS, images as data URIs, no scripts."""
        title = html_text(self.title)
        body = "\n".join(_block_html(b) for b in unique_labels(self.blocks))
        return (
            "<!DOCTYPE html>\n"
            '<html lang="en">\n'
            "<head>\n"
            '<meta charset="utf-8">\n'
            f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">\n'
            '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            # An empty data: icon, so the browser does not go looking for favicon.ico.
            '<link rel="icon" href="data:,">\n'
            f"<title>{title}</title>\n"
            f"<style>\n{_STYLE}</style>\n"
            "</head>\n"
            "<body>\n"
            "<main>\n"
            f"<h1>{title}</h1>\n"
            f"{body}\n"
            "</main>\n"
            "</body>\n"
            "</html>\n"
        )


def _code_text(text: str) -> str:
    # Verbatim, line breaks kept, but a control character (an ANSI escape in a traceback)
    # is shown as an escape in both renderings: "cat report.md" must not obey it either.
    return terminal_text(text, newlines=True).rstrip("\n")


def _fence(text: str) -> str:
    # A fence longer than any backtick run in the text, so the text cannot close it.
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    return "`" * max(3, longest + 1)


def _block_markdown(block: Block, base_dir: Path) -> str:
    if isinstance(block, Heading):
        return f"{'#' * block.level} {markdown_text(block.text)}"
    if isinstance(block, Paragraph):
        return _md_inline(_parse_spans(block.text))
    if isinstance(block, Note):
        return "> " + _md_inline(_parse_spans(block.text))
    if isinstance(block, Bullets):
        return "\n".join("- " + _md_inline(_parse_spans(item)) for item in block.items)
    if isinstance(block, TableBlock):
        md = block.table.to_markdown()
        caption = block.table.caption.strip()
        return f"*{markdown_text(caption)}*\n\n{md}" if caption else md
    if isinstance(block, Figure):
        _read_png(block.path)
        rel = Path(os.path.relpath(block.path, base_dir)).as_posix()
        alt = markdown_text(block.alt)
        md = f"![{alt}]({quote(rel)})"
        if block.caption:
            md += f"\n\n*{markdown_text(block.caption.strip())}*"
        return md
    if isinstance(block, CodeBlock):
        # A fenced block is the one place Markdown shows text uninterpreted ("<" stays
        # "<", as a traceback needs); the fence is longer than any backtick run inside.
        text = _code_text(block.text)
        fence = _fence(text)
        return f"{fence}text\n{text}\n{fence}"
    raise TypeError(f"unknown block {block!r}")


def _block_html(block: Block) -> str:
    if isinstance(block, Heading):
        return f"<h{block.level}>{html_text(block.text)}</h{block.level}>"
    if isinstance(block, Paragraph):
        return f"<p>{_html_inline(_parse_spans(block.text))}</p>"
    if isinstance(block, Note):
        text = _html_inline(_parse_spans(block.text))
        return f'<blockquote class="note"><p>{text}</p></blockquote>'
    if isinstance(block, Bullets):
        items = "".join(f"<li>{_html_inline(_parse_spans(i))}</li>\n" for i in block.items)
        return f"<ul>\n{items}</ul>"
    if isinstance(block, TableBlock):
        return block.table.to_html().rstrip("\n")
    if isinstance(block, Figure):
        data = _read_png(block.path)
        src = "data:image/png;base64," + base64.b64encode(data).decode("ascii")
        size = _png_size(data)
        dims = f' width="{size[0]}" height="{size[1]}"' if size else ""
        img = f'<img src="{src}" alt="{html_text(block.alt)}"{dims}>'
        cap = f"<figcaption>{html_text(block.caption)}</figcaption>" if block.caption else ""
        return f"<figure>{img}{cap}</figure>"
    if isinstance(block, CodeBlock):
        return f"<pre><code>{html_text(_code_text(block.text))}</code></pre>"
    raise TypeError(f"unknown block {block!r}")


# Only inline styles and data: images may load; everything else is refused by the browser.
_CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"

_STYLE = """\
:root { color-scheme: light; }
body {
  margin: 0; padding: 1.5em 1em 3em; color: #1f2328; background: #fff;
  font: 16px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial,
    sans-serif;
}
main { max-width: 60em; margin: 0 auto; }
h1 { font-size: 1.8em; margin: 0 0 0.6em; padding-bottom: 0.3em;
  border-bottom: 1px solid #d0d7de; }
h2 { font-size: 1.35em; margin: 1.6em 0 0.6em; padding-bottom: 0.2em;
  border-bottom: 1px solid #eaeef2; }
h3, h4, h5, h6 { margin: 1.3em 0 0.5em; }
code, pre { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, "Liberation Mono",
  monospace; font-size: 0.9em; }
code { background: #f3f4f6; padding: 0.1em 0.3em; border-radius: 4px; }
pre { background: #f6f8fa; border: 1px solid #d0d7de; border-radius: 6px; padding: 0.8em 1em;
  white-space: pre-wrap; overflow-wrap: anywhere; }
pre code { background: none; padding: 0; }
blockquote.note { margin: 1em 0; padding: 0.6em 1em; background: #fff8e6;
  border-left: 4px solid #d4a017; border-radius: 4px; }
blockquote.note p { margin: 0; }
table { border-collapse: collapse; margin: 0.8em 0 1.4em; font-size: 0.95em; }
caption { caption-side: top; text-align: left; font-style: italic; color: #57606a;
  width: max-content; max-width: min(60em, 100vw - 2em);
  padding-bottom: 0.4em; }
th, td { border: 1px solid #d0d7de; padding: 0.3em 0.7em; }
th { background: #f6f8fa; font-weight: 600; }
td { font-variant-numeric: tabular-nums; }
tbody tr:nth-child(even) { background: #f9fafb; }
figure { margin: 1em 0 1.4em; }
img { max-width: 100%; height: auto; }
figcaption { font-style: italic; color: #57606a; margin-top: 0.3em; }
"""


def write_document(doc: Document, out_dir: Path) -> list[Path]:
    """Write ``out_dir/report.md`` and ``out_dir/report.html``; return both paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    md_path, html_path = out / "report.md", out / "report.html"
    md_path.write_text(doc.to_markdown(out), encoding="utf-8")
    html_path.write_text(doc.to_html(), encoding="utf-8")
    return [md_path, html_path]
