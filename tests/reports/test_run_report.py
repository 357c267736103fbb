"""End-to-end report building from hand-written run directories (no torch, no GPU)."""

from __future__ import annotations

import copy
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.reports.latex import compile_latex, latex_problems
from tests.reports.runs import COMPLETED, FAILED, assert_png, pipe_rows, section, write_run
from trainscope.records.run_dir import STAGE_LABELS
from trainscope.records.run_dir import STAGES as ALL_STAGES
from trainscope.reports import MISSING, RunReport, build_run_report, render_tables_rich

# Stages of a one-process run: "comm" exists only with hand-written gradient sync.
# Stages of a run without them: no hand-written sync, checkpoints, compile or pipeline.
STAGES = tuple(s for s in ALL_STAGES if s not in ("comm", "checkpoint", "compile", "pipeline_wait"))

FIGURES = {"plots/stages.png", "plots/stages.svg", "plots/loss.png", "plots/loss.svg"} | {
    "plots/memory.png",
    "plots/memory.svg",
}


def rel_names(report: RunReport) -> set[str]:
    """The report's files relative to its output directory, e.g. ``plots/loss.png``."""
    return {p.relative_to(report.out_dir).as_posix() for p in report.files}


def test_completed_report_writes_all_files(completed: Path) -> None:
    report = build_run_report(completed)
    out = completed / "report"
    assert report.out_dir == out and not report.failed
    assert rel_names(report) == FIGURES | {"report.md", "report.html", "tables.tex"}
    assert all(p.is_file() for p in report.files)
    assert report.html_path == out / "report.html"
    assert_png(out / "plots" / "stages.png")
    assert_png(out / "plots" / "loss.png")
    for svg in ("stages.svg", "loss.svg"):
        assert "<svg" in (out / "plots" / svg).read_text()[:2000]
    md = report.markdown_path.read_text()
    assert md.startswith("# Run report: digits / LeNet5\n")
    assert "![Share of wall time per stage](plots/stages.png)" in md
    assert "![Training loss per step](plots/loss.png)" in md
    assert "First losses: 2.3000, 2.2900, 2.2700, 2.2100, 2.1500" in md
    assert "Run failed" not in md
    tables = ["overview", "attempts", "stages", "epochs", "per_class", "memory"]
    assert list(report.tables) == tables


def test_markdown_stage_table_has_every_stage_and_adds_up(completed_report: RunReport) -> None:
    md = completed_report.markdown_path.read_text()
    rows = pipe_rows(section(md, "Where the time went"))
    assert [r[0] for r in rows] == [STAGE_LABELS[s] for s in STAGES] + ["total (wall)"]
    shares = [float(r[2].rstrip("%")) for r in rows[:-1]]
    assert sum(shares) == pytest.approx(100.0, abs=0.5)
    assert rows[-1][1:] == ["4.200", "100.0%"]


def test_markdown_epoch_table_renders_nulls_as_dash(completed_report: RunReport) -> None:
    md = completed_report.markdown_path.read_text()
    rows = pipe_rows(section(md, "Per-epoch results"))
    assert rows[0] == ["1", "1.2000", "0.5000", "85.00%", "0.310", "6,000"]
    assert rows[1][3] == MISSING
    assert len(pipe_rows(section(md, "Per-class test accuracy"))) == 10


def test_latex_is_balanced_and_uses_booktabs(completed_report: RunReport) -> None:
    tex = (completed_report.run_dir / "report" / "tables.tex").read_text()
    assert latex_problems(tex) == []
    assert "\\usepackage{booktabs}" in tex.splitlines()[1] and tex.startswith("%")
    for env in ("table", "tabular"):
        assert tex.count(f"\\begin{{{env}}}") == tex.count(f"\\end{{{env}}}") == 5
    for rule in ("toprule", "midrule", "bottomrule"):
        assert tex.count(f"\\{rule}") == 5
    assert "\\label{tab:run-cpu-stages}" in tex
    assert "28.6\\%" in tex  # 1.2 s of 4.2 s, percent sign escaped


def test_latex_escapes_special_characters(tmp_path: Path, cheap_figures: None) -> None:
    summary = {**copy.deepcopy(COMPLETED), "workload": "my_model & co", "model": "Net#1 {50%}"}
    run = write_run(tmp_path, "special", summary)
    build_run_report(run)
    tex = (run / "report" / "tables.tex").read_text()
    assert latex_problems(tex) == []
    assert "my\\_model \\& co" in tex and "Net\\#1 \\{50\\%\\}" in tex
    assert "my_model & co" not in tex
    # Every unescaped & is a column separator: the overview rows have exactly one.
    body = tex.split("tab:special-overview")[0]
    for line in body.splitlines():
        if line.endswith("\\\\") and "Field" not in line:
            assert len(re.findall(r"(?<!\\)&", line)) == 1, line


