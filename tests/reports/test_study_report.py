"""Study reports built from real tiny studies: files, tables, findings, numbers, browser.

Each study kind (loader, profile, precision) is planned with the real planner and run
once per module through :func:`trainscope.studies.base.execute` on digits with tiny
budgets on the CPU; every test then reads the same study directory. Interrupted and
failed studies are small profile studies of their own.
"""

from __future__ import annotations

import json
import re
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest
import torch

from tests.reports.browser import browser_problems, require_browser
from tests.reports.latex import compile_latex, latex_problems
from tests.reports.runs import assert_png, pipe_rows, section
from tests.studies.heap import frozen, frozen_heap
from trainscope.analysis.stats import fmt_spread
from trainscope.config import from_dict
from trainscope.records.run_dir import STAGE_LABELS
from trainscope.records.run_dir import STAGES as ALL_STAGES
from trainscope.records.study_dir import StudyPlan, load_study
from trainscope.render.table import fmt_rate
from trainscope.reports.study_report import StudyReport, build_study_report, print_study_report
from trainscope.studies import loader, precision, profile
from trainscope.studies.base import StudyResult, execute
from trainscope.train.run import run as real_run
from trainscope.util.spread import differ, spread
from trainscope.workloads.base import Workload

# Stages of a one-process run: "comm" exists only with hand-written gradient sync.
# Stages of a run without them: no hand-written sync, checkpoints, compile or pipeline.
STAGES = tuple(s for s in ALL_STAGES if s not in ("comm", "checkpoint", "compile", "pipeline_wait"))

# Every test with the test process's heap frozen: the garbage collection a study makes
# after each run skips it (tests/studies/heap.py).
pytestmark = [pytest.mark.timeout(180), pytest.mark.usefixtures("frozen")]
__all__ = ["frozen"]  # a fixture, used through pytestmark

CPU = torch.device("cpu")
KINDS = ("loader", "profile", "precision")
IMAGE_LINK = re.compile(r"!\[[^\]]*\]\(([^)]+)\)")

EXPECTED_PLOTS = {
    "loader": ["loader_sweep.png", "loader_sweep.svg", "loader_per_iteration.png"],
    "profile": ["stages.png"],
    # No memory plot: these runs share the test's process, whose peak RSS compares nothing.
    "precision": ["precision_loss.png", "precision_memory.png", "precision_time.png"],
}
# Drawn only where a run outlasted two samples of the system sampler: on a slow or busy
# machine (the figure is linked exactly when it was written).
OPTIONAL_PLOTS = {"precision": ["precision_system.png"]}
EXPECTED_TABLES = {
    "loader": {"sweep", "per_iteration"},
    "profile": {"stages"},
    "precision": {"formats", "precision"},
}


def base_config(**train: Any) -> dict[str, Any]:
    """Plain config data of a quiet CPU digits run, as ``trainscope study`` passes it."""
    return from_dict(
        {
            "workload": {"name": "digits"},
            "runtime": {"device": "cpu", "progress": False},
            "train": {"epochs": 1, **train},
        }
    ).to_dict()


@dataclass
class Built:
    """A study executed and reported."""

    dir: Path
    plan: StudyPlan
    result: StudyResult
    report: StudyReport
    messages: list[str]

    @property
    def md(self) -> str:
        return self.report.markdown_path.read_text(encoding="utf-8")

    def summary(self, run_id: str) -> dict[str, Any]:
        return json.loads((self.dir / "runs" / run_id / "summary.json").read_text())


def build(plan: StudyPlan, study_dir: Path, **kwargs: Any) -> Built:
    """Execute ``plan`` in this process and build its report."""
    messages: list[str] = []
    with frozen_heap():  # the study's collection after each run skips the test's heap
        result = execute(plan, study_dir, say=messages.append, **kwargs)
        report = build_study_report(study_dir)
    return Built(study_dir, plan, result, report, messages)


