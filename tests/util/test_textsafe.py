"""trainscope.util.textsafe: text from records made inert for the terminal, Markdown, HTML,
LaTeX and matplotlib (no torch, no files)."""

from __future__ import annotations

import io
import re

import pytest

from trainscope.util.textsafe import (
    html_text,
    latex_escape,
    markdown_code_span,
    markdown_text,
    one_line,
    plot_text,
    rich_markup,
    rich_text,
    terminal_text,
)

# Every kind of character a terminal obeys: OSC (retitle), CSI (clear screen), BEL,
# carriage return, backspace, DEL, the 8-bit CSI and OSC, NEL, a bidi override.
ESCAPES = "\x1b]0;pwned\x07\x1b[2J\r\x08\x7f\x9b31m\x9d\x85\u202e"
# Anything a terminal could act on: C0 but newline, DEL, C1, bidi controls, separators.
CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def test_terminal_text_shows_every_control_character() -> None:
    out = terminal_text("a" + ESCAPES + "\n\tz")
    assert not CONTROL.search(out) and "\n" not in out
    assert out == "a\\x1b]0;pwned\\x07\\x1b[2J\\r\\x08\\x7f\\x9b31m\\x9d\\x85\\u202e\\n\\tz"
    assert terminal_text(out) == out  # idempotent: safe to apply twice


def test_terminal_text_keeps_line_breaks_when_asked() -> None:
    out = terminal_text("Traceback:\r\n\tline 1\x1b[2J\rfake", newlines=True)
    assert out == "Traceback:\n\tline 1\\x1b[2J\\rfake"


def test_terminal_text_accepts_any_object() -> None:
    assert terminal_text(None) == "None" and terminal_text(3.5) == "3.5"


def test_one_line() -> None:
    assert one_line("a\r\nb\nc\rd\te\u2028f\x1bg") == "a b c d e f\\x1bg"


def test_rich_text_is_literal_and_inert() -> None:
    from rich.console import Console

    buf = io.StringIO()
    console = Console(file=buf, width=200, color_system=None)
    console.print(rich_text("[bold red]loud[/] [link=https://evil]x[/link]" + ESCAPES))
    printed = buf.getvalue()
    assert "[bold red]loud[/] [link=https://evil]x[/link]" in printed
    assert not CONTROL.search(printed)


def test_rich_markup_escapes_tags_inside_markup() -> None:
    from rich.console import Console

    buf = io.StringIO()
    console = Console(file=buf, width=200, color_system=None)
    console.print(f"[bold]name:[/bold] {rich_markup('[bold red]x[/]' + ESCAPES)}")
    printed = buf.getvalue()
    assert printed.startswith("name: [bold red]x[/]\\x1b]0;pwned")
    assert not CONTROL.search(printed)


@pytest.mark.parametrize(
    ("raw", "md"),
    [
        ("<script>alert(1)</script>", "&lt;script&gt;alert(1)&lt;/script&gt;"),
        ("<http://evil>", "&lt;http://evil&gt;"),
        ("&amp; &#60; &", "&amp;amp; &amp;\\#60; &amp;"),
        ("[x](javascript:alert(1))", "\\[x\\](javascript:alert(1))"),
        ("![i](x.png)", "!\\[i\\](x.png)"),
        ("a | b", "a \\| b"),
        ("line\nbreak\r\nand\rcr", "line break and cr"),
        ("`code` ``x``", "\\`code\\` \\`\\`x\\`\\`"),
        ("**b** _i_ ~~s~~ $m$", "\\*\\*b\\*\\* \\_i\\_ \\~\\~s\\~\\~ \\$m\\$"),
        ("num_workers x86_64", "num_workers x86_64"),  # intraword "_" is never emphasis
        ("# h", "\\# h"),
        ("back\\slash", "back\\\\slash"),
        ("esc\x1b[2J", "esc\\\\x1b\\[2J"),
    ],
)
def test_markdown_text(raw: str, md: str) -> None:
    assert markdown_text(raw) == md


