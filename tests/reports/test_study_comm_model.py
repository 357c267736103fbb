"""The strategies study's communication beside the α–β model's prediction: planted runs
whose comm stages the model predicts (or misses), and the verdicts the report draws."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.reports.test_honest_numbers import BASE, CPU, Planted, report_of
from trainscope.comm import cost_model as model
from trainscope.comm.predict import GradTensors, predict
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


def plan(cost_model: bool, **extra: Any) -> Any:
    fits = {op: f.to_dict() for op, f in FITS.items()}
    model = {"source": "a planted sweep", "fits": fits, "world_size": 2, "backend": "gloo"}
    return strategies.plan(
        BASE, CPU, repeats=3, nproc=2, strategies=NAMES,
        cost_model={**model, **extra} if cost_model else None,
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
    # FSDP's overlap is not modelled: its predicted exposed part is all its communication
    assert rows["fsdp"]["Predicted exposed (ms)"] == rows["fsdp"]["Predicted comm (ms)"]
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


def test_a_damaged_or_partial_cost_model_leaves_a_report_that_says_so(tmp_path: Path) -> None:
    # a sweep times no gather or scatter: without broadcast they have no stand-in
    fits = {
        op: f.to_dict() for op, f in FITS.items() if op not in ("broadcast", "gather", "scatter")
    }
    p = plan(True, fits=fits, world_size=4, source="a path with * and \\input{x}")
    p.options["bucket_mb"] = -3  # tampered
    report = report_of(p, tmp_path, Planted(planted({})))
    rows = {r[0] for r in report.tables["comm_model"].cells()}
    assert "gather-scatter" not in rows and "allreduce-bucketed" in rows
    md = report.markdown_path.read_text(encoding="utf-8")
    assert "gather-scatter: no prediction (the cost model has no fit for broadcast" in md
    assert "the sweep ran on 4 processes, the study on 2" in md
    tex = (report.markdown_path.parent / "tables.tex").read_text(encoding="utf-8")
    assert "\\\\input" not in tex and "\\textbackslash{}input" in tex  # escaped once
    html = report.html_path.read_text(encoding="utf-8")
    assert "\\\\input" not in html


def test_a_sweep_without_the_ops_the_strategies_need_is_refused(tmp_path: Path) -> None:
    import json

    from trainscope.errors import ConfigError
    from trainscope.studies.strategies_model import study_options

    d = tmp_path / "sweep"
    d.mkdir()
    results = [{"op": "all_reduce", "bytes": m, "time_s": 1e-3 + m * 1e-9, "world_size": 2,
                "wrong": 0} for m in (1024, 1 << 20)]  # fmt: skip
    options = {"world_size": 2, "backend": "gloo"}
    data = {"kind": "collectives", "results": results, "options": options}
    (d / "study.json").write_text(json.dumps(data))
    with pytest.raises(ConfigError, match="no fit for all_gather, broadcast, reduce_scatter"):
        study_options(25, str(d), NAMES)
    ok = study_options(25, str(d), ["allreduce", "allreduce-bucketed", "ddp"])
    assert ok["cost_model"]["world_size"] == 2 and set(ok["cost_model"]["fits"]) == {"all_reduce"}
