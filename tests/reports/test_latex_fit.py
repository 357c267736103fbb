"""LaTeX tables fit the page of a default ``\\documentclass{article}``.

Every table here is compiled with pdflatex (skipped where it is missing) at the default
article size, with the packages its file's header names (booktabs, graphicx and
longtable for a bare table), and the log must show no overfull box and no float too
large for its page: nothing is scaled (scaled print is too small to read), wide tables
are set smaller (\\footnotesize at the least), their headers stacked, their columns
closer or wrapped, or split into parts; long ones are longtables that break across pages
with their header repeated. Those compiles are
``slow`` (about a second each), and so are the reports built here to be compiled; each
table's own LaTeX is also checked without compiling it (``lint``), in the quick tier.
"""

from __future__ import annotations

import copy
import re
import shutil
import string
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.reports.latex import (
    compile_latex,
    fit_problems,
    latex_problems,
    needed_packages,
)
from tests.reports.runs import COMPLETED, write_run
from trainscope.records.study_dir import PlannedRun, StudyPlan, write_study
from trainscope.render.table import Table, latex_escape
from trainscope.reports.compare import build_comparison
from trainscope.reports.run_report import build_run_report
from trainscope.reports.study_report import build_study_report

# The reports built here are compiled for their tables.tex: their figures are built but
# not saved (tests/reports/cheap.py).
pytestmark = pytest.mark.usefixtures("cheap_figures")

LONG_NAME = "lr_0.0003_wd_0.01_warmup_500_cosine_bs_256_seed_1234567"
# What a tables.tex needs, all in TeX Live's latex-base and latex-recommended.
PACKAGES = ["booktabs", "longtable"]
# Tables of more rows than this are longtables.
LONG_TABLE_ROWS = 40


# Each table test checks the LaTeX it gets (quick), then, as the slow case, compiles it.
COMPILED = pytest.mark.parametrize(
    "compiled", [False, pytest.param(True, marks=pytest.mark.slow)], ids=["lint", "pdflatex"]
)


def pages(log: str) -> int:
    m = re.search(r"Output written on doc\.pdf \((\d+) pages?", log)
    assert m, log[-2000:]
    return int(m.group(1))


def wide_table(rows: int) -> Table:
    """14 columns of long run names and long numbers: far wider than a page."""
    columns = ["Run"] + [f"{LONG_NAME[:20]} {j}" for j in range(13)]
    body = [
        [f"{LONG_NAME}_{i}"] + [f"{123456789.123 * (j + 1) + i:,.3f}" for j in range(13)]
        for i in range(rows)
    ]
    return Table(columns, body, "A wide table: 1.45x the text width and more.", "tab:wide")


# What sets a table's size: the three font sizes a table may use, and scaling commands.
SIZE_COMMANDS = re.compile(r"\\(tiny|scriptsize|footnotesize|small|normalsize|large)\b")
SCALING = re.compile(r"\\(resizebox|scalebox|adjustbox)\b")


def smallest_size(tex: str) -> str:
    """The smallest font size command in ``tex`` ("normalsize" where it sets none)."""
    order = ["tiny", "scriptsize", "footnotesize", "small", "normalsize", "large"]
    found = SIZE_COMMANDS.findall(tex) or ["normalsize"]
    return min(found, key=order.index)


@COMPILED
def test_wide_table_is_never_scaled_below_a_readable_size(tmp_path: Path, compiled: bool) -> None:
    """1.45x the text width and more: set in \\footnotesize (80% of the text) at the
    least and split into parts that fit, never scaled down to tiny print."""
    tex = wide_table(5).to_latex()
    assert latex_problems(tex) == []
    assert SCALING.search(tex) is None
    assert smallest_size(tex) == "footnotesize"
    parts = tex.count("\\begin{table}")
    assert parts > 1 and tex.count("\\label{tab:wide}") == 1
    assert f"(part {parts} of {parts})" in tex
    # The caption once; the next parts say they continue it.
    assert tex.count("A wide table") == 1
    assert f"\\caption{{The table above, continued (part 2 of {parts})}}" in tex
    if compiled:
        compile_latex(tex, tmp_path)  # no overfull box


