"""Text from run records cannot act, wherever it lands.

Shared run directories are someone else's text: every string of a record (summary
fields, env.json, the run and study directory names, study.json labels, reasons and
argv) is filled here with HTML, Markdown links, LaTeX commands, ANSI/OSC escapes and rich
markup. The reports (report.md, compare.md, a study's report.md, the HTML, tables.tex)
and the console must show all of it as text. That the hostile tables.tex files compile
(pdflatex, seconds) is one ``slow`` test of its own, on the same records.
"""

from __future__ import annotations

import copy
import html
import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.reports.latex import compile_latex, find_latex, latex_problems
from tests.reports.runs import COMPLETED, ENV, FAILED, write_run
from trainscope.records.study_dir import PlannedRun, StudyPlan, write_study
from trainscope.render.table import Table
from trainscope.reports.compare import build_comparison, print_comparison
from trainscope.reports.run_report import build_run_report, print_report
from trainscope.reports.study_report import build_study_report, print_study_report

SCRIPT = "<script>alert(1)</script>"
IMG = "<img src=x onerror=alert(1)>"
META = '<meta http-equiv="refresh" content="0;url=http://evil">'
JS_LINK = "[x](javascript:alert(1))"
TEX = "\\input{/etc/passwd} \\write18{rm -rf ~}"
ANSI = "\x1b]0;pwned\x07\x1b[2J\r\x08\x9b"
MARKUP = "[bold red]loud[/]"
MATH = "$\\invalid$"
# Directory names cannot hold "/", but a newline, a backslash, a backtick and "|" they can.
RUN_NAME = "run\n\\input{etc-passwd}\n\\write18{rm -rf ~}\n- `tick` | " + IMG
STUDY_NAME = "study\n\\input{etc-passwd}\n# " + IMG

RAW_TAG = re.compile(r"<(script|img|meta)\b", re.IGNORECASE)
# Anything a terminal (or "cat report.md") would obey; a newline is fine.
CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f]")
# What a CommonMark renderer may produce from our Markdown: no link, no foreign tag.
ALLOWED_TAGS = {
    "h1", "h2", "h3", "p", "em", "strong", "code", "pre", "blockquote", "ul", "li",
    "table", "thead", "tbody", "tr", "th", "td", "img",
}  # fmt: skip


def hostile_summary(status: str = "completed") -> dict[str, Any]:
    """A summary whose every text field tries something."""
    summary = copy.deepcopy(COMPLETED if status == "completed" else FAILED)
    summary.update(
        workload=SCRIPT,
        model=f"{IMG} {TEX}",
        device=f"cpu{ANSI}",
        device_name=META,
        precision=f"{JS_LINK} `x` | y",
        timing_mode=f"{MARKUP} {ANSI}",
        peak_memory_kind="![i](http://evil/x.png) <http://evil> &amp;",
        loader=IMG,
        num_workers=f"{MARKUP}`w`",
        parallel={"note": f"{SCRIPT} {MARKUP} **bold**"},
    )
    if status == "completed":
        summary["stages_s"][f"{MATH} \\write18{{x}}"] = 0.1
        summary["per_class_accuracy"][f"*{MARKUP}"] = 0.5
    else:
        # The first line goes into a note, the rest into a code block.
        summary["error"] = f"RuntimeError: {SCRIPT} {JS_LINK} {ANSI}\n{IMG}\n````\n{META}"
    return summary


def write_hostile_run(root: Path, name: str = RUN_NAME, status: str = "completed") -> Path:
    run = write_run(root, name, hostile_summary(status))
    env = {**ENV, "hostname": f"{SCRIPT}{ANSI}", "torch": MARKUP, "python": JS_LINK}
    (run / "env.json").write_text(json.dumps(env))
    return run


def write_hostile_study(root: Path, kind: str) -> Path:
    """A hand-written study directory of ``kind`` whose labels, reasons and argv attack."""
    key = {"precision": "precision", "strategies": "strategy", "profile": "profile"}[kind]
    evil = f"{SCRIPT}{MARKUP}{MATH}{ANSI}"
    runs = [
        PlannedRun(config="fp32", repeat=1, labels={key: "fp32"}),
        PlannedRun(config="evil" + IMG, repeat=1, labels={key: evil}),
        PlannedRun(config="broken`x`", repeat=1, labels={key: "broken"}),
        PlannedRun(
            config="na" + META.replace("/", ""),
            repeat=1,
            labels={key: META},
            applicable=False,
            reason=f"{JS_LINK} {ANSI} **x**",
        ),
    ]
    plan = StudyPlan(kind, {"workload": {"name": SCRIPT}}, {"repeats": MARKUP}, runs)
    study = root / STUDY_NAME
    study.mkdir(parents=True)
    argv = ["trainscope", "study", kind, SCRIPT, "```", ANSI]
    write_study(study, plan, f"{SCRIPT}{ANSI}", argv=argv)
    for r in runs[:2]:
        write_hostile_run(study / "runs" / r.config, "r1")
    write_hostile_run(study / "runs" / runs[2].config, "r1", status="failed")
    return study