@pytest.fixture(scope="module")
def loader_study(tmp_path_factory: pytest.TempPathFactory) -> Built:
    from torch.utils.data import _utils as loader_utils

    # A persistent-workers DataLoader left in a reference cycle is shut down by the
    # study's gc.collect(); from there torch's shutdown never reaches its worker, which
    # waits out MP_STATUS_CHECK_INTERVAL (5 s) before it is terminated: 5 s per run of
    # w1-persistent. 0.5 s here: the runs' loading is what is measured, not that wait.
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(loader_utils, "MP_STATUS_CHECK_INTERVAL", 0.5)
        return _loader_study(tmp_path_factory)


def _loader_study(tmp_path_factory: pytest.TempPathFactory) -> Built:
    plan = loader.plan(
        base_config(),
        CPU,
        workers=[0, 1],
        sweep_epochs=1,
        iter_workers=[0],
        iter_epochs=1,
        iter_steps=5,
        repeats=2,
    )
    return build(plan, tmp_path_factory.mktemp("loader") / "loader-study")


@pytest.fixture(scope="module")
def profile_study(tmp_path_factory: pytest.TempPathFactory) -> Built:
    plan = profile.plan(base_config(max_steps_per_epoch=10), CPU, repeats=2)
    return build(plan, tmp_path_factory.mktemp("profile") / "profile-study")


@pytest.fixture(scope="module")
def precision_study(tmp_path_factory: pytest.TempPathFactory) -> Built:
    plan = precision.plan(base_config(max_steps_per_epoch=10), CPU, repeats=1)
    return build(plan, tmp_path_factory.mktemp("precision") / "precision-study")


@pytest.fixture(params=KINDS)
def study(request: pytest.FixtureRequest) -> Built:
    """Each study kind in turn."""
    return request.getfixturevalue(f"{request.param}_study")


def table_row(report: StudyReport, table: str, first_cell: str, **match: str) -> list[str]:
    """The one row of a report table whose first cell (and named columns) match."""
    t = report.tables[table]
    rows = [
        row
        for row in t.cells()
        if row[0] == first_cell and all(row[t.columns.index(k)] == v for k, v in match.items())
    ]
    assert len(rows) == 1, (first_cell, match, t.cells())
    return rows[0]


# ---------------------------------------------------------------------------------------
# Every kind
# ---------------------------------------------------------------------------------------


def test_study_ran_completely(study: Built) -> None:
    assert study.result.failed == []
    assert load_study(study.dir).status == "completed"
    assert study.report.status == "completed"
    assert study.report.kind == study.plan.kind
    # A completed study carries no status warning.
    assert "Study status:" not in study.md


def test_report_files_and_plots_are_written(study: Built) -> None:
    out = study.dir / "report"
    assert study.report.out_dir == out
    for name in ("report.md", "report.html", "tables.tex"):
        assert (out / name).is_file() and (out / name) in study.report.files, name
    for name in EXPECTED_PLOTS[study.plan.kind]:
        path = out / "plots" / name
        assert path in study.report.files, name
        if name.endswith(".png"):
            assert_png(path)
            assert path.with_suffix(".svg").is_file()
        else:
            assert path.read_text(encoding="utf-8").lstrip().startswith(("<?xml", "<svg"))


def test_tables_have_expected_keys_and_rows(study: Built) -> None:
    tables = study.report.tables
    assert set(tables) == EXPECTED_TABLES[study.plan.kind]
    for name, table in tables.items():
        assert table.rows, name
        assert all(len(row) == len(table.columns) for row in table.rows), name


def test_findings_are_not_empty_and_quote_numbers(study: Built) -> None:
    assert study.report.findings
    for finding in study.report.findings:
        assert re.search(r"\d", finding), finding


def test_markdown_links_existing_plots(study: Built) -> None:
    links = [unquote(x) for x in IMAGE_LINK.findall(study.md)]
    pngs = [n for n in EXPECTED_PLOTS[study.plan.kind] if n.endswith(".png")]
    plots = study.report.out_dir / "plots"
    pngs += [n for n in OPTIONAL_PLOTS.get(study.plan.kind, []) if (plots / n).is_file()]
    assert sorted(links) == sorted(f"plots/{n}" for n in pngs)
    for link in links:
        assert (study.report.out_dir / link).is_file(), link