# The lab's table of one slow rank (quick lab, chapter 1): long headers over short
# numbers, scaled to 70% of the text's size in report.pdf before.
SLOW_RANK = Table(
    ["Config", "Delay per sample on rank 1 (ms)", "n", "Step (ms)", "Rank 1 data wait (ms)",
     "Rank 0 data wait (ms)", "Rank 0 backward (ms)"],
    [["even", "0", "3", "2.60 (2.44–2.62)", "0.136 (0.131–0.141)", "0.137 (0.135–0.137)",
      "1.55 (1.38–1.55)"],
     ["slow-rank-1", "1", "3", "7.11 (6.86–7.16)", "4.55 (4.55–4.56)", "0.136 (0.131–0.142)",
      "6.01 (5.83–6.09)"]],
    "DDP on 2 processes of 1 thread, alternated.",
    "tab:slow-rank",
    "lrrrrrr",
)  # fmt: skip
# report.pdf's line (A4 less 2.5cm margins, 455pt), in em of its 10pt text.
REPORT_LINE_EM = 45.5


@COMPILED
def test_long_headers_are_stacked_over_their_columns(tmp_path: Path, compiled: bool) -> None:
    """Headers wider than their numbers are stacked in lines over them: on the report's
    line the table stays whole, in \\small; on the default article's narrower line it
    is split rather than set below \\footnotesize."""
    tex = SLOW_RANK.to_latex(line_em=REPORT_LINE_EM)
    assert latex_problems(tex) == []
    assert SCALING.search(tex) is None and tex.count("\\begin{table}") == 1
    assert smallest_size(tex) == "small"
    assert "\\parbox[b]{50.1pt}{\\raggedleft Delay per\\\\sample on\\\\rank 1 (ms)}" in tex
    narrow = SLOW_RANK.to_latex()
    assert SCALING.search(narrow) is None and smallest_size(narrow) == "footnotesize"
    if compiled:
        log = compile_latex(narrow, tmp_path / "narrow")
        assert "Overfull" not in log
        # The report's line, as geometry sets it.
        wide = "\\usepackage[a4paper,margin=2.5cm]{geometry}\n"
        compile_latex(tex, tmp_path / "wide", preamble=wide)


@COMPILED
def test_wrapped_numbers_stay_right_aligned(tmp_path: Path, compiled: bool) -> None:
    """Seven columns of spreads too wide for a line even in \\footnotesize: wrapped
    before each range (the range whole), still right-aligned."""
    spread = "291.0 KiB (all equal)"
    rows = [[f"config-{i}", *[spread] * 6] for i in range(3)]
    heads = ["Config", *(f"Figure {j}" for j in range(6))]
    table = Table(heads, rows, "Spreads.", "tab:sp", align="l" + "r" * 6)
    tex = table.to_latex()
    assert latex_problems(tex) == []
    assert SCALING.search(tex) is None and smallest_size(tex) == "footnotesize"
    assert tex.count("\\begin{table}") == 1
    assert "\\hspace*{\\fill}291.0 KiB\\newline \\hspace*{\\fill}(all equal)" in tex
    if compiled:
        compile_latex(tex, tmp_path)


@COMPILED
def test_long_table_breaks_across_pages(tmp_path: Path, compiled: bool) -> None:
    rows = [[str(i), f"{0.5 + i / 1000:.4f}", f"{97 - i / 100:.2f}%"] for i in range(200)]
    tex = Table(["Epoch", "Loss", "Accuracy"], rows, "200 epochs.", "tab:long").to_latex()
    assert latex_problems(tex) == []
    assert "\\begin{table}" not in tex and tex.count("\\begin{longtable}") == 1
    assert "\\endhead" in tex  # the header again on every page
    if compiled:
        assert pages(compile_latex(tex, tmp_path)) >= 4


