"""Each rule of the doctor fires on a record built for it, and stays silent on healthy
ones (records written by the test: fast, no training)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from trainscope.diagnosis import diagnose
from trainscope.diagnosis.rules import RULES

HEALTHY = {"data_wait": 0.0002, "h2d": 0.00001, "forward": 0.0008, "backward": 0.0012,
           "optimizer": 0.0003}  # fmt: skip


def write_run(
    path: Path,
    stages: dict[str, float] | None = None,
    *,
    steps: int = 40,
    summary: dict[str, Any] | None = None,
    config: dict[str, Any] | None = None,
    losses: list[float] | None = None,
    totals: dict[str, float] | None = None,
) -> Path:
    """A run directory whose steps all took ``stages`` (seconds) and whose losses fall."""
    stages = stages or HEALTHY
    path.mkdir(parents=True)
    step_s = sum(stages.values())
    losses = losses or [2.3 * 0.98**i for i in range(steps)]
    lines = [{"event": "step", "step": i + 1, "epoch": 1, "loss": losses[i], "stages": stages}
             for i in range(steps)]  # fmt: skip
    (path / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    wall = step_s * steps / 0.8
    base = {
        "schema_version": 1, "status": "completed", "device": "cpu", "precision": "fp32",
        "strategy": "single", "local_batch_size": 128, "lr": 0.02, "steps": steps,
        "wall_time_s": wall,
        "stages_s": totals or {**{k: v * steps for k, v in stages.items()},
                               "setup": 0.05 * wall, "evaluation": 0.05 * wall},
        "steady_state": {"warmup_steps": 5},
        "cpu": {"oversubscribed": False, "cores": 2, "demand_cores": 1, "busy_cores": 1.0},
    }  # fmt: skip
    base.update(summary or {})
    (path / "summary.json").write_text(json.dumps(base))
    cfg = {"data": {"num_workers": 0, "loader": "torch", "pin_memory": False},
           "train": {"eval_every": 1, "checkpoint_every": 0}}  # fmt: skip
    for section, values in (config or {}).items():
        cfg.setdefault(section, {}).update(values)
    (path / "config.yaml").write_text(yaml.safe_dump(cfg))
    return path


def rules_fired(path: Path) -> list[str]:
    return [f.rule for f in diagnose(path).findings]


def test_a_healthy_run_has_nothing_to_fix(tmp_path: Path) -> None:
    d = diagnose(write_run(tmp_path / "ok"))
    assert d.findings == [] and d.unread == [] and d.status == "completed"


def test_input_bound(tmp_path: Path) -> None:
    run = write_run(tmp_path / "r", {**HEALTHY, "data_wait": 0.003})
    (top,) = diagnose(run).findings
    assert top.rule == "input-bound" and top.severity == "major"
    # One worker: the two cores hold the run's thread and one worker (cores - threads).
    assert top.fix == {"--num-workers": 1}
    assert top.evidence[0] == "data wait per step 3.00 ms (3.00–3.00, IQR, n=35)"
    assert "drop from 5.31 to about 3 ms" in top.gain  # loading (3 ms) outlasts compute
    # Eight cores: ceil(wait / compute) = 2 workers keep up with the model.
    cpu = {"oversubscribed": False, "cores": 8, "threads": 1, "demand_cores": 1}
    wide = write_run(tmp_path / "w", {**HEALTHY, "data_wait": 0.003}, summary={"cpu": cpu})
    (found,) = diagnose(wide).findings
    assert found.fix == {"--num-workers": 2} and "to about 2.31 ms" in found.gain
    # Loading that waits (the process used few cores: a disk, a network): as many workers
    # as keep up, not capped at the free cores (at most 8).
    idle = {"oversubscribed": False, "cores": 2, "threads": 1, "own_cores": 0.2}
    io = write_run(tmp_path / "io", {**HEALTHY, "data_wait": 0.009}, summary={"cpu": idle})
    (waiting,) = diagnose(io).findings
    assert waiting.fix == {"--num-workers": 4} and "the loading waits" in waiting.gain
    # Workers already there: twice as many, and the wait removed is the bound.
    more = write_run(tmp_path / "m", {**HEALTHY, "data_wait": 0.003}, summary={"num_workers": 2})
    assert diagnose(more).findings[0].fix == {"--num-workers": 4}
    assert top.command.startswith(f"trainscope run --config {run}/config.yaml --num-workers")
    fast = write_run(tmp_path / "f", {**HEALTHY, "data_wait": 0.003},
                     config={"data": {"loader": "fast"}})  # fmt: skip
    assert diagnose(fast).findings[0].fix == {"--set": "workload.augment=false"}
    # Below the threshold: silent.
    assert rules_fired(write_run(tmp_path / "b", {**HEALTHY, "data_wait": 0.0009})) == []


def test_h2d_unpinned_only_on_a_gpu_without_pinned_memory(tmp_path: Path) -> None:
    slow = {**HEALTHY, "h2d": 0.002}
    assert rules_fired(write_run(tmp_path / "cpu", slow)) == []
    gpu = write_run(tmp_path / "gpu", slow, summary={"device": "cuda:0"})
    assert "h2d-unpinned" in rules_fired(gpu)
    pinned = write_run(tmp_path / "p", slow, summary={"device": "cuda:0"},
                       config={"data": {"pin_memory": True}})  # fmt: skip
    assert "h2d-unpinned" not in rules_fired(pinned)


def test_evaluation_and_checkpoint_heavy(tmp_path: Path) -> None:
    step = sum(HEALTHY.values()) * 40
    ev = write_run(tmp_path / "e", totals={"evaluation": 3 * step, "setup": 0.0})
    ev_finding = diagnose(ev).findings[0]
    assert ev_finding.rule == "evaluation-heavy" and ev_finding.fix == {"--eval-every": 2}
    ck = write_run(tmp_path / "c", totals={"checkpoint": step, "setup": 0.0},
                   config={"train": {"checkpoint_every": 10}})  # fmt: skip
    assert diagnose(ck).findings[0].fix == {"--checkpoint-every": 40}
    no_interval = write_run(tmp_path / "n", totals={"checkpoint": step})
    assert "checkpoint-heavy" not in rules_fired(no_interval)


def test_per_tensor_sync(tmp_path: Path) -> None:
    stages = {**HEALTHY, "comm": 0.002}
    run = write_run(tmp_path / "a", stages, summary={"strategy": "allreduce"})
    assert diagnose(run).findings[0].fix == {"--strategy": "ddp"}
    ddp = write_run(tmp_path / "d", stages, summary={"strategy": "ddp"})
    assert "per-tensor-sync" not in rules_fired(ddp)


def test_overhead_bound_small_batch(tmp_path: Path) -> None:
    tiny = {"data_wait": 0.0005, "h2d": 0.0001, "forward": 0.0002, "backward": 0.0002,
            "optimizer": 0.0009}  # fmt: skip
    run = write_run(tmp_path / "s", tiny, summary={"local_batch_size": 16})
    found = {f.rule: f for f in diagnose(run).findings}
    assert found["overhead-bound"].fix == {"--batch-size": 32}
    assert found["overhead-bound"].numerics and found["overhead-bound"].severity == "moderate"
    big = write_run(tmp_path / "b", tiny, summary={"local_batch_size": 512})
    assert "overhead-bound" not in rules_fired(big)


def test_precision_for_device(tmp_path: Path) -> None:
    cpu = write_run(tmp_path / "c", summary={"precision": "bf16"})
    assert diagnose(cpu).findings[0].fix == {"--precision": "fp32"}
    gpu = write_run(tmp_path / "g", summary={"device": "cuda:0"})
    assert diagnose(gpu).findings[0].fix == {"--precision": "bf16"}


def test_oversubscribed(tmp_path: Path) -> None:
    cpu = {"oversubscribed": True, "cores": 2, "demand_cores": 6, "busy_cores": 2.0}
    (f,) = diagnose(write_run(tmp_path / "o", summary={"cpu": cpu})).findings
    assert f.rule == "oversubscribed" and f.fix == {"--threads": "auto"}
    assert "6 cores on 2" in f.evidence[0]
    # Busy because of other processes: nothing this run's settings would fix.
    others = {**cpu, "demand_cores": 1}
    assert rules_fired(write_run(tmp_path / "b", summary={"cpu": others})) == []


def test_diverged_names_the_step(tmp_path: Path) -> None:
    losses = [2.0] * 12 + [float("nan")] * 28
    run = write_run(tmp_path / "d", losses=losses, summary={"status": "failed"})
    (f,) = [x for x in diagnose(run).findings if x.rule == "diverged"]
    assert "at step 13" in f.problem and f.fix == {"--grad-clip": 1.0, "--lr": "0.002"}


def test_loss_flat(tmp_path: Path) -> None:
    run = write_run(tmp_path / "f", steps=120, losses=[2.3] * 120)
    (f,) = diagnose(run).findings
    assert f.rule == "loss-flat" and f.fix == {"--lr": "0.2"}
    assert "loss-flat" not in rules_fired(write_run(tmp_path / "ok", steps=120))


def test_short_run_is_only_minor(tmp_path: Path) -> None:
    step = sum(HEALTHY.values()) * 40
    d = diagnose(write_run(tmp_path / "s", totals={"setup": 10 * step}))
    assert [(f.rule, f.severity, f.command) for f in d.findings] == [("short-run", "minor", "")]


def test_findings_are_ranked_most_important_first(tmp_path: Path) -> None:
    stages = {**HEALTHY, "data_wait": 0.003, "optimizer": 0.004}
    run = write_run(tmp_path / "r", stages, summary={"local_batch_size": 16})
    findings = diagnose(run).findings
    assert [(f.rule, f.severity) for f in findings] == [
        ("input-bound", "major"),  # 38% of the step
        # The optimizer is 44% of the step: both credit their fix with half of it; the
        # one that keeps numerics first.
        ("optimizer-bound", "moderate"),
        ("overhead-bound", "moderate"),  # a fix that changes numerics
    ]


@pytest.mark.parametrize("name", sorted(RULES))
def test_every_rule_is_silent_on_the_healthy_run(tmp_path: Path, name: str) -> None:
    from trainscope.diagnosis.facts import read_facts

    assert RULES[name](read_facts(write_run(tmp_path / "ok"))) is None


def test_compile_recompiling_during_training(tmp_path: Path) -> None:
    compiled = {"units": "whole model", "seconds": 1.0, "graphs": 2, "recompiled_later": 1}
    (f,) = diagnose(write_run(tmp_path / "r", summary={"compile": compiled})).findings
    assert f.rule == "compile-recompiles" and f.fix == {"--drop-last": True}
    steady = {**compiled, "recompiled_later": 0}
    assert rules_fired(write_run(tmp_path / "s", summary={"compile": steady})) == []


def test_compile_not_paid_back_is_judged_on_wall_time(tmp_path: Path) -> None:
    step = sum(HEALTHY.values()) * 40
    run = write_run(tmp_path / "c", totals={"compile": 2 * step, "setup": 0.0})
    (f,) = diagnose(run).findings
    assert f.rule == "compile-unpaid" and f.fix == {"--set": "runtime.compile=false"}
    assert f.measure == "wall" and f.as_dict()["measured_by"] == "wall"
    assert rules_fired(write_run(tmp_path / "ok", totals={"compile": 0.01 * step})) == []


def test_optimizer_bound_proposes_the_fused_implementation(tmp_path: Path) -> None:
    slow = {**HEALTHY, "optimizer": 0.002}  # 48% of the step
    (f,) = diagnose(write_run(tmp_path / "o", slow)).findings
    assert f.rule == "optimizer-bound" and f.fix == {"--optimizer-impl": "fused"}
    assert not f.numerics and "48%" in f.problem
    fused = write_run(tmp_path / "f", slow, config={"train": {"optimizer_impl": "fused"}})
    assert rules_fired(fused) == []
    # Below the threshold (22%): silent.
    assert rules_fired(write_run(tmp_path / "b", {**HEALTHY, "optimizer": 0.0007})) == []


def test_per_tensor_sync_with_a_link_predicts_the_saving(tmp_path: Path) -> None:
    from trainscope.comm.cost_model import given

    stages = {**HEALTHY, "comm": 0.004}
    grads = {"tensor_bytes": [4096] * 40, "unit_bytes": [40 * 4096]}
    run = write_run(tmp_path / "a", stages, summary={"strategy": "allreduce", "world_size": 2,
                                                     "gradients": grads})  # fmt: skip
    # 40 ring all_reduces (2 latencies of 20 us each on 2 ranks) against one bucket.
    link = given(20e-6, 10.0, 2)
    (f,) = diagnose(run, link_fits=link, link_where="given").findings
    assert f.rule == "per-tensor-sync" and f.fix == {"--strategy": "ddp"}
    assert "α–β model (given): 40 collectives" in f.evidence[-1]
    assert "by the α–β model" in f.gain
    assert f.gain_share is not None and 0.15 < f.gain_share < 0.3  # ~1.6 ms of 6.5 ms
    # Without a link: the cautious estimate, and it says how to get the model's.
    (plain,) = diagnose(run).findings
    assert "--fit DIR" in plain.gain and plain.gain_share == pytest.approx(0.5 * 4 / 6.5, 0.01)


def test_bf16_on_a_cpu_with_bf16_units_is_not_flagged(tmp_path: Path) -> None:
    run = write_run(tmp_path / "c", summary={"precision": "bf16"})
    (run / "env.json").write_text(json.dumps({"cpu_low_precision_units": {"bf16": True}}))
    assert rules_fired(run) == []
    (run / "env.json").write_text(json.dumps({"cpu_low_precision_units": {"bf16": False}}))
    assert rules_fired(run) == ["precision-for-device"]


def test_a_null_loss_is_the_non_finite_loss_strict_json_wrote(tmp_path: Path) -> None:
    losses: list[Any] = [2.0] * 30 + [None] * 10
    error = "the loss was nan at step 31 (epoch 1): training stopped there"
    run = write_run(tmp_path / "d", losses=losses, summary={"status": "failed", "error": error})
    (f,) = [x for x in diagnose(run).findings if x.rule == "diverged"]
    assert "at step 31" in f.problem
    # A data-only run has no loss at all: nothing diverged.
    quiet = write_run(tmp_path / "q", losses=[None] * 40, summary={"data_only": True})  # type: ignore[list-item]
    assert "diverged" not in rules_fired(quiet)


def test_a_flat_loss_far_below_the_usual_lr_gets_the_usual_lr(tmp_path: Path) -> None:
    run = write_run(tmp_path / "f", steps=120, losses=[2.3] * 120, summary={"lr": 1e-6},
                    config={"train": {"optimizer": "adam"}})  # fmt: skip
    (f,) = diagnose(run).findings
    assert f.fix == {"--lr": "0.001"} and "under a tenth of adam's usual 0.001" in f.evidence[1]


def test_gpu_underused_from_the_system_samples(tmp_path: Path) -> None:
    def with_samples(name: str, utils: list[float], device: str = "cuda:0") -> Path:
        run = write_run(tmp_path / name, summary={"device": device, "precision": "bf16",
                                                  "local_batch_size": 32})  # fmt: skip
        samples = [{"t": i, "gpus": [{"index": 0, "util_percent": u}]} for i, u in enumerate(utils)]
        (run / "system.jsonl").write_text("".join(json.dumps(s) + "\n" for s in samples))
        return run

    (f,) = diagnose(with_samples("low", [20, 30, 35, 25, 30])).findings
    assert f.rule == "gpu-underused" and f.fix == {"--batch-size": 64} and f.numerics
    assert f.evidence[0] == "GPU utilisation 30.0% (25.0–30.0, IQR, n=5)" and f.measure == "sample"
    assert rules_fired(with_samples("busy", [90, 95, 97, 92])) == []
    assert rules_fired(with_samples("few", [10, 12])) == []  # two samples: too few to say
    assert rules_fired(with_samples("cpu", [10, 12, 11, 9], device="cpu")) == [
        "precision-for-device"
    ]
