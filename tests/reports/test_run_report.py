"""End-to-end report building from hand-written run directories (no torch, no GPU)."""

from __future__ import annotations

import copy
import json
import math
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from trainscope.records.run_dir import STAGE_LABELS, STAGES
from trainscope.reports import MISSING, build_run_report, render_tables_rich

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

COMPLETED: dict[str, Any] = {
    "schema_version": 1,
    "status": "completed",
    "error": None,
    "workload": "digits",
    "model": "LeNet5",
    "num_parameters": 44426,
    "device": "cpu",
    "device_name": "x86_64 CPU",
    "precision": "fp32",
    "timing_mode": "perf_counter",
    "wall_time_s": 4.2,
    "train_time_s": 3.1,
    "stages_s": {
        "setup": 0.3,
        "data_wait": 0.4,
        "h2d": 0.01,
        "forward": 0.9,
        "backward": 1.2,
        "optimizer": 0.4,
        "evaluation": 0.5,
        "other": 0.49,
    },
    "steps": 20,
    "samples": 1280,
    "samples_per_s": 6100.0,
    "batch_size": 64,
    "skipped_steps": 0,
    "test_accuracy": 0.974,
    "test_loss": 0.09,
    "per_class_accuracy": {str(i): 0.9 + i / 100 for i in range(10)},
    "first_losses": [2.30, 2.29, 2.27, 2.21, 2.15],
    "epochs": [
        {
            "epoch": 1,
            "train_loss": 1.2,
            "val_loss": 0.5,
            "val_accuracy": 0.85,
            "duration_s": 0.31,
            "samples_per_s": 6000.0,
        },
        {
            "epoch": 2,
            "train_loss": 0.4,
            "val_loss": 0.3,
            "val_accuracy": None,
            "duration_s": 0.29,
            "samples_per_s": 6200.0,
        },
    ],
    "peak_memory_bytes": 350_000_000,
    "peak_memory_kind": "process_peak_rss",
    "system": {"samples": 4, "cpu_percent_mean": 180.0, "rss_max_bytes": 350_000_000},
}

FAILED: dict[str, Any] = {
    "schema_version": 1,
    "status": "failed",
    "error": "RuntimeError: loss became nan at step 7\nTraceback (most recent call last): ...",
    "workload": "digits",
    "model": "LeNet5",
    "device": "cpu",
    "precision": "fp32",
    "wall_time_s": 0.8,
    "test_accuracy": None,
}

ENV = {"python": "3.11.2", "torch": "2.6.0", "cuda": None, "hostname": "box"}


def write_run(root: Path, name: str, summary: dict[str, Any], steps: int = 20) -> Path:
    """A run directory as training writes it, with ``steps`` step events over 2 epochs."""
    run = root / name
    run.mkdir(parents=True)
    (run / "summary.json").write_text(json.dumps(summary))
    (run / "env.json").write_text(json.dumps(ENV))
    (run / "config.yaml").write_text(yaml.safe_dump({"workload": summary.get("workload")}))
    lines = [
        {
            "event": "step",
            "epoch": 1 + (i - 1) * 2 // steps,
            "step": i,
            "loss": 2.3 * math.exp(-i / 6),
            "lr": 0.1,
        }
        for i in range(1, steps + 1)
    ]
    lines.append({"event": "epoch", "epoch": 2, "train_loss": 0.4})
    text = "".join(json.dumps(x) + "\n" for x in lines)
    (run / "metrics.jsonl").write_text(text + '{"event": "step", "ep')  # killed mid-line
    return run


def section(md: str, heading: str) -> str:
    """The text of one '## heading' section of report.md."""
    return md.split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]


def pipe_rows(text: str) -> list[list[str]]:
    """Body rows of the first pipe table in ``text`` (header and rule dropped)."""
    rows = [ln for ln in text.splitlines() if ln.startswith("|")]
    return [[c.strip() for c in ln.strip("|").split(" | ")] for ln in rows[2:]]


def assert_png(path: Path) -> None:
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC, f"{path} is not a PNG"
    assert len(data) > 10_000, f"{path} is suspiciously small ({len(data)} bytes)"


@pytest.fixture
def completed(tmp_path: Path) -> Path:
    return write_run(tmp_path, "run-cpu", COMPLETED)


def test_completed_report_writes_all_files(completed: Path) -> None:
    report = build_run_report(completed)
    out = completed / "report"
    assert report.out_dir == out and not report.failed
    names = {p.name for p in report.files}
    assert names == {"stages.png", "stages.svg", "loss.png", "report.md", "tables.tex"}
    assert all(p.is_file() for p in report.files)
    assert_png(out / "stages.png")
    assert_png(out / "loss.png")
    assert "<svg" in (out / "stages.svg").read_text()[:2000]
    md = report.markdown_path.read_text()
    assert md.startswith("# Run report: digits / LeNet5\n")
    assert "![Share of wall time per stage](stages.png)" in md
    assert "![Training loss per step](loss.png)" in md
    assert "First losses: 2.3000, 2.2900, 2.2700, 2.2100, 2.1500" in md
    assert "Run failed" not in md
    assert list(report.tables) == ["overview", "stages", "epochs", "per_class"]