@COMPILED
def test_long_and_wide_table_is_split_into_parts_that_fit(tmp_path: Path, compiled: bool) -> None:
    tex = wide_table(60).to_latex()
    assert latex_problems(tex) == []
    parts = tex.count("\\begin{longtable}")
    assert parts > 1 and tex.count("\\label{tab:wide}") == 1
    # The label column in every part, its long names wrapped.
    assert len(re.findall(r"\\endfoot\nlr\\_0.0003", tex)) == parts
    assert "\\newline" in tex
    if compiled:
        compile_latex(tex, tmp_path)


@COMPILED
def test_long_table_wraps_a_cell_wider_than_the_page(tmp_path: Path, compiled: bool) -> None:
    rows: list[list[object]] = [[f"class {i}", f"{i / 100:.2%}"] for i in range(LONG_TABLE_ROWS)]
    rows.append(["a name " + "x" * 150 + " " + LONG_NAME * 3, "1.0%"])
    tex = Table(["Class", "Accuracy"], rows, "Long names.", "tab:names").to_latex()
    assert latex_problems(tex) == []
    assert "\\newline" in tex and re.search(r"\\begin\{longtable\}\{.*p\{", tex)
    if compiled:
        compile_latex(tex, tmp_path)


@COMPILED
def test_a_short_narrow_table_stays_a_plain_float(tmp_path: Path, compiled: bool) -> None:
    tex = Table(["Stage", "Seconds"], [["forward", "0.900"]], "Stages.", "tab:s").to_latex()
    assert tex.splitlines()[:3] == ["\\begin{table}[ht]", "\\centering", "\\begin{tabular}{lr}"]
    if compiled:
        compile_latex(tex, tmp_path)


@pytest.mark.slow  # pdflatex
def test_run_report_tables_fit_the_page(tmp_path: Path) -> None:
    """A 100-epoch, 100-class run with long names: every table of its tables.tex."""
    summary = copy.deepcopy(COMPLETED)
    summary.update(workload=LONG_NAME, model="TransformerEncoderClassifierWithALongName")
    first = summary["epochs"][0]
    summary["epochs"] = [{**first, "epoch": i} for i in range(1, 101)]
    summary["per_class_accuracy"] = {f"class_{i}_{LONG_NAME}": 0.5 for i in range(100)}
    run = write_run(tmp_path, LONG_NAME, summary)
    tex = (build_run_report(run).out_dir / "tables.tex").read_text(encoding="utf-8")
    assert latex_problems(tex) == []
    assert needed_packages(tex) == PACKAGES  # the header names them all
    assert tex.count("\\begin{longtable}") >= 2  # epochs and classes
    assert pages(compile_latex(tex, tmp_path)) >= 5


def write_strategies_study(root: Path, configs: int) -> Path:
    """A hand-written strategies study (a wide table: 11 columns) of ``configs`` rows."""
    runs = [
        PlannedRun(
            config=f"s{i}",
            repeat=1,
            labels={"strategy": f"{LONG_NAME[:24]}_{i}", "processes": 2},
        )
        for i in range(configs)
    ]
    plan = StudyPlan("strategies", {"workload": {"name": "digits"}}, {"repeats": 1}, runs)
    study = root / "study"
    study.mkdir(parents=True)
    write_study(study, plan, "completed", argv=["trainscope", "study", "strategies"])
    summary: dict[str, Any] = copy.deepcopy(COMPLETED)
    summary.update(
        strategy="ddp",
        world_size=2,
        memory={
            "parameters_bytes": 123_456_789,
            "gradients_bytes": 123_456_789,
            "optimizer_states_bytes": 246_913_578,
            "activations_bytes": 987_654_321,
        },
    )
    for r in runs:
        write_run(study / "runs" / r.config, "r1", summary)
    return study


@pytest.mark.slow  # pdflatex
@pytest.mark.parametrize("configs", [4, 45])
def test_study_report_tables_fit_the_page(tmp_path: Path, configs: int) -> None:
    study = write_strategies_study(tmp_path, configs)
    report = build_study_report(study, tmp_path / "out")
    tex = (report.out_dir / "tables.tex").read_text(encoding="utf-8")
    assert latex_problems(tex) == []
    assert needed_packages(tex) == PACKAGES
    assert ("\\begin{longtable}" in tex) == (configs > LONG_TABLE_ROWS)
    compile_latex(tex, tmp_path)