def test_markdown_says_workload_repeats_and_machine(study: Built) -> None:
    md = study.md
    assert md.startswith(f"# Study: {study.plan.kind} ({study.dir.name})\n")
    assert "Workload **digits**" in md
    repeats = study.plan.options["repeats"]
    assert f"{repeats} measured repeat(s) per configuration" in md
    assert "after one warm-up run that is discarded" in md
    assert "- device: `cpu`" in md
    assert f"`trainscope report {study.dir.resolve()}`" in md  # works from any folder


def test_latex_tables_are_valid(study: Built, tmp_path: Path) -> None:
    tex = (study.report.out_dir / "tables.tex").read_text(encoding="utf-8")
    # A table too wide for the default article's line is split in parts, each a float.
    parts = tex.count("The table above, continued")
    assert tex.count("\\begin{table}") - parts == len(study.report.tables)
    assert latex_problems(tex) == []
    compile_latex(tex, tmp_path)


def test_html_opens_cleanly_in_chromium(study: Built) -> None:
    require_browser()
    assert browser_problems(study.report.html_path) == []


def test_console_output_lists_findings(
    study: Built, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "400")  # no wrapping inside long paths
    print_study_report(study.report)
    err = " ".join(capsys.readouterr().err.split())
    for finding in study.report.findings:
        assert " ".join(finding.split())[:60] in err
    assert f"{study.report.markdown_path} and {study.report.html_path}" in err


def test_rebuilding_the_report_is_stable(study: Built, tmp_path: Path) -> None:
    again = build_study_report(study.dir, tmp_path / "again")
    assert again.findings == study.report.findings
    assert {k: t.cells() for k, t in again.tables.items()} == {
        k: t.cells() for k, t in study.report.tables.items()
    }
    # The markdown differs only in nothing: same records, same text.
    assert again.markdown_path.read_text(encoding="utf-8") == study.md


# ---------------------------------------------------------------------------------------
# Loader
# ---------------------------------------------------------------------------------------


def epoch_mean(summary: dict[str, Any]) -> float:
    return statistics.mean(e["duration_s"] for e in summary["epochs"])


def test_loader_study_planned_pin_memory_as_not_applicable(loader_study: Built) -> None:
    assert sorted(loader_study.result.not_applicable) == [
        "w0-pin/r1",
        "w0-pin/r2",
        "w1-pin/r1",
        "w1-pin/r2",
    ]
    assert not (loader_study.dir / "runs" / "w0-pin").exists()
    md = loader_study.md
    assert "pin_memory variants not run" in md
    assert "CUDA device; this run is on the CPU" in md


def test_loader_sweep_numbers_match_the_run_summaries(loader_study: Built) -> None:
    sweep = loader_study.report.tables["sweep"]
    assert sweep.columns[2:4] == ["n", "s/epoch"]
    spreads = {}
    for config, workers in (("w0", "0"), ("w1", "1")):
        # The warm-up run is discarded: only r1 and r2 count; median and min–max of them.
        per_run = [epoch_mean(loader_study.summary(f"{config}/r{k}")) for k in (1, 2)]
        sp = spreads[config] = spread(per_run)
        row = table_row(loader_study.report, "sweep", "DataLoader", Workers=workers)
        assert row[2] == "2"
        assert row[3] == fmt_spread(sp)
        # Three significant digits: within half a unit of the last one, at any magnitude (a
        # slow machine's epoch takes more than a second).
        shown, median = float(row[3].split(" (")[0]), statistics.median(per_run)
        assert shown == pytest.approx(median, rel=5e-3, abs=6e-4)
        rates = [loader_study.summary(f"{config}/r{k}")["samples_per_s"] for k in (1, 2)]
        assert row[4].startswith(fmt_rate(statistics.median(rates)))
    w1 = table_row(loader_study.report, "sweep", "DataLoader", Workers="1")
    if differ(spreads["w0"], spreads["w1"]):
        assert w1[6] == f"{spreads['w0'].median / spreads['w1'].median:.2f}x"
    else:
        assert w1[6] == "≈"  # no speed-up claimed inside the noise
    assert table_row(loader_study.report, "sweep", "DataLoader", Workers="0")[6] == "1.00x"
    labels = [row[0] for row in sweep.cells()]
    assert "DataLoader, persistent_workers" in labels
    assert "fast path (tensors on device)" in labels
    assert not any("pin_memory" in label for label in labels)
    # The markdown table shows the same cells.
    md_rows = pipe_rows(section(loader_study.md, "Loading time per epoch vs num_workers"))
    assert md_rows[0][:2] == ["DataLoader", "0"]
    assert [r[3] for r in md_rows] == [r[3] for r in sweep.cells()]


