"""The strategies study's communication beside the α–β model's prediction: planted runs
whose comm stages the model predicts (or misses), and the verdicts the report draws."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.reports.test_honest_numbers import BASE, CPU, Planted, report_of
from trainscope.collectives import model
from trainscope.collectives.predict import GradTensors, predict
from trainscope.studies import strategies

pytestmark = pytest.mark.timeout(120)

GRADS = {"tensor_bytes": [600, 24, 3456, 64, 30720, 480, 40320, 336, 3360, 40],
         "unit_bytes": [0, 624, 3520, 75256]}  # fmt: skip
FITS = model.given(300e-6, 0.5, 2)  # 300 µs, 0.5 GB/s: latency-bound for these tensors
NAMES = ["gather-scatter", "allreduce", "allreduce-bucketed", "ddp", "fsdp"]


def predicted_ms() -> dict[str, Any]:
    g = GradTensors("m", tuple(GRADS["tensor_bytes"]), tuple(GRADS["unit_bytes"][1:]))
    return {p.strategy: p for p in predict(g, 2, FITS, backward_s=2e-3)}


def planted(comm_scale: dict[str, float]) -> dict[str, dict[str, Any]]:
    """Three repeats per strategy with comm stages = prediction x scale (±2%)."""
    preds = predicted_ms()
    out = {}
    for name in NAMES:
        for k, jitter in enumerate((0.98, 1.0, 1.02), 1):
            stages = {"forward": 0.010, "backward": 0.020}  # 10 steps: 1 and 2 ms a step
            if name in ("gather-scatter", "allreduce", "allreduce-bucketed"):
                stages["comm"] = 10 * preds[name].comm_s * comm_scale.get(name, 1.0) * jitter
            if name == "ddp":
                stages["backward"] = 0.020 + 0.004 * jitter  # exposed 0.4 ms a step
            if name == "fsdp":
                stages["forward"] = 0.015
            out[f"{name}/r{k}"] = {"steps": 10, "stages_s": stages, "train_time_s": 0.1,
                                   "gradients": GRADS, "model": "LeNet5"}  # fmt: skip
    return out


def plan(cost_model: bool) -> Any:
    fits = {op: f.to_dict() for op, f in FITS.items()}
    return strategies.plan(
        BASE, CPU, repeats=3, nproc=2, strategies=NAMES,
        cost_model={"source": "a planted sweep", "fits": fits} if cost_model else None,
    )  # fmt: skip


def test_measured_beside_predicted_with_the_goal_and_the_ordering(tmp_path: Path) -> None:
    report = report_of(plan(True), tmp_path, Planted(planted({"allreduce": 1.3})))
    table = report.tables["comm_model"]
    rows = {r[0]: dict(zip(table.columns, r)) for r in table.cells()}
    assert list(rows) == NAMES
    preds = predicted_ms()
    for name in ("gather-scatter", "allreduce-bucketed"):
        assert rows[name]["Predicted / measured"] == "1.00"
        assert rows[name]["Predicted exposed (ms)"] == f"{preds[name].comm_s * 1e3:.3g}"
    assert rows["allreduce"]["Predicted / measured"] == f"{1 / 1.3:.2f}"  # 0.77: missed
    assert rows["allreduce"]["Collectives/step"] == "10"
    # DDP measured as backward(ddp) - backward(allreduce): 0.4 ms, 0.392..0.408
    assert rows["ddp"]["Measured exposed (ms)"].startswith("0.4")
    assert rows["ddp"]["Measured as"] == "backward(ddp) - backward(allreduce)"
    assert rows["fsdp"]["Measured exposed (ms)"].startswith("0.5")  # forward 1.5 vs 1 ms
    findings = " ".join(report.findings)
    assert "within 15% of measured: 2 of 3" in findings and "allreduce 0.77x" in findings
    assert "Ordering by communication time, fastest first: measured allreduce-bucketed" in findings
    md = report.markdown_path.read_text(encoding="utf-8")
    assert "Communication: measured and predicted" in md and "a planted sweep" in md


def test_a_wrong_ordering_is_said_so(tmp_path: Path) -> None:
    # bucketed measured 20x its prediction: slower than per-tensor, against the model
    report = report_of(plan(True), tmp_path, Planted(planted({"allreduce-bucketed": 20.0})))
    (order,) = [f for f in report.findings if f.startswith("Ordering")]
    assert "; predicted allreduce-bucketed <" in order


def test_without_a_cost_model_the_report_says_how_to_get_one(tmp_path: Path) -> None:
    report = report_of(plan(False), tmp_path, Planted(planted({})))
    assert "comm_model" not in report.tables
    md = report.markdown_path.read_text(encoding="utf-8")
    assert "give the study `--cost-model DIR`" in md
    # bucketing alone and overlap are among the pairs compared
    pairs = [f.split(" time per iteration")[0] for f in report.findings]
    assert "allreduce / allreduce-bucketed" in pairs and "allreduce-bucketed / ddp" in pairs
