"""Study reports never overclaim: planted noisy records that mean ± std, a mean of rates
or a plain "lowest wins" would misreport, and what the reports say about them instead."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.studies.heap import frozen_heap
from trainscope.analysis.stats import task_of
from trainscope.config import RunConfig, from_dict
from trainscope.records import RunWriter, prepare_run_dir
from trainscope.reports.study_report import build_study_report
from trainscope.studies import loader, precision, profile, strategies
from trainscope.studies.base import execute

pytestmark = pytest.mark.timeout(120)

CPU = torch.device("cpu")
# A core budget of 2 whatever the machine: 1- and 2-process strategies both keep it.
BASE = from_dict({"runtime": {"device": "cpu", "threads": 2}, "train": {"epochs": 1}}).to_dict()


class Planted:
    """A ``run_fn`` writing the summary planted for each run id ("config/rK"); the
    warm-up run and anything not planted gets a plain completed summary."""

    def __init__(self, summaries: dict[str, dict[str, Any]], fresh: bool = False) -> None:
        self.summaries = summaries
        self.fresh = fresh

    def __call__(self, cfg: RunConfig, console: Any) -> dict[str, Any]:
        run_dir = Path(cfg.out)
        run_id = f"{run_dir.parent.name}/{run_dir.name}"
        writer = RunWriter(prepare_run_dir(cfg.out, True))
        try:
            for step in range(1, 11):
                stages = {"data_wait": 0.001, "forward": 0.002, "backward": 0.003}
                writer.log("step", step=step, epoch=1, batch_size=8, t=0.01 * step, stages=stages)
            writer.close()
            summary = {
                "status": "completed",
                "error": None,
                "workload": "digits",
                "device": "cpu",
                "precision": cfg.runtime.precision,
                "peak_memory_kind": "process_peak_rss",
                "process": {"startup_s": 2.0, "time_s": 3.0, "runs_before": 0 if self.fresh else 1},
                "steady_state": {"warmup_steps": 5},
                **self.summaries.get(run_id, {}),
            }
            writer.write_summary(summary)
            return summary
        finally:
            writer.release()


def report_of(plan: Any, tmp_path: Path, planted: Planted) -> Any:
    """Execute ``plan`` with the planted records and build its report."""
    with frozen_heap():  # the study's collection after each run skips the test's heap
        execute(plan, tmp_path / "study", say=lambda _: None, run_fn=planted)
        return build_study_report(tmp_path / "study")


def test_precision_conclusion_agrees_with_its_own_table(tmp_path: Path) -> None:
    """fp32 has one very slow repeat (wall 10 s): its mean wall would make bf16 look
    faster (0.74x), while every table figure says bf16 trains at ~0.38x the rate. The
    finding states the throughput ratio the table shows, and no wall-time verdict."""

    def rep(train: float, wall: float, acc: float) -> dict[str, Any]:
        return {
            "train_time_s": train,
            "wall_time_s": wall,
            "samples": 4379,
            "samples_per_s": 4379 / train,
            "test_accuracy": acc,
            "epochs": [{"train_loss": 0.1, "val_accuracy": acc}],
        }

    planted = {
        "fp32/r1": rep(1.00, 10.0, 0.950),
        "fp32/r2": rep(1.02, 1.2, 0.952),
        "fp32/r3": rep(0.98, 1.3, 0.951),
        "bf16/r1": rep(2.60, 3.0, 0.949),
        "bf16/r2": rep(2.65, 3.1, 0.953),
        "bf16/r3": rep(2.70, 3.2, 0.950),
    }
    plan = precision.plan(BASE, CPU, repeats=3, precisions=["fp32", "bf16"])
    report = report_of(plan, tmp_path, Planted(planted))
    (finding,) = [f for f in report.findings if f.startswith("bf16 vs fp32")]
    assert "throughput 0.38x" in finding
    assert "training time 2.65x" in finding
    assert "wall" not in finding
    # 95.0/95.2/95.1 vs 94.9/95.3/95.0 overlap: no accuracy claim.
    assert "test accuracy: no measurable difference at n=3" in finding
    rows = {r[0]: r for r in report.tables["precision"].cells()}
    assert rows["fp32"][7].startswith("4,379") and rows["bf16"][7].startswith("1,652")
    # Runs that shared one process: no peak-memory comparison at all.
    assert "peak memory" not in finding
    md = report.markdown_path.read_text(encoding="utf-8")
    assert "shared one process" in md and "cannot tell precisions apart" in md


def test_study_throughput_is_the_median_of_per_repeat_totals(tmp_path: Path) -> None:
    """Per-repeat samples/s of 1,000, 1,100 and 49,000 (one tiny fast repeat): the mean
    of rates (17,033) is what one fast repeat makes it; the report shows the median, and
    flags the fast repeat as an outlier."""
    planted = {
        f"single/r{k}": {"samples_per_s": rate, "train_time_s": t, "steps": 10}
        for k, (rate, t) in enumerate([(1000.0, 1.0), (1100.0, 0.9), (49000.0, 0.02)], 1)
    }
    plan = strategies.plan(BASE, CPU, repeats=3, strategies=["single"])
    report = report_of(plan, tmp_path, Planted(planted, fresh=True))
    row = report.tables["strategies"].cells()[0]
    samples = row[report.tables["strategies"].columns.index("Samples/s")]
    assert samples.startswith("1,100 (1,000–49,000)")
    assert "17,033" not in samples


def test_outlier_repeats_are_flagged_in_the_table(tmp_path: Path) -> None:
    walls = [1.00, 1.01, 0.99, 1.02, 5.0]
    planted = {
        f"run/r{k}": {"wall_time_s": w, "stages_s": {"setup": w}} for k, w in enumerate(walls, 1)
    }
    plan = profile.plan(BASE, CPU, repeats=5)
    report = report_of(plan, tmp_path, Planted(planted))
    total = report.tables["stages"].cells()[-1]
    assert total[0] == "total (wall)"
    assert total[1] == "1.01 (1.00–1.02) [1 outlier]"


def test_loader_names_no_fastest_setting_inside_the_noise(tmp_path: Path) -> None:
    """2 workers has the lowest median, but 1 and 4 workers overlap it: no star, no
    "fastest", the group is named; the default (clearly slower) gets no speed-up claim
    against the noisy ones."""
    per_epoch = {
        "w0": [3.0, 3.1, 3.2],
        "w1": [1.5, 2.0, 2.5],
        "w2": [1.4, 1.9, 2.6],
        "w4": [1.6, 2.1, 2.4],
    }
    planted = {
        f"{cfg}/r{k}": {
            "epochs": [{"duration_s": s, "loader_start_s": 0.1}],
            "samples_per_s": 1 / s,
        }
        for cfg, secs in per_epoch.items()
        for k, s in enumerate(secs, 1)
    }
    plan = loader.plan(
        BASE, CPU, repeats=3, workers=[0, 1, 2, 4], sweep_epochs=1, iter_workers=[], iter_epochs=1
    )
    plan.runs[:] = [r for r in plan.runs if r.group == "sweep" or r.warmup]
    report = report_of(plan, tmp_path, Planted(planted))
    (finding,) = [f for f in report.findings if "DataLoader setting" in f]
    assert finding.startswith(
        "No single fastest DataLoader setting: 1 workers, 2 workers, 4 workers"
    )
    svg = (report.out_dir / "plots" / "loader_sweep.svg").read_text(encoding="utf-8")
    assert "no single fastest: 3 settings" in svg and "fastest: 2 workers" not in svg
    speedups = {r[1]: r[6] for r in report.tables["sweep"].cells() if r[0] == "DataLoader"}
    assert speedups["0"] == "1.00x"
    assert speedups["2"] == "1.63x"  # 3.1 / 1.9: beyond the noise of the default


def test_strategy_ratios_only_beyond_the_noise(tmp_path: Path) -> None:
    def reps(ms: list[float]) -> list[dict[str, Any]]:
        return [{"train_time_s": m * 10 / 1e3, "steps": 10} for m in ms]

    planted: dict[str, dict[str, Any]] = {}
    for name, ms in {
        "single": [3.0, 3.1, 3.2],
        "ddp-1proc": [3.1, 3.3, 3.5],  # overlaps single
        "dp": [6.0, 6.2, 6.4],  # beyond single's noise
    }.items():
        for k, summary in enumerate(reps(ms), 1):
            planted[f"{name}/r{k}"] = summary
    plan = strategies.plan(BASE, CPU, repeats=3, strategies=["single", "dp", "ddp-1proc"])
    report = report_of(plan, tmp_path, Planted(planted, fresh=True))
    by_pair = {f.split(" time per iteration")[0]: f for f in report.findings}
    assert "no measurable difference at n=3" in by_pair["ddp-1proc / single"]
    assert "2.00x" in by_pair["dp / single"]


def test_report_says_how_runs_were_executed_and_the_warm_up(tmp_path: Path) -> None:
    plan = profile.plan(BASE, CPU, repeats=2)
    shared = report_of(plan, tmp_path / "a", Planted({}))
    md = shared.markdown_path.read_text(encoding="utf-8")
    assert "Execution: the runs shared one process" in md
    assert "setup times are not a run's own" in md
    assert "first 5 step(s) are warm-up" in md
    fresh = report_of(plan, tmp_path / "b", Planted({}, fresh=True))
    md = fresh.markdown_path.read_text(encoding="utf-8")
    assert "Execution: every run in a fresh process of its own" in md


# The quality columns follow the workload's task (the summary's `task`, or its figures).
QUALITY_HEADERS = {
    "classification": ["Final val acc", "Test acc"],
    "regression": ["Test MSE", "Test R^2"],
    "language-modelling": ["Val loss", "Val perplexity"],
}


def regression_rep(mse: float, r2: float, record_task: bool = True) -> dict[str, Any]:
    return {
        **({"task": "regression"} if record_task else {}),
        "train_time_s": 1.0,
        "samples_per_s": 1000.0,
        "test_accuracy": None,
        "test_loss": mse,
        "test_metrics": {"loss": mse, "mse": mse, "mae": mse / 2, "r2": r2, "samples": 67},
        "epochs": [{"train_loss": 0.4, "val_loss": mse, "val_accuracy": None, "mse": mse}],
    }


def lm_rep(val_loss: float) -> dict[str, Any]:  # records no task: read from its figures
    ppl = math.exp(val_loss)
    last = {"train_loss": 1.6, "val_loss": val_loss, "val_accuracy": 0.3, "perplexity": ppl}
    return {
        "train_time_s": 1.0,
        "samples_per_s": 1000.0,
        "test_accuracy": 0.31,  # next-token accuracy: not the figure of a language model
        "test_metrics": {"loss": val_loss, "perplexity": ppl, "accuracy": 0.31},
        "epochs": [last],
    }


def test_a_regression_precision_study_shows_mse_and_r2_and_compares_mse(
    tmp_path: Path,
) -> None:
    """MSE 0.50/0.51/0.52 (fp32) vs 0.62/0.63/0.64 (bf16): apart, so the finding states the
    medians' relative change; the table shows MSE and R^2 where accuracy would be dashes."""
    mse = {"fp32": [0.50, 0.51, 0.52], "bf16": [0.62, 0.63, 0.64]}
    planted = {
        f"{p}/r{k}": regression_rep(m, 1 - m) for p, ms in mse.items() for k, m in enumerate(ms, 1)
    }
    plan = precision.plan(BASE, CPU, repeats=3, precisions=["fp32", "bf16"])
    report = report_of(plan, tmp_path, Planted(planted))
    table = report.tables["precision"]
    assert table.columns[4:6] == QUALITY_HEADERS["regression"]
    assert "Test acc" not in table.columns and "Final val acc" not in table.columns
    rows = {r[0]: r for r in table.cells()}
    # Measured figures at three significant digits (the README's rule), whatever the
    # column's own formatter writes.
    assert rows["fp32"][4:6] == ["0.510 (0.500–0.520)", "0.490 (0.480–0.500)"]
    assert rows["bf16"][4:6] == ["0.630 (0.620–0.640)", "0.370 (0.360–0.380)"]
    assert "mean squared error" in table.caption
    (finding,) = [f for f in report.findings if f.startswith("bf16 vs fp32")]
    assert "test MSE +23.5% (0.630 vs 0.510, n=3 and 3)" in finding
    assert "accuracy" not in finding