def test_loader_finding_names_workers_and_seconds_per_epoch(loader_study: Built) -> None:
    finding = loader_study.report.findings[0]
    assert re.search(r"num_workers=\d+|\d+ workers", finding), finding
    assert "s/epoch" in finding
    fast = [f for f in loader_study.report.findings if f.startswith("The fast path")]
    assert len(fast) == 1
    said = ("faster than the default DataLoader", "no measurable", "too few repeats to conclude")
    assert any(text in fast[0] for text in said), fast[0]


def test_loader_per_iteration_table_from_step_records(loader_study: Built) -> None:
    table = loader_study.report.tables["per_iteration"]
    keys = [(row[0], row[1]) for row in table.cells()]
    assert sorted(keys) == sorted(
        [("0 workers", "off"), ("0 workers", "on"), ("fast path", "off"), ("fast path", "on")]
    )
    # Data wait per iteration of 0 workers, augmentation off: mean over the two runs of
    # each run's mean data wait per step record, in ms.
    per_run = []
    for k in (1, 2):
        lines = (loader_study.dir / f"runs/iter-w0-aug0/r{k}/metrics.jsonl").read_text()
        steps = [json.loads(x) for x in lines.splitlines() if '"event": "step"' in x]
        assert len(steps) == 5
        per_run.append(statistics.mean(s["stages"]["data_wait"] for s in steps))
    row = table_row(loader_study.report, "per_iteration", "0 workers", Augment="off")
    shown = float(row[3].split(" (")[0])
    # Three significant digits, as every measured figure.
    assert shown == pytest.approx(1e3 * statistics.median(per_run), rel=5e-3)
    assert any(f.startswith("Cost of augmentation") for f in loader_study.report.findings)


# ---------------------------------------------------------------------------------------
# Profile
# ---------------------------------------------------------------------------------------


def test_profile_first_finding_is_the_biggest_stage(profile_study: Built) -> None:
    summaries = [profile_study.summary(f"run/r{k}") for k in (1, 2)]
    means = {s: statistics.mean(x["stages_s"][s] for x in summaries) for s in STAGES}
    wall = statistics.mean(x["wall_time_s"] for x in summaries)
    biggest = max(STAGES, key=lambda s: means[s])
    first = profile_study.report.findings[0]
    assert first.startswith("Biggest stage: ")
    assert f"{STAGE_LABELS[biggest]} is {100 * (means[biggest] / wall):.1f}% of the" in first
    assert "> Biggest stage: " in profile_study.md


def test_profile_stage_table_matches_summaries(profile_study: Built) -> None:
    summaries = [profile_study.summary(f"run/r{k}") for k in (1, 2)]
    cells = profile_study.report.tables["stages"].cells()
    assert [row[0] for row in cells] == [STAGE_LABELS[s] for s in STAGES] + ["total (wall)"]
    walls = [x["wall_time_s"] for x in summaries]
    assert cells[-1][1] == fmt_spread(spread(walls))
    forward = [x["stages_s"]["forward"] for x in summaries]
    row = cells[STAGES.index("forward")]
    assert row[1] == fmt_spread(spread(forward))
    steps = summaries[0]["steps"]
    per_step = float(row[3].split(" (")[0])
    # Three significant digits, as every measured figure.
    assert per_step == pytest.approx(1e3 * statistics.median(forward) / steps, rel=5e-3)
    assert "n=2" in profile_study.report.tables["stages"].caption