@pytest.mark.parametrize(
    ("raw", "md"),
    [("- item", "\\- item"), ("+ item", "\\+ item"), ("1. item", "1\\. item"), ("---", "\\---")],
)
def test_markdown_text_at_line_start(raw: str, md: str) -> None:
    assert markdown_text(raw, at_line_start=True) == md
    assert markdown_text(raw) == raw  # mid-line they mean nothing


def test_markdown_renders_back_to_the_text() -> None:
    # The proof that matters: a CommonMark renderer shows exactly the text, no markup.
    markdown_it = pytest.importorskip("markdown_it")
    md = markdown_it.MarkdownIt("commonmark").enable("table")
    raw = (
        "<script>alert(1)</script> <img src=x onerror=alert(1)> [x](javascript:alert(1)) "
        "![i](y) <http://evil> &lt; **b** `c` | d \\ e $f$ _g_"
    )
    html = md.render(markdown_text(raw, at_line_start=True))
    assert html == f"<p>{html_text(raw)}</p>\n".replace("&#x27;", "'")


def test_markdown_code_span() -> None:
    assert markdown_code_span("run-1") == "`run-1`"
    assert markdown_code_span(" a ") == "`  a  `"  # CommonMark strips one space each side
    # Text a non-CommonMark tool could read as a tag goes into an escaped <code> element.
    assert markdown_code_span("<img src=x>") == "<code>&lt;img src=x&gt;</code>"
    assert markdown_code_span("a`b") == "<code>a\\`b</code>"
    assert markdown_code_span("a\nb") == "`a b`"


def test_html_text() -> None:
    assert html_text('<a href="x">&\x1b') == "&lt;a href=&quot;x&quot;&gt;&amp;\\x1b"
    assert html_text("a\nb") == "a\nb"


def test_latex_escape_every_special_and_control() -> None:
    raw = "\\ { } $ & # ^ _ ~ % [ ] < > |"
    assert latex_escape(raw) == (
        r"\textbackslash{} \{ \} \$ \& \# \textasciicircum{} \_ \textasciitilde{} \% "
        r"{[} {]} \textless{} \textgreater{} \textbar{}"
    )
    # A newline would end a % comment: nothing after it may start a new line.
    out = latex_escape("x\n\\input{/etc/passwd}\r\\write18{rm -rf ~}\x1b\x0c")
    assert "\n" not in out and "\r" not in out and not CONTROL.search(out)
    assert "\\input" not in out and "\\write18" not in out
    assert out.startswith("x \\textbackslash{}input\\{/etc/passwd\\} \\textbackslash{}write18")


def test_plot_text_is_never_mathtext() -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    for raw in ("a$b$c", "$\\invalid$", "x\\$y$z", "$\\frac{a}{$"):
        fig = Figure()
        FigureCanvasAgg(fig)
        text = fig.text(0.5, 0.5, plot_text(raw))
        fig.canvas.draw()  # mathtext would raise on "\invalid"
        # What is drawn is the text as written (matplotlib unescapes "\$" when not math).
        assert text._preprocess_math(text.get_text()) == (raw, False)


def test_a_file_name_that_is_not_utf8_is_shown_byte_for_byte() -> None:
    import os

    name = os.fsdecode(b"run\xff\xfe-1")  # surrogate-escaped, as os.listdir gives it
    shown = {
        f.__name__: f(name)
        for f in (terminal_text, one_line, plot_text, markdown_text, html_text, latex_escape)
    }
    for text in shown.values():
        text.encode("utf-8")  # no lone surrogate left: every output can be written
    assert shown["terminal_text"] == "run\\xff\\xfe-1" == shown["plot_text"]
    assert terminal_text(shown["terminal_text"]) == shown["terminal_text"]  # idempotent
    assert terminal_text("a\ud800b") == "a\\ud800b"  # a surrogate no byte made
