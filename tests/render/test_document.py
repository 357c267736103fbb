"""The Document model: one content, two renderings (Markdown and self-contained HTML)."""

from __future__ import annotations

import base64
import html
import re
from pathlib import Path

import pytest

from tests.reports.runs import PNG_MAGIC
from trainscope.render.document import Document, escape_inline, write_document
from trainscope.render.table import Table

# Text that is markup in Markdown or HTML and must come out literally in both.
TRICKY = "a_b_c <i>x</i> [link](http://e.com) #1 | 50% & co ~~s~~ &amp; \\n"


@pytest.fixture
def png(tmp_path: Path) -> Path:
    """A real (tiny) PNG, drawn with matplotlib as the report figures are."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(1, 1))
    FigureCanvasAgg(fig)
    fig.add_subplot().plot([0, 1], [1, 0])
    path = tmp_path / "plots" / "fig.png"
    path.parent.mkdir()
    fig.savefig(path, dpi=50, format="png")
    return path


def md_of(doc: Document, base: Path = Path(".")) -> str:
    """The Markdown body without the title line."""
    return doc.to_markdown(base).split("\n\n", 1)[1]


def main_of(doc: Document) -> str:
    """The HTML between <h1> and </main>."""
    return doc.to_html().split("</h1>\n", 1)[1].split("</main>", 1)[0].strip()


def test_markdown_and_html_escape_literal_text() -> None:
    doc = Document("T <&> 'q'")
    doc.paragraph(TRICKY)
    md = doc.to_markdown(Path("."))
    # "<", ">" and "&" as entities: no raw tag (or "&amp;" read as "&") survives in the file.
    assert md.startswith("# T &lt;&amp;&gt; 'q'\n\n")
    assert md_of(doc) == (
        "a_b_c &lt;i&gt;x&lt;/i&gt; \\[link\\](http://e.com) \\#1 \\| 50% &amp; co"
        " \\~\\~s\\~\\~ &amp;amp; \\\\n\n"
    )
    page = doc.to_html()
    assert "<title>T &lt;&amp;&gt; &#x27;q&#x27;</title>" in page
    assert "<h1>T &lt;&amp;&gt; &#x27;q&#x27;</h1>" in page
    assert main_of(doc) == f"<p>{html.escape(TRICKY)}</p>"


def test_markdown_renders_back_to_the_same_html() -> None:
    # A CommonMark parser must read our Markdown as the same text and markup as our HTML.
    markdown_it = pytest.importorskip("markdown_it")
    texts = [
        TRICKY,
        "- not a list",
        "1. not a list either",
        "--- not a rule",
        "run `x_y*z` took **3.2 s** (`fast`)",
        "**Run failed: " + escape_inline("ValueError: x ** 2 `bad` \\ path") + "**",
        "2 ** 3 and a lone ` backtick",
        "x ** 2 ** y and **a ** b** end",
        "**bold with `code` inside**",
    ]
    md = markdown_it.MarkdownIt("commonmark")
    for text in texts:
        doc = Document("t")
        doc.paragraph(text)
        theirs = md.render(doc.to_markdown(Path("."))).split("\n", 1)[1].strip()
        assert html.unescape(theirs) == html.unescape(main_of(doc)), text


def test_inline_markup_code_and_bold_only() -> None:
    doc = Document("t")
    doc.paragraph("see `a_b <c>` and **bold `x`** but *not italic* nor _this_")
    assert main_of(doc) == (
        "<p>see <code>a_b &lt;c&gt;</code> and <strong>bold <code>x</code></strong>"
        " but *not italic* nor _this_</p>"
    )
    # A code span holding "<", ">" or "&" is an escaped <code> element in the Markdown,
    # so the file has no raw tag even for tools that do not parse code spans.
    assert md_of(doc) == (
        "see <code>a_b &lt;c&gt;</code> and **bold `x`** but \\*not italic\\* nor \\_this\\_\n"
    )


def test_unclosed_markup_is_literal() -> None:
    doc = Document("t")
    doc.paragraph("2 ** 3 ** 4, `x and ****, **a **b")
    assert main_of(doc) == "<p>2 ** 3 ** 4, `x and ****, **a **b</p>"
    assert md_of(doc) == "2 \\*\\* 3 \\*\\* 4, \\`x and \\*\\*\\*\\*, \\*\\*a \\*\\*b\n"


def test_escape_inline_makes_any_text_literal() -> None:
    raw = "error: `x` ** y \\ z *w* \\`"
    doc = Document("t")
    doc.paragraph("**Run failed: " + escape_inline(raw) + "**")
    assert main_of(doc) == f"<p><strong>Run failed: {html.escape(raw)}</strong></p>"


def test_soft_line_breaks_become_spaces() -> None:
    doc = Document("t")
    doc.paragraph("one\n  two\nthree")
    assert md_of(doc) == "one two three\n"
    assert main_of(doc) == "<p>one two three</p>"


def test_note_bullets_heading_and_code() -> None:
    doc = Document("t")
    doc.heading("Sec <1>")
    doc.heading("Sub", level=3)
    doc.note("**careful** `x`")
    doc.bullets(["first `a`", "- second", "3. third"])
    doc.code("Traceback:\n  ```\n  <boom> & more\n")
    assert md_of(doc) == (
        "## Sec &lt;1&gt;\n\n### Sub\n\n> **careful** `x`\n\n"
        "- first `a`\n- \\- second\n- 3\\. third\n\n"
        # A fence longer than the backtick run inside, so the text cannot end it early.
        "````text\nTraceback:\n  ```\n  <boom> & more\n````\n"
    )
    assert main_of(doc) == (
        "<h2>Sec &lt;1&gt;</h2>\n<h3>Sub</h3>\n"
        '<blockquote class="note"><p><strong>careful</strong> <code>x</code></p></blockquote>\n'
        "<ul>\n<li>first <code>a</code></li>\n<li>- second</li>\n<li>3. third</li>\n</ul>\n"
        "<pre><code>Traceback:\n  ```\n  &lt;boom&gt; &amp; more</code></pre>"
    )


@pytest.mark.parametrize("level", [0, 1, 7])
def test_heading_level_is_checked(level: int) -> None:
    with pytest.raises(ValueError, match="heading level"):
        Document("t").heading("x", level)


def test_figure_is_embedded_as_base64_and_linked_relatively(png: Path, tmp_path: Path) -> None:
    doc = Document("t")
    doc.figure(png, alt='Loss "curve" <1>', caption="Loss per step.")
    md = doc.to_markdown(tmp_path)
    assert '![Loss "curve" &lt;1&gt;](plots/fig.png)\n\n*Loss per step.*\n' in md
    page = doc.to_html()
    m = re.search(r'<img src="data:image/png;base64,([A-Za-z0-9+/=]+)" alt="([^"]*)"', page)
    assert m, page[:2000]
    assert base64.b64decode(m.group(1)) == png.read_bytes()
    assert m.group(2) == "Loss &quot;curve&quot; &lt;1&gt;"
    assert 'width="50" height="50"' in page  # from the PNG header, so no layout jump
    assert "<figcaption>Loss per step.</figcaption>" in page


def test_figure_link_relative_to_a_parent_dir(png: Path, tmp_path: Path) -> None:
    doc = Document("t")
    doc.figure(png, alt="x")
    assert "](../plots/fig.png)" in doc.to_markdown(tmp_path / "sub")


def test_missing_figure_is_an_error_not_a_broken_image(tmp_path: Path, png: Path) -> None:
    with pytest.raises(FileNotFoundError, match="missing.png"):
        Document("t").figure(tmp_path / "missing.png", alt="x")
    not_png = tmp_path / "fake.png"
    not_png.write_text("<svg/>")
    with pytest.raises(ValueError, match="not a PNG"):
        Document("t").figure(not_png, alt="x")
    # Deleted between adding and writing: still an error when rendering.
    doc = Document("t")
    doc.figure(png, alt="x")
    png.unlink()
    with pytest.raises(FileNotFoundError):
        doc.to_html()
    with pytest.raises(FileNotFoundError):
        doc.to_markdown(tmp_path)


def test_table_block_has_caption_in_both() -> None:
    doc = Document("t")
    doc.table(Table(["Name", "Value"], [["a_b", "1.5"]], caption="Cap <x>.", label="tab:x"))
    md = md_of(doc)
    assert md.startswith(
        "*Cap &lt;x&gt;.*\n\n| Name | Value |\n| :--- | ----: |\n| a_b  |   1.5 |\n"
    )
    assert '<table id="tab-x">\n<caption>Cap &lt;x&gt;.</caption>' in main_of(doc)


def test_html_page_is_self_contained(png: Path) -> None:
    doc = Document("t")
    doc.paragraph("see http://example.com")  # text, not a link: must stay text
    doc.figure(png, alt="x")
    page = doc.to_html()
    assert page.startswith("<!DOCTYPE html>\n")
    assert '<meta charset="utf-8">' in page
    assert "<script" not in page and '<link rel="stylesheet"' not in page
    assert not re.search(r'(src|href)="(?!data:)', page)
    assert "Content-Security-Policy" in page and "<style>" in page


def test_write_document_writes_both(tmp_path: Path, png: Path) -> None:
    doc = Document("Both")
    doc.figure(png, alt="x")
    out = tmp_path / "out"
    paths = write_document(doc, out)
    assert paths == [out / "report.md", out / "report.html"]
    assert (out / "report.md").read_text().startswith("# Both\n")
    assert "](../plots/fig.png)" in (out / "report.md").read_text()
    assert (out / "report.html").read_bytes()[:15] == b"<!DOCTYPE html>"
    assert PNG_MAGIC == png.read_bytes()[:8]
