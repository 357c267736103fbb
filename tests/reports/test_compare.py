"""``trainscope compare``: runs side by side in Markdown, HTML (browser-checked) and LaTeX.

The checks by Chromium and pdflatex are ``slow``."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from tests.reports.browser import browser_problems, require_browser
from tests.reports.latex import compile_latex, latex_problems
from tests.reports.runs import COMPLETED, FAILED, pipe_rows, write_run
from trainscope.records.run_dir import STAGE_LABELS, load_run
from trainscope.records.run_dir import STAGES as ALL_STAGES
from trainscope.reports.compare import build_comparison, comparison_table

# Stages of a one-process run: "comm" exists only with hand-written gradient sync.
# Stages of a run without them: no hand-written sync, checkpoints, compile or pipeline.
STAGES = tuple(s for s in ALL_STAGES if s not in ("comm", "checkpoint", "compile", "pipeline_wait"))

pytestmark = pytest.mark.timeout(60)

BF16 = copy.deepcopy(COMPLETED)
BF16.update(precision="bf16", wall_time_s=5.0, test_accuracy=0.9612)
BF16["stages_s"] = {**COMPLETED["stages_s"], "forward": 1.25, "h2d": 0.0}


def rows_by_label(table) -> dict[str, list[str]]:
    return {row[0]: row[1:] for row in table.cells()}


@pytest.fixture
def same_named(tmp_path: Path) -> list[Path]:
    """Two study-style runs, both called r1, in folders a/ and b/."""
    return [write_run(tmp_path / "a", "r1", COMPLETED), write_run(tmp_path / "b", "r1", BF16)]


def test_one_column_per_run_named_by_directory(tmp_path: Path) -> None:
    runs = [write_run(tmp_path, "fp32-run", COMPLETED), write_run(tmp_path, "bf16-run", BF16)]
    table = comparison_table([load_run(p) for p in runs])
    assert table.columns == ["", "fp32-run", "bf16-run"]
    assert table.align == "lrr"
    assert all(len(row) == 3 for row in table.rows)
    rows = rows_by_label(table)
    assert rows["Status"] == ["completed", "completed"]
    assert rows["Precision"] == ["fp32", "bf16"]
    assert rows["Workload"] == ["digits", "digits"]
    assert rows["Epochs"] == ["2", "2"]
    assert rows["Steps"] == ["20", "20"]
    assert rows["Test accuracy"] == ["97.40%", "96.12%"]
    assert rows["Val accuracy (last epoch)"] == ["–", "–"]  # the last epoch was not evaluated
    assert rows["Wall time (s)"] == ["4.200", "5.000"]
    assert rows["Samples/s"] == ["6,100", "6,100"]
    assert rows["Peak memory"][0] == "333.8 MiB (process_peak_rss)"


def test_same_directory_names_get_their_parent_folder(same_named: list[Path]) -> None:
    table = comparison_table([load_run(p) for p in same_named])
    assert table.columns == ["", "a/r1", "b/r1"]


def test_stage_rows_give_seconds_and_share_of_wall(same_named: list[Path]) -> None:
    table = comparison_table([load_run(p) for p in same_named])
    labels = [row[0] for row in table.cells()]
    stage_labels = [label for label in labels if label.endswith(" (s)") and "time" not in label]
    assert stage_labels == [f"{STAGE_LABELS[s]} (s)" for s in STAGES]
    rows = rows_by_label(table)
    # forward: 0.9 s of 4.2 s, then 1.25 s of 5.0 s.
    assert rows["forward (s)"] == ["0.900 (21.4%)", "1.250 (25.0%)"]
    assert rows["setup (data, model) (s)"] == ["0.300 (7.1%)", "0.300 (6.0%)"]
    assert rows["host-to-device copy (s)"] == ["0.010 (0.2%)", "0.000 (0.0%)"]


def test_stage_rows_only_for_stages_some_run_measured(tmp_path: Path) -> None:
    a = copy.deepcopy(COMPLETED)
    a["stages_s"] = {"forward": 1.0}
    b = copy.deepcopy(COMPLETED)
    b["stages_s"] = {"backward": 2.0}
    b["wall_time_s"] = None
    runs = [write_run(tmp_path, "a", a), write_run(tmp_path, "b", b)]
    rows = rows_by_label(comparison_table([load_run(p) for p in runs]))
    assert rows["forward (s)"] == ["1.000 (23.8%)", "–"]
    assert rows["loss + backward (s)"] == ["–", "2.000"]  # no wall time: no share
    assert "setup (data, model) (s)" not in rows


def test_build_comparison_writes_markdown_html_and_latex(
    same_named: list[Path], tmp_path: Path
) -> None:
    out = tmp_path / "cmp"
    comparison = build_comparison(same_named, out)
    assert comparison.out_dir == out
    assert comparison.files == [out / "compare.md", out / "compare.html", out / "compare.tex"]
    assert all(p.is_file() for p in comparison.files)
    assert not (out / "report.md").exists() and not (out / "report.html").exists()

    md = (out / "compare.md").read_text(encoding="utf-8")
    assert md.startswith("# Comparison of 2 runs\n")
    rows = pipe_rows(md)
    assert rows[0][0] == "Status" and rows[0][1:] == ["completed", "completed"]
    header = [ln for ln in md.splitlines() if ln.startswith("|")][0]
    assert "a/r1" in header and "b/r1" in header
    assert "Not completed" not in md

    tex = (out / "compare.tex").read_text(encoding="utf-8")
    assert latex_problems(tex) == []
    assert "\\label{tab:compare}" in tex and "a/r1 & b/r1" in tex


@pytest.mark.slow  # pdflatex
def test_compare_tex_compiles(same_named: list[Path], tmp_path: Path) -> None:
    build_comparison(same_named, tmp_path / "cmp")
    compile_latex((tmp_path / "cmp" / "compare.tex").read_text(encoding="utf-8"), tmp_path)


@pytest.mark.slow  # Chromium
def test_comparison_html_opens_cleanly_in_chromium(same_named: list[Path], tmp_path: Path) -> None:
    comparison = build_comparison(same_named, tmp_path / "cmp")
    page = (tmp_path / "cmp" / "compare.html").read_text(encoding="utf-8")
    assert "<script" not in page.lower() and "a/r1" in page
    require_browser()
    assert browser_problems(comparison.out_dir / "compare.html") == []


def test_failed_run_gets_a_note(tmp_path: Path) -> None:
    runs = [write_run(tmp_path, "good", COMPLETED), write_run(tmp_path, "broken", FAILED)]
    comparison = build_comparison(runs, tmp_path / "cmp")
    rows = rows_by_label(comparison.table)
    assert rows["Status"] == ["completed", "failed"]
    assert rows["Test accuracy"] == ["97.40%", "–"]
    assert rows["Epochs"] == ["2", "0"]
    assert rows["forward (s)"] == ["0.900 (21.4%)", "–"]
    md = (tmp_path / "cmp" / "compare.md").read_text(encoding="utf-8")
    assert "> Not completed (numbers are partial): broken" in md
    page = (tmp_path / "cmp" / "compare.html").read_text(encoding="utf-8")
    assert "Not completed (numbers are partial): broken" in page
    assert latex_problems((tmp_path / "cmp" / "compare.tex").read_text(encoding="utf-8")) == []


def test_failed_run_note_uses_the_column_names(same_named: list[Path], tmp_path: Path) -> None:
    broken = write_run(tmp_path / "c", "r1", FAILED)
    build_comparison([*same_named, broken], tmp_path / "cmp")
    md = (tmp_path / "cmp" / "compare.md").read_text(encoding="utf-8")
    assert "> Not completed (numbers are partial): c/r1" in md


def test_latex_escapes_run_names(tmp_path: Path) -> None:
    runs = [write_run(tmp_path, "lr_0.1%", COMPLETED), write_run(tmp_path, "lr_0.2&b", BF16)]
    comparison = build_comparison(runs, tmp_path / "cmp")
    tex = (tmp_path / "cmp" / "compare.tex").read_text(encoding="utf-8")
    assert latex_problems(tex) == []
    assert comparison.table.columns[1:] == ["lr_0.1%", "lr_0.2&b"]


def test_failed_run_note_shows_the_name_verbatim(tmp_path: Path) -> None:
    runs = [write_run(tmp_path, "ok", COMPLETED), write_run(tmp_path, "lr*2*_`x`", FAILED)]
    build_comparison(runs, tmp_path / "cmp")
    page = (tmp_path / "cmp" / "compare.html").read_text(encoding="utf-8")
    assert "Not completed (numbers are partial): lr*2*_`x`</p>" in page
    assert "<strong>" not in page and "<code>x</code>" not in page


def _steady(median_ms: float, low_ms: float, high_ms: float) -> dict:
    return {
        "warmup_steps": 5,
        "steps": 95,
        "step_s": {
            "median": median_ms / 1e3,
            "low": low_ms / 1e3,
            "high": high_ms / 1e3,
            "kind": "IQR",
        },
    }


def test_compare_claims_a_step_time_ratio_only_beyond_the_noise(tmp_path: Path) -> None:
    """Per-step interquartile ranges that overlap give 'no measurable difference'; apart,
    a ratio. Wall times alone (here 4.2 vs 5.0 s) are never turned into a verdict."""
    base = {**COMPLETED, "steady_state": _steady(10.0, 9.5, 10.5)}
    close = {**BF16, "steady_state": _steady(10.3, 9.8, 10.9)}
    slow = {**BF16, "steady_state": _steady(20.0, 19.0, 21.0)}
    runs = [write_run(tmp_path, n, s) for n, s in (("a", base), ("b", close), ("c", slow))]
    comparison = build_comparison(runs, tmp_path / "cmp")
    b, c = comparison.findings
    assert b.startswith("b vs a: steady step time: no measurable difference at n=95")
    assert c.startswith("c vs a: steady step time 2.00x (20.0 ms vs 10.0 ms")
    md = (tmp_path / "cmp" / "compare.md").read_text(encoding="utf-8")
    assert "## Step time" in md and "2.00x" in md
    rows = rows_by_label(comparison.table)
    assert rows["Step time, steady (ms)"] == [
        "10.0 (IQR 9.50–10.5, n=95)",
        "10.3 (IQR 9.80–10.9, n=95)",
        "20.0 (IQR 19.0–21.0, n=95)",
    ]


def test_a_run_measured_under_other_load_gets_no_ratio(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The slow run had 1.9 cores of other load beside it: its 2.00x is not a finding."""
    monkeypatch.delenv("TRAINSCOPE_IGNORE_LOAD")  # the suite switches the rule off
    cpu = {"threads": 2, "processes_on_node": 1, "cores": 2}
    base = {
        **COMPLETED,
        "steady_state": _steady(10.0, 9.5, 10.5),
        "cpu": {**cpu, "other_cores": 0.0},
    }
    slow = {**BF16, "steady_state": _steady(20.0, 19.0, 21.0), "cpu": {**cpu, "other_cores": 1.9}}
    runs = [write_run(tmp_path, n, s) for n, s in (("a", base), ("c", slow))]
    (c,) = build_comparison(runs, tmp_path / "cmp").findings
    assert (
        c
        == "c vs a: steady step time: not a finding: other processes kept 1.9 cores busy during c."
    )