# ---------------------------------------------------------------------------------------
# Precision
# ---------------------------------------------------------------------------------------


def test_precision_table_marks_tf32_and_fp16_not_applicable(precision_study: Built) -> None:
    reasons = {r.config: r.reason for r in precision_study.plan.runs if not r.applicable}
    assert set(reasons) == {"tf32", "fp16"}
    assert sorted(precision_study.result.not_applicable) == ["fp16/r1", "tf32/r1"]
    cells = {row[0]: row for row in precision_study.report.tables["precision"].cells()}
    assert list(cells) == ["fp32", "tf32", "fp16", "bf16"]
    for name, reason in reasons.items():
        assert reason
        assert cells[name][1] == "not applicable"  # the reason is listed below the table
        assert set(cells[name][2:]) == {"–"}
        assert not (precision_study.dir / "runs" / name).exists()
        assert f"- {name}: {reason}" in precision_study.md
    assert cells["fp32"][1] == cells["bf16"][1] == "ran"
    assert "Not applicable on this device" in precision_study.md


def test_precision_finding_compares_bf16_with_fp32(precision_study: Built) -> None:
    fp32, bf16 = precision_study.summary("fp32/r1"), precision_study.summary("bf16/r1")
    assert fp32["precision"] == "fp32" and bf16["precision"] == "bf16"
    found = [f for f in precision_study.report.findings if f.startswith("bf16 vs fp32")]
    assert len(found) == 1
    # One repeat each: no spread, so no ratio of measurements is claimed, and the report
    # says what helps; counted bytes are exact, not samples: compared at any n.
    assert "throughput: no measurable difference: n=1 has no spread" in found[0]
    assert "training time: no measurable difference: n=1 has no spread" in found[0]
    assert re.search(r"activations (\d\.\d\dx|the same) \(.*counted, exact\)", found[0])
    assert "test accuracy" in found[0]
    row = table_row(precision_study.report, "precision", "bf16")
    assert row[6] == fmt_spread(spread([bf16["train_time_s"]]))


# ---------------------------------------------------------------------------------------
# Interrupted and failed studies
# ---------------------------------------------------------------------------------------


def broken_workload(cfg: Any) -> Workload:
    """A user workload factory that fails inside the run (the run records the failure)."""
    raise RuntimeError("broken *on purpose* `here`")


def test_interrupted_study_reports_its_status_and_progress(tmp_path: Path) -> None:
    plan = profile.plan(base_config(max_steps_per_epoch=5), CPU, repeats=3)  # + warm-up
    calls = []

    def stop_on_third(cfg: Any, console: Any) -> dict[str, Any]:
        calls.append(cfg.out)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real_run(cfg, console)

    study_dir = tmp_path / "stopped"
    with pytest.raises(KeyboardInterrupt):
        execute(plan, study_dir, say=lambda _: None, run_fn=stop_on_third)
    assert load_study(study_dir).status == "interrupted"

    report = build_study_report(study_dir)
    assert report.status == "interrupted"
    md = report.markdown_path.read_text(encoding="utf-8")
    # warm-up and r1 completed; r2 was interrupted before it started, r3 never ran.
    assert "Study **interrupted** after 2 of 4 planned runs" in md
    assert "Rerun the same `trainscope study` command" in md
    # Only the one measured run makes the statistics; the warm-up is not among them.
    r1 = json.loads((study_dir / "runs/run/r1/summary.json").read_text())
    total = report.tables["stages"].cells()[-1]
    assert total[1] == fmt_spread(spread([r1["wall_time_s"]]))
    assert "n=1" in report.tables["stages"].caption
    assert report.findings[0].startswith("Biggest stage: ")

    # Rerunning the same study finishes it and keeps the completed runs.
    result = execute(plan, study_dir, say=lambda _: None)
    assert sorted(result.skipped) == ["run/r1", "run/warmup"]
    assert sorted(result.executed) == ["run/r2", "run/r3"]
    finished = build_study_report(study_dir)
    assert finished.status == "completed"
    assert "Study status:" not in finished.markdown_path.read_text(encoding="utf-8")
    assert "n=3" in finished.tables["stages"].caption