def test_a_language_model_precision_study_shows_val_loss_and_perplexity(tmp_path: Path) -> None:
    """Val losses that overlap: no perplexity claim; the next-token accuracy the records
    also hold is not what the table shows for a language model."""
    losses = {"fp32": [1.50, 1.52, 1.54], "bf16": [1.51, 1.53, 1.55]}
    planted = {f"{p}/r{k}": lm_rep(x) for p, xs in losses.items() for k, x in enumerate(xs, 1)}
    plan = precision.plan(BASE, CPU, repeats=3, precisions=["fp32", "bf16"])
    report = report_of(plan, tmp_path, Planted(planted))
    table = report.tables["precision"]
    assert table.columns[4:6] == QUALITY_HEADERS["language-modelling"]
    rows = {r[0]: r for r in table.cells()}
    assert rows["fp32"][4] == "1.52 (1.50–1.54)"
    assert rows["fp32"][5] == "4.57 (4.48–4.66)"  # exp(1.52), exp(1.50), exp(1.54)
    (finding,) = [f for f in report.findings if f.startswith("bf16 vs fp32")]
    assert "final val perplexity: no measurable difference at n=3" in finding
    assert "accuracy" not in finding


@pytest.mark.parametrize(
    ("rep", "header", "cell"),
    [
        ({"test_accuracy": 0.95, "epochs": [{"val_accuracy": 0.94}]}, "Test acc", "95.0%"),
        (regression_rep(0.5, 0.5, record_task=False), "Test MSE", "0.500"),
        (lm_rep(1.5), "Val perplexity", "4.48"),  # exp(1.5), three significant digits
    ],
    ids=list(QUALITY_HEADERS),
)
def test_the_strategies_table_shows_the_main_figure_of_the_task(
    rep: dict[str, Any], header: str, cell: str, tmp_path: Path
) -> None:
    planted = {f"single/r{k}": {**rep, "train_time_s": 0.1, "steps": 10} for k in (1, 2)}
    plan = strategies.plan(BASE, CPU, repeats=2, strategies=["single"])
    report = report_of(plan, tmp_path, Planted(planted, fresh=True))
    table = report.tables["strategies"]
    assert table.columns[4] == header
    assert table.cells()[0][4] == f"{cell} (all equal)"


def test_the_task_is_the_recorded_one_else_read_from_the_figures() -> None:
    assert task_of([regression_rep(0.5, 0.5)]) == "regression"
    assert task_of([regression_rep(0.5, 0.5, record_task=False)]) == "regression"
    assert task_of([lm_rep(1.5)]) == "language-modelling"
    assert task_of([{**lm_rep(1.5), "task": "classification"}]) == "classification"
    assert task_of([{"test_accuracy": 0.9}, {}]) == "classification"
    assert task_of([]) == "classification"