def test_each_figure_is_one_row_across_runs(tmp_path: Path) -> None:
    """Runs with different steady-step counts (95 and 40): their steady step times share
    one row, n in each cell, never a row per run with dashes for the others."""
    a = {**COMPLETED, "steady_state": _steady(10.0, 9.5, 10.5)}
    b = {**BF16, "steady_state": {**_steady(20.0, 19.0, 21.0), "steps": 40}}
    runs = [write_run(tmp_path, "a", a), write_run(tmp_path, "b", b)]
    table = build_comparison(runs, tmp_path / "cmp").table
    steady = [row for row in table.cells() if row[0].startswith("Step time, steady")]
    assert steady == [
        ["Step time, steady (ms)", "10.0 (IQR 9.50–10.5, n=95)", "20.0 (IQR 19.0–21.0, n=40)"]
    ]
    labels = [row[0] for row in table.cells()]
    assert len(labels) == len(set(labels))


def test_each_comparison_gets_a_folder_of_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without --out, each comparison writes a new runs/compare-<time> folder (as runs are
    named): a second comparison never writes over the first."""
    monkeypatch.setenv("TRAINSCOPE_RUNS", str(tmp_path / "root"))
    runs = [write_run(tmp_path, "a", COMPLETED), write_run(tmp_path, "b", BF16)]
    first = build_comparison(runs)
    second = build_comparison(runs[:1])
    assert first.out_dir != second.out_dir
    assert first.out_dir.parent == second.out_dir.parent == tmp_path / "root"
    assert all(c.out_dir.name.startswith("compare-") for c in (first, second))
    md = (first.out_dir / "compare.md").read_text(encoding="utf-8")
    assert "Comparison of 2 runs" in md  # untouched by the second
    assert "Comparison of 1 runs" in (second.out_dir / "compare.md").read_text(encoding="utf-8")
