"""The plan of ``trainscope doctor --apply``: the baseline and each fix, repeats
alternated, the run's own configuration cut to the asked steps."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.diagnosis.test_rules import HEALTHY, write_run
from trainscope.diagnosis import diagnose
from trainscope.errors import TrainscopeError
from trainscope.studies.doctor import ALL_FIXES, BASELINE, plan_apply

CPU = torch.device("cpu")


def test_baseline_and_fixes_alternate(tmp_path: Path) -> None:
    stages = {**HEALTHY, "data_wait": 0.003}
    run = write_run(tmp_path / "r", stages, summary={"cpu": {
        "oversubscribed": True, "cores": 2, "demand_cores": 6}})  # fmt: skip
    plan = plan_apply(diagnose(run), CPU, steps=12, repeats=2)
    measured = [r.id for r in plan.runs if not r.warmup]
    configs = [BASELINE, "input-bound", "oversubscribed", ALL_FIXES]  # ranked as found
    assert measured == [f"{c}/r{k}" for k in (1, 2) for c in configs]
    by_config = {r.config: r for r in plan.runs}
    assert by_config["input-bound"].overrides == {"data.num_workers": 1}
    assert by_config[ALL_FIXES].overrides["data.num_workers"] == 1
    assert by_config[ALL_FIXES].overrides["runtime.threads"] == "auto"
    assert plan.base_config["train"]["max_steps_per_epoch"] == 12
    assert plan.base_config["train"]["epochs"] == 1
    assert plan.base_config["data"]["num_workers"] == 0  # the run's own setting
    assert plan.options["steps"] == 12 and plan.options["run_dir"] == str(run)
    assert "runtime.threads" not in by_config[BASELINE].overrides  # the run's own threads


def test_fixes_that_change_numerics_stay_out_of_all_fixes(tmp_path: Path) -> None:
    stages = {**HEALTHY, "data_wait": 0.003, "optimizer": 0.004}
    run = write_run(tmp_path / "r", stages, summary={"local_batch_size": 16})
    plan = plan_apply(diagnose(run), CPU, steps=5, repeats=1)
    configs = {r.config for r in plan.runs}
    assert configs == {BASELINE, "input-bound", "optimizer-bound", "overhead-bound", ALL_FIXES}
    overhead = next(r for r in plan.runs if r.config == "overhead-bound")
    assert overhead.labels["numerics"] is True and overhead.overrides == {"data.batch_size": 32}
    assert overhead.labels["measure"] == "sample"  # judged per sample: the batch changes
    both = next(r for r in plan.runs if r.config == ALL_FIXES)
    assert both.overrides == {"data.num_workers": 1, "train.optimizer_impl": "fused"}


def test_a_memory_fix_stands_alone_and_epochs_stay_for_evaluation(tmp_path: Path) -> None:
    from tests.diagnosis.test_memory_rules import ACTS

    run = write_run(tmp_path / "r", {**HEALTHY, "data_wait": 0.003}, summary={"memory": ACTS},
                    config={"train": {"epochs": 30}})  # fmt: skip
    plan = plan_apply(diagnose(run, memory_limit_bytes=44 << 20), CPU, steps=10, repeats=1)
    assert {r.config for r in plan.runs} == {BASELINE, "input-bound", "activations-near-limit"}
    assert (
        plan.base_config["train"]["epochs"] == 1
        and plan.base_config["train"]["max_steps_per_epoch"] == 10
    )
    step = sum(HEALTHY.values()) * 40
    ev = write_run(tmp_path / "e", totals={"evaluation": 3 * step, "setup": 0.0},
                   config={"train": {"epochs": 30}})  # fmt: skip
    plan = plan_apply(diagnose(ev), CPU, steps=10, repeats=1)
    # Evaluation happens between epochs: four of them, 3 steps each, so the fix is seen.
    assert (
        plan.base_config["train"]["epochs"],
        plan.base_config["train"]["max_steps_per_epoch"],
    ) == (4, 3)


def test_a_healthy_run_plans_nothing_to_apply(tmp_path: Path) -> None:
    with pytest.raises(TrainscopeError, match="nothing to apply"):
        plan_apply(diagnose(write_run(tmp_path / "ok")), CPU, steps=5, repeats=1)


def test_each_fix_says_what_it_saves(tmp_path: Path) -> None:
    step = sum(HEALTHY.values()) * 40
    run = write_run(tmp_path / "r", {**HEALTHY, "data_wait": 0.003},
                    totals={"evaluation": 3 * step, "setup": 0.0})  # fmt: skip
    plan = plan_apply(diagnose(run), CPU, steps=5, repeats=1)
    measure = {r.config: r.labels.get("measure") for r in plan.runs if r.config != BASELINE}
    assert measure == {"input-bound": "step", "evaluation-heavy": "wall", ALL_FIXES: "wall"}