# ---------------------------------------------------------------------------------------
# Checks, one per output format
# ---------------------------------------------------------------------------------------


def outside_fences(md: str) -> str:
    """``md`` without its fenced code blocks (the one place text is shown verbatim)."""
    out: list[str] = []
    fence = None
    for line in md.splitlines():
        if fence is None and re.match(r"^`{3,}", line):
            fence = re.match(r"^`+", line).group(0)  # type: ignore[union-attr]
        elif fence is not None and line.strip() == fence:
            fence = None
        elif fence is None:
            out.append(line)
    assert fence is None, "a fenced code block was never closed"
    return "\n".join(out)


def assert_markdown_inert(md: str) -> None:
    """No raw tag, live link, control character or broken table; renders as text."""
    outside = outside_fences(md)
    assert not RAW_TAG.search(outside), RAW_TAG.search(outside)
    assert not re.search(r"(?<!\\)\]\(javascript", outside)
    assert not CONTROL.search(md)
    # Every row of a pipe table has as many (unescaped) pipes as its header.
    for table in re.findall(r"(?:^\|.*\n?)+", outside, re.MULTILINE):
        pipes = {len(re.findall(r"(?<!\\)\|", row)) for row in table.splitlines()}
        assert len(pipes) == 1, table
    # The proof: what a CommonMark renderer (GFM tables) makes of it.
    markdown_it = pytest.importorskip("markdown_it")
    page = markdown_it.MarkdownIt("commonmark").enable(["table", "strikethrough"]).render(md)
    assert set(re.findall(r"<(\w+)", page)) <= ALLOWED_TAGS, page
    assert "href=" not in page
    assert re.findall(r'<img src="([^"]*)"', page) == re.findall(r'<img src="(plots/[^"]*)"', page)
    assert page.count("<h1>") == 1


def assert_html_inert(page: str) -> None:
    """Escaped once (no "&amp;lt;"), no live tag from a record, no control characters."""
    assert "<script" not in page.lower() and "<img src=x" not in page
    assert 'http-equiv="refresh"' not in page
    assert html.escape(SCRIPT) in page and "&amp;lt;" not in page
    assert not CONTROL.search(page)


def assert_latex_inert(tex: str, tmp_path: Path) -> None:
    """Comments stay comments; no \\input/\\write18 from a record (that the tables
    compile: :func:`test_hostile_tables_compile`)."""
    assert latex_problems(tex) == []
    assert not CONTROL.search(tex)
    head = re.split(r"\\begin\{(?:table|longtable)\}|\\begingroup", tex, maxsplit=1)[0]
    assert all(line.startswith("%") for line in head.splitlines() if line.strip()), head
    assert not re.search(r"\\input\{(?!(?:tables|compare)\.tex\})", tex)
    assert "\\write18" not in tex and "\\textbackslash{}input" in tex  # shown, as text


def assert_console_inert(out: str) -> None:
    """Controls shown as escapes, markup shown as the text it is."""
    assert not CONTROL.search(out), repr(CONTROL.search(out))
    assert MARKUP in out  # the literal text: rich did not read it as a style
    assert "\\x1b]0;pwned\\x07" in out


@pytest.fixture
def plain_console(monkeypatch: pytest.MonkeyPatch) -> None:
    """rich writing to a captured stream: no styling of its own, lines wide enough."""
    for var in ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("COLUMNS", "400")


# ---------------------------------------------------------------------------------------
# Run report, comparison, study report
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("status", ["completed", "failed"])
def test_run_report_shows_record_text_as_text(
    tmp_path: Path, status: str, plain_console: None, capsys: pytest.CaptureFixture[str]
) -> None:
    run = write_hostile_run(tmp_path, status=status)
    report = build_run_report(run, tmp_path / "out")
    md = report.markdown_path.read_text(encoding="utf-8")
    assert_markdown_inert(md)
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in md
    assert_html_inert(report.html_path.read_text(encoding="utf-8"))
    assert_latex_inert((report.out_dir / "tables.tex").read_text(encoding="utf-8"), tmp_path)
    if status == "failed":
        # The traceback is verbatim inside a fence its own backticks cannot close.
        assert "\n`````text\nRuntimeError: " in md and f"\n{META}\n`````\n" in md
    capsys.readouterr()
    print_report(report)
    assert_console_inert(capsys.readouterr().out)