def test_failed_run_is_listed_and_left_out_of_statistics(tmp_path: Path) -> None:
    plan = profile.plan(base_config(max_steps_per_epoch=5), CPU, repeats=3, warmup=False)

    def fail_r2(cfg: Any, console: Any) -> dict[str, Any]:
        if Path(cfg.out).name == "r2":
            cfg.workload.name = f"{__name__}:broken_workload"
        return real_run(cfg, console)

    study_dir = tmp_path / "with-failure"
    result = execute(plan, study_dir, say=lambda _: None, run_fn=fail_r2)
    assert result.failed == ["run/r2"]
    failed = json.loads((study_dir / "runs/run/r2/summary.json").read_text())
    assert failed["status"] == "failed"
    assert "broken *on purpose* `here`" in failed["error"]

    report = build_study_report(study_dir)
    assert report.status == "completed_with_failures"
    md = report.markdown_path.read_text(encoding="utf-8")
    assert "Study status: **completed_with_failures**. 2 of 3 planned runs" in md
    assert "1 run(s) failed; they are left out of the statistics" in md
    assert "- `run/r2`: " in md
    # The error text is shown verbatim, its markup characters escaped.
    assert "broken \\*on purpose\\* \\`here\\`" in md
    page = report.html_path.read_text(encoding="utf-8")
    assert "<code>run/r2</code>: " in page and "broken *on purpose* `here`" in page

    walls = [
        json.loads((study_dir / f"runs/run/r{k}/summary.json").read_text())["wall_time_s"]
        for k in (1, 3)
    ]
    total = report.tables["stages"].cells()[-1]
    assert total[1] == fmt_spread(spread(walls))
    assert "n=2" in report.tables["stages"].caption


def test_study_json_status_edited_to_interrupted(profile_study: Built, tmp_path: Path) -> None:
    """A status other than completed is reported even when every run completed."""
    data = json.loads((profile_study.dir / "study.json").read_text())
    data["status"] = "interrupted"
    copy = tmp_path / "copy"
    copy.mkdir()
    (copy / "study.json").write_text(json.dumps(data))
    for run in ("warmup", "r1"):  # r2 is missing in the copy
        src = profile_study.dir / "runs" / "run" / run
        dst = copy / "runs" / "run" / run
        dst.mkdir(parents=True)
        for f in src.iterdir():
            (dst / f.name).write_bytes(f.read_bytes())
    report = build_study_report(copy)
    md = report.markdown_path.read_text(encoding="utf-8")
    assert "Study **interrupted** after 2 of 3 planned runs" in md
    assert "n=1" in report.tables["stages"].caption


def test_a_killed_study_is_reported_as_interrupted_not_failed(
    profile_study: Built, tmp_path: Path
) -> None:
    """A study killed mid-run leaves study.json at "running" and the run it was in at
    "running": the report says interrupted after k of n, names the run it was cut off
    in, and does not count that run as failed."""
    data = json.loads((profile_study.dir / "study.json").read_text())
    data["status"] = "running"
    copy = tmp_path / "killed"
    copy.mkdir()
    (copy / "study.json").write_text(json.dumps(data))
    for run in ("warmup", "r1"):
        src = profile_study.dir / "runs" / "run" / run
        dst = copy / "runs" / "run" / run
        dst.mkdir(parents=True)
        for f in src.iterdir():
            (dst / f.name).write_bytes(f.read_bytes())
    summary = json.loads((copy / "runs/run/r1/summary.json").read_text())
    (copy / "runs/run/r1/summary.json").write_text(json.dumps({**summary, "status": "running"}))
    md = build_study_report(copy).markdown_path.read_text(encoding="utf-8")
    assert "Study **interrupted** after 1 of 3 planned runs (cut off during `run/r1`)" in md
    assert "failed" not in md.lower()