def test_markdown_stage_table_has_every_stage_and_adds_up(completed: Path) -> None:
    md = build_run_report(completed).markdown_path.read_text()
    rows = pipe_rows(section(md, "Where the time went"))
    assert [r[0] for r in rows] == [STAGE_LABELS[s] for s in STAGES] + ["total (wall)"]
    shares = [float(r[2].rstrip("%")) for r in rows[:-1]]
    assert sum(shares) == pytest.approx(100.0, abs=0.5)
    assert rows[-1][1:] == ["4.200", "100.0%"]


def test_markdown_epoch_table_renders_nulls_as_dash(completed: Path) -> None:
    md = build_run_report(completed).markdown_path.read_text()
    rows = pipe_rows(section(md, "Per-epoch results"))
    assert rows[0] == ["1", "1.2000", "0.5000", "85.00%", "0.310", "6,000"]
    assert rows[1][3] == MISSING
    assert len(pipe_rows(section(md, "Per-class test accuracy"))) == 10


def test_latex_is_balanced_and_uses_booktabs(completed: Path) -> None:
    build_run_report(completed)
    tex = (completed / "report" / "tables.tex").read_text()
    assert "\\usepackage{booktabs}" in tex.splitlines()[1] and tex.startswith("%")
    for env in ("table", "tabular"):
        assert tex.count(f"\\begin{{{env}}}") == tex.count(f"\\end{{{env}}}") == 4
    for rule in ("toprule", "midrule", "bottomrule"):
        assert tex.count(f"\\{rule}") == 4
    assert "\\label{tab:run-cpu-stages}" in tex
    assert "28.6\\%" in tex  # 1.2 s of 4.2 s, percent sign escaped
    body = [ln for ln in tex.splitlines() if not ln.startswith("%")]
    assert not [ln for ln in body if re.search(r"(?<!\\)%", ln)]  # no bare % comments a cell out


def test_latex_escapes_special_characters(tmp_path: Path) -> None:
    summary = {**copy.deepcopy(COMPLETED), "workload": "my_model & co", "model": "Net#1 {50%}"}
    run = write_run(tmp_path, "special", summary)
    build_run_report(run)
    tex = (run / "report" / "tables.tex").read_text()
    assert "my\\_model \\& co" in tex and "Net\\#1 \\{50\\%\\}" in tex
    assert "my_model & co" not in tex
    # Every unescaped & is a column separator: the overview rows have exactly one.
    body = tex.split("tab:special-overview")[0]
    for line in body.splitlines():
        if line.endswith("\\\\") and "Field" not in line:
            assert len(re.findall(r"(?<!\\)&", line)) == 1, line


LATEX = shutil.which("latexmk") or shutil.which("pdflatex")


@pytest.mark.skipif(LATEX is None, reason="neither pdflatex nor latexmk is on PATH")
def test_tables_tex_compiles(tmp_path: Path) -> None:
    summary = {**copy.deepcopy(COMPLETED), "workload": "my_model & co ~^\\"}
    run = write_run(tmp_path, "compile", summary)
    out = build_run_report(run).out_dir
    (out / "doc.tex").write_text(
        "\\documentclass{article}\n\\usepackage[T1]{fontenc}\n\\usepackage{booktabs}\n"
        "\\begin{document}\n\\input{tables.tex}\n\\end{document}\n"
    )
    assert LATEX is not None
    cmd = (
        [LATEX, "-pdf", "-interaction=nonstopmode", "doc.tex"]
        if "latexmk" in LATEX
        else [LATEX, "-interaction=nonstopmode", "-halt-on-error", "doc.tex"]
    )
    proc = subprocess.run(cmd, cwd=out, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert (out / "doc.pdf").stat().st_size > 1000


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
    assert {p.name for p in report.files} == {"report.md", "tables.tex"}
    facts = dict(report.tables["overview"].rows)
    assert facts["Status"] == "failed" and facts["Test accuracy"] == MISSING
    tex = (run / "report" / "tables.tex").read_text()
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
    assert_png(out / "stages.png")
    md = (out / "report.md").read_text()
    assert "5.0 GiB (cuda_max_allocated)" in md and "cuda (NVIDIA H200)" in md
    rows = pipe_rows(section(md, "Where the time went"))
    assert rows[STAGES.index("other")][:2] == ["other", "-0.004"]


def test_rebuild_is_stable_and_drops_stale_figures(completed: Path) -> None:
    first = build_run_report(completed)
    md, tex = first.markdown_path.read_text(), (first.out_dir / "tables.tex").read_text()
    assert build_run_report(completed).markdown_path.read_text() == md
    assert (first.out_dir / "tables.tex").read_text() == tex
    # The same directory, now without step events: the old loss plot must not linger.
    (completed / "metrics.jsonl").write_text("")
    again = build_run_report(completed)
    assert not (again.out_dir / "loss.png").exists()
    assert "![Training loss per step]" not in again.markdown_path.read_text()


def test_render_tables_rich(completed: Path) -> None:
    from rich.console import Console

    tables = render_tables_rich(build_run_report(completed))
    assert len(tables) == 4
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