@pytest.mark.slow  # pdflatex
def test_comparison_of_many_runs_fits_the_page(tmp_path: Path) -> None:
    runs = [write_run(tmp_path / f"{LONG_NAME}_{i}", "r1", COMPLETED) for i in range(8)]
    build_comparison(runs, tmp_path / "cmp")
    tex = (tmp_path / "cmp" / "compare.tex").read_text(encoding="utf-8")
    assert latex_problems(tex) == []
    compile_latex(tex, tmp_path)


def test_fit_problems_reads_overfull_boxes_and_large_floats() -> None:
    # The check must be able to fail, or "no fit problems" proves nothing.
    log = (
        "Overfull \\hbox (312.2pt too wide) in paragraph at lines 7--20\n"
        "Underfull \\hbox (badness 10000) in paragraph at lines 3--4\n"
        "LaTeX Warning: Float too large for page by 694.1pt on input line 194.\n"
    )
    assert fit_problems(log) == [
        "Overfull \\hbox (312.2pt too wide) in paragraph at lines 7--20",
        "LaTeX Warning: Float too large for page by 694.1pt on input line 194.",
    ]


def test_latex_checker_knows_longtables() -> None:
    good = Table(["a", "b"], [[str(i), "x"] for i in range(100)], "c", "tab:c").to_latex()
    assert latex_problems(good) == []
    nested = "\\begin{table}\n" + good + "\\end{table}\n"
    assert any("longtable inside a table float" in p for p in latex_problems(nested))
    no_head = good.replace("\\endfirsthead", "").replace("\\toprule", "", 1)
    assert any("booktabs rules" in p for p in latex_problems(no_head))
    short_row = good.replace("5 & x \\\\", "5 \\\\")
    assert "1 cells in a 2-column tabular" in "\n".join(latex_problems(short_row))


# The characters the width estimate knows: printable ASCII and what our formatting emits.
CHARS = [c for c in string.printable if c not in "\t\n\r\x0b\x0c "] + list("–×≈±µ≤≥")


@pytest.mark.slow  # pdflatex
@pytest.mark.parametrize("encoding", ["T1", "OT1"])
def test_width_estimate_is_never_below_the_real_width(tmp_path: Path, encoding: str) -> None:
    """Every glyph, in every size a longtable may use, is at most as wide as estimated:
    measured by TeX in Computer Modern (OT1) and its T1 version."""
    from trainscope.render.latex_layout import _SIZES, _char_em

    latex = shutil.which("pdflatex")
    if latex is None:
        pytest.skip("pdflatex is not on PATH")
    sizes = [command or "\\normalsize" for command, _ in _SIZES]
    body = "\n".join(
        f"\\sbox0{{{command}\\relax {latex_escape(c)}}}\\typeout{{W:{i}:{j}:\\the\\wd0}}"
        for j, command in enumerate(sizes)
        for i, c in enumerate(CHARS)
    )
    doc = tmp_path / "widths.tex"
    doc.write_text(
        f"\\documentclass{{article}}\n\\usepackage[{encoding}]{{fontenc}}\n"
        f"\\begin{{document}}\n{body}\n\\end{{document}}\n",
        encoding="utf-8",
    )
    cmd = [latex, "-interaction=nonstopmode", "-halt-on-error", doc.name]
    subprocess.run(cmd, cwd=tmp_path, capture_output=True, timeout=120, check=True)
    log = (tmp_path / "widths.log").read_text(encoding="utf-8", errors="replace")
    measured = re.findall(r"W:(\d+):(\d+):([\d.]+)pt", log)
    assert len(measured) == len(CHARS) * len(_SIZES)
    for i, j, width in measured:
        char, scale = CHARS[int(i)], _SIZES[int(j)][1]
        assert float(width) <= _char_em(char) * scale * 10.0 + 1e-3, (char, j, width)