def test_latex_checker_finds_problems() -> None:
    # The checker must be able to fail, or "latex_problems(tex) == []" proves nothing.
    bad = (
        "\\begin{tabular}{lr}\n\\hline\na & b & c \\\\\n50% {x \\\\\n\\end{table}\n\\begin{table}\n"
    )
    problems = "\n".join(latex_problems(bad))
    for expected in (
        "tabular outside a table environment",
        "\\hline instead of booktabs rules",
        "3 cells in a 2-column tabular",
        "unescaped %",
        "\\end{table} closes \\begin{tabular}",
        "booktabs rules []",
        "unclosed '{'",
        "\\begin{table} never ended",
    ):
        assert expected in problems, (expected, problems)


@pytest.mark.slow  # pdflatex
def test_tables_tex_compiles(tmp_path: Path, cheap_figures: None) -> None:
    summary = {**copy.deepcopy(COMPLETED), "workload": "my_model & co ~^\\"}
    run = write_run(tmp_path, "compile", summary)
    tex = (build_run_report(run).out_dir / "tables.tex").read_text()
    assert latex_problems(tex) == []
    compile_latex(tex, tmp_path)  # skips without pdflatex/latexmk


def test_failed_run_report_says_so(tmp_path: Path) -> None:
    run = write_run(tmp_path, "failed", FAILED, steps=0)
    report = build_run_report(run)
    assert report.failed and report.error is not None
    md = report.markdown_path.read_text()
    assert "Run failed: RuntimeError: loss became nan at step 7" in md
    assert "Traceback (most recent call last)" in md  # the whole message, in a code block
    assert "No per-stage timings were recorded." in md
    assert pipe_rows(section(md, "Where the time went")) == [["total (wall)", "0.800", "100.0%"]]
    assert "No step losses were recorded." in md
    assert rel_names(report) == {"report.md", "report.html", "tables.tex"}
    assert not (report.out_dir / "plots").exists()  # nothing drawn: no empty folder
    facts = dict(report.tables["overview"].rows)
    assert facts["Status"] == "failed" and facts["Test accuracy"] == MISSING
    tex = (run / "report" / "tables.tex").read_text()
    assert latex_problems(tex) == []
    assert tex.count("\\begin{table}") == tex.count("\\end{table}") == 2  # overview + total


def test_gpu_run_report_renders_without_a_gpu(tmp_path: Path) -> None:
    summary = copy.deepcopy(COMPLETED)
    summary.update(
        device="cuda",
        device_name="NVIDIA H200",
        precision="bf16",
        timing_mode="cuda_events",
        peak_memory_kind="cuda_max_allocated",
        peak_memory_bytes=5 * 1024**3,
    )
    summary["stages_s"]["other"] = -0.004
    summary["wall_time_s"] = sum(summary["stages_s"].values())
    out = tmp_path / "elsewhere"
    report = build_run_report(write_run(tmp_path, "run-gpu", summary), out)
    assert report.out_dir == out
    assert_png(out / "plots" / "stages.png")
    md = (out / "report.md").read_text()
    assert "5.0 GiB (cuda_max_allocated)" in md and "cuda (NVIDIA H200)" in md
    rows = pipe_rows(section(md, "Where the time went"))
    assert rows[STAGES.index("other")][:2] == ["other", "-0.004"]


def test_rebuild_is_stable_and_drops_stale_figures(completed_report: RunReport) -> None:
    first = completed_report  # built once, copied here: rebuilt in place below
    completed = first.run_dir
    md, tex = first.markdown_path.read_text(), (first.out_dir / "tables.tex").read_text()
    assert build_run_report(completed).markdown_path.read_text() == md
    assert (first.out_dir / "tables.tex").read_text() == tex
    assert (first.out_dir / "report.html").read_text() == first.html_path.read_text()
    # The same directory, now without step events: the old loss plot must not linger.
    (completed / "metrics.jsonl").write_text("")
    again = build_run_report(completed)
    assert not (again.out_dir / "plots" / "loss.png").exists()
    assert not (again.out_dir / "plots" / "loss.svg").exists()
    assert not [p.name for p in again.out_dir.iterdir() if p.suffix in (".png", ".svg")]
    assert rel_names(again) == {"plots/stages.png", "plots/stages.svg"} | {
        "plots/memory.png",
        "plots/memory.svg",
        "report.md",
        "report.html",
        "tables.tex",
    }
    assert "![Training loss per step]" not in again.markdown_path.read_text()
    assert again.html_path.read_text().count("<img ") == 2  # the stage pie, the memory bar


def test_render_tables_rich(completed_report: RunReport) -> None:
    from rich.console import Console

    tables = render_tables_rich(completed_report)
    assert len(tables) == 5
    console = Console(record=True, width=120)
    for t in tables:
        console.print(t)
    text = console.export_text()
    assert "loss + backward" in text and "333.8 MiB" in text


def test_import_reports_does_not_import_torch_or_plotting() -> None:
    code = (
        "import sys, trainscope.reports; "
        "bad = [m for m in ('torch', 'matplotlib', 'rich') if m in sys.modules]; "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_every_stage_has_a_colour_of_its_own() -> None:
    """11 stages on a 10-colour palette: 'other' wrapped round to setup's blue."""
    from matplotlib.colors import to_hex

    from trainscope.records.run_dir import STAGES
    from trainscope.render.plots import stage_color

    assert len({to_hex(stage_color(stage)) for stage in STAGES}) == len(STAGES)