def test_comparison_shows_run_names_and_fields_as_text(
    tmp_path: Path, plain_console: None, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = [
        write_hostile_run(tmp_path / "a"),
        write_hostile_run(tmp_path / "b", "broken" + IMG, status="failed"),
        write_run(tmp_path / "c", "ok", COMPLETED),
    ]
    comparison = build_comparison(runs, tmp_path / "cmp")
    assert_markdown_inert((tmp_path / "cmp" / "compare.md").read_text(encoding="utf-8"))
    assert_html_inert((tmp_path / "cmp" / "compare.html").read_text(encoding="utf-8"))
    assert_latex_inert((tmp_path / "cmp" / "compare.tex").read_text(encoding="utf-8"), tmp_path)
    capsys.readouterr()
    print_comparison(comparison)
    assert_console_inert(capsys.readouterr().out)


@pytest.mark.parametrize("kind", ["precision", "strategies", "profile"])
def test_study_report_shows_labels_names_and_argv_as_text(
    tmp_path: Path, kind: str, plain_console: None, capsys: pytest.CaptureFixture[str]
) -> None:
    study = write_hostile_study(tmp_path, kind)
    report = build_study_report(study, tmp_path / "out")
    md = report.markdown_path.read_text(encoding="utf-8")
    assert_markdown_inert(md)
    assert_html_inert(report.html_path.read_text(encoding="utf-8"))
    assert_latex_inert((report.out_dir / "tables.tex").read_text(encoding="utf-8"), tmp_path)
    # Inline markup of our own survives next to escaped record text.
    assert "**&lt;script&gt;alert(1)&lt;/script&gt;" in md and "- `fp32`" not in md
    capsys.readouterr()
    print_study_report(report)
    err = capsys.readouterr().err
    assert not CONTROL.search(err) and "\\x1b]0;pwned\\x07" in err
    assert kind == "profile" or MARKUP in err  # profile tables show no labels


@pytest.mark.slow  # pdflatex, six times
def test_hostile_tables_compile(tmp_path: Path, cheap_figures: None) -> None:
    """The real proof, where LaTeX is installed: the tables.tex and compare.tex of the
    hostile records above (the same writers; figures are not part of them) compile."""
    if find_latex() is None:
        pytest.skip("no pdflatex or latexmk")
    texs = []
    for status in ("completed", "failed"):
        report = build_run_report(write_hostile_run(tmp_path / status, status=status))
        texs.append(report.out_dir / "tables.tex")
    runs = [
        write_hostile_run(tmp_path / "a"),
        write_hostile_run(tmp_path / "b", "broken" + IMG, status="failed"),
        write_run(tmp_path / "c", "ok", COMPLETED),
    ]
    texs.append(build_comparison(runs, tmp_path / "cmp").out_dir / "compare.tex")
    for kind in ("precision", "strategies", "profile"):
        study = write_hostile_study(tmp_path / kind, kind)
        texs.append(build_study_report(study, tmp_path / f"{kind}-out").out_dir / "tables.tex")
    for i, tex in enumerate(texs):
        compile_latex(tex.read_text(encoding="utf-8"), tmp_path / f"latex{i}")


def test_latex_rows_cannot_reach_the_previous_row_end() -> None:
    # "\\" (and "\midrule") look ahead for "*" and "[...]": a row starting with either
    # would be read as their argument (a star dropped, "[3pt]" a spacing, "[x]" an error).
    table = Table(["Class", "n"], [["*star", "1"], ["[3pt]z", "2"], ["ok", "3"]])
    tex = table.to_latex()
    assert "\\midrule\n{}*star & 1 \\\\\n{[}3pt{]}z & 2 \\\\\n" in tex
    assert latex_problems(tex) == []


# ---------------------------------------------------------------------------------------
# Figures
# ---------------------------------------------------------------------------------------


def test_figures_draw_dollar_and_backslash_names_as_text(tmp_path: Path) -> None:
    from trainscope.render.study_plots import bar_plot, loss_curves_plot

    # A stage named "$\invalid$" in the pie's legend: mathtext would raise when drawn.
    report = build_run_report(write_hostile_run(tmp_path), tmp_path / "out")
    assert (report.out_dir / "plots" / "stages.png").is_file()
    names = [MATH, "a$b$c", "x\\$y", "$\\frac{1}{$"]
    files = bar_plot(names, [1.0, 2.0, 3.0, 4.0], [0.1] * 4, tmp_path / "b.png", ylabel=MATH)
    svg = html.unescape(files[1].read_text(encoding="utf-8"))  # text stays <text> here
    assert all(name in svg for name in names)
    curves = {name: ([1, 2], [1.0, 0.5]) for name in names}
    files = loss_curves_plot(curves, tmp_path / "l.png", title=MATH)
    svg = html.unescape(files[1].read_text(encoding="utf-8"))
    assert all(name in svg for name in names)


def test_figures_never_send_record_text_to_latex(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import matplotlib
    from matplotlib.texmanager import TexManager

    from trainscope.render.study_plots import bar_plot

    def refuse(cls: type, tex: str, fontsize: float) -> str:
        raise AssertionError(f"sent to LaTeX: {tex!r}")

    # A user's matplotlibrc may turn usetex on; a run named \input{...} must not reach it.
    monkeypatch.setattr(TexManager, "make_dvi", classmethod(refuse))
    with matplotlib.rc_context({"text.usetex": True}):
        report = build_run_report(write_hostile_run(tmp_path), tmp_path / "out")
        assert (report.out_dir / "plots" / "loss.png").is_file()
        bar_plot([TEX], [1.0], [None], tmp_path / "b.png", ylabel=TEX, title=TEX)
