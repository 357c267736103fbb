"""The study planners on a CPU: which runs each study plans, and which can run here."""

from __future__ import annotations

from collections import Counter

import pytest
import torch

from trainscope.config import PRECISIONS, ConfigError, from_dict, merge
from trainscope.errors import TrainscopeError
from trainscope.registry import STUDIES, load
from trainscope.studies import checkpointing, loader, precision, profile

pytestmark = pytest.mark.timeout(120)

CPU = torch.device("cpu")
BASE = from_dict({"train": {"epochs": 1, "max_steps_per_epoch": 5}}).to_dict()


def first_runs(plan):
    """Configuration name -> its repeat-1 planned run, in plan order."""
    return {r.config: r for r in plan.runs if r.repeat == 1}


def repeat_counts(plan):
    return Counter(r.config for r in plan.runs if not r.warmup)


# What every plan adds to each run for the study's core budget (studies.base).
BUDGET_LABELS = ("threads", "processes", "budget_kept")


def own_labels(r):
    """The planner's own labels of a run, without the core budget's."""
    return {k: v for k, v in r.labels.items() if k not in BUDGET_LABELS}


def own_overrides(r):
    """The planner's own overrides of a run, without the threads the budget sets."""
    return {k: v for k, v in r.overrides.items() if k != "runtime.threads"}


def test_every_kind_has_a_planner():
    # Every registered study's parts can be found (a list of the kinds here would only
    # detect that one was added; tests/test_registry.py adds a toy one and finds it).
    assert STUDIES
    for entry in STUDIES.values():
        assert callable(load(entry.planner)) and callable(load(entry.report))
        assert entry.options is None or callable(load(entry.options))
        assert entry.script is None or callable(load(entry.script))


# ---------------------------------------------------------------------------- loader


@pytest.fixture(scope="module")
def loader_plan():
    return loader.plan(BASE, CPU)


def test_loader_sweep_default_configurations(loader_plan):
    configs = first_runs(loader_plan)
    sweep = {name: r for name, r in configs.items() if r.group == "sweep"}
    for w in range(11):
        assert own_labels(sweep[f"w{w}"]) == {"num_workers": w, "variant": "default"}
        assert sweep[f"w{w}"].overrides["data.num_workers"] == w
        assert sweep[f"w{w}"].applicable
        pin = sweep[f"w{w}-pin"]
        assert not pin.applicable and "CUDA" in pin.reason
        assert pin.overrides["data.pin_memory"] is True
        assert (f"w{w}-persistent" in sweep) == (w > 0)
    assert "w11" not in sweep
    assert sweep["w3-persistent"].applicable
    assert sweep["w3-persistent"].overrides["data.persistent_workers"] is True
    fast = sweep["fast"]
    assert fast.applicable and fast.overrides["data.loader"] == "fast"
    assert fast.labels["variant"] == "fast"
    assert len(sweep) == 11 + 11 + 10 + 1
    for r in sweep.values():
        assert r.overrides["train.data_only"] is True
        assert r.overrides["train.epochs"] == 3
    # Only the variant under test differs from the plain configuration.
    assert sweep["w2"].overrides["data.pin_memory"] is False
    assert sweep["w2"].overrides["data.persistent_workers"] is False


def test_loader_per_iteration_configurations(loader_plan):
    per_iter = {n: r for n, r in first_runs(loader_plan).items() if r.group == "per_iteration"}
    expected = {f"iter-w{w}-aug{a}" for w in (0, 2, 4) for a in (0, 1)}
    expected |= {"iter-fast-aug0", "iter-fast-aug1"}
    assert set(per_iter) == expected
    for name, r in per_iter.items():
        assert r.applicable
        assert r.overrides["train.data_only"] is False
        assert r.overrides["train.max_steps_per_epoch"] == 50
        assert r.overrides["workload.augment"] is name.endswith("aug1")
        assert r.labels["augment"] is name.endswith("aug1")
    assert per_iter["iter-w4-aug1"].overrides["data.num_workers"] == 4
    assert per_iter["iter-w4-aug1"].overrides["data.loader"] == "torch"
    assert per_iter["iter-fast-aug1"].overrides["data.loader"] == "fast"
    assert per_iter["iter-fast-aug1"].labels["loader"] == "fast"


def test_loader_warmup_repeats_and_valid_configs(loader_plan):
    warm = [r for r in loader_plan.runs if r.warmup]
    assert len(warm) == 1 and loader_plan.runs[0] is warm[0]
    first_applicable = next(r for r in loader_plan.runs if r.applicable and not r.warmup)
    assert warm[0].config == first_applicable.config == "w0"
    assert warm[0].overrides == first_applicable.overrides
    assert set(repeat_counts(loader_plan).values()) == {3}
    assert loader_plan.kind == "loader"
    assert loader_plan.options["workers"] == list(range(11))
    assert loader_plan.options["device"] == "cpu"
    for r in first_runs(loader_plan).values():  # every override lands on a real config key
        from_dict(merge(BASE, r.overrides))


def test_loader_options_change_the_plan():
    plan = loader.plan(
        BASE, CPU, repeats=1, warmup=False, workers=[1, 3], iter_workers=[2], iter_steps=7
    )
    names = list(first_runs(plan))
    assert names == [
        "w1", "w1-pin", "w1-persistent", "w3", "w3-pin", "w3-persistent", "fast",
        "iter-w2-aug0", "iter-fast-aug0", "iter-w2-aug1", "iter-fast-aug1",
    ]  # fmt: skip
    assert not any(r.warmup for r in plan.runs)
    assert set(repeat_counts(plan).values()) == {1}
    assert first_runs(plan)["iter-w2-aug0"].overrides["train.max_steps_per_epoch"] == 7


def test_loader_pin_variants_apply_on_cuda_devices():
    # Planning does not touch the device: a CUDA device object is enough.
    plan = loader.plan(BASE, torch.device("cuda"), repeats=1, workers=[0])
    pin = first_runs(plan)["w0-pin"]
    assert pin.applicable and pin.reason is None


def test_parse_int_list():
    assert loader.parse_int_list("0-3,8") == [0, 1, 2, 3, 8]
    assert loader.parse_int_list("0-10") == list(range(11))
    assert loader.parse_int_list(" 4, 2,2 ,0") == [0, 2, 4]
    assert loader.parse_int_list("5") == [5]
    assert loader.parse_int_list("3-3") == [3]
    for bad in ("3-1", "x", "", "1,,2", "1-x", "-1"):
        with pytest.raises(ValueError):
            loader.parse_int_list(bad)


# ------------------------------------------------------------------------- precision


def test_precision_plan_on_cpu():
    plan = precision.plan(BASE, CPU, repeats=2)
    configs = first_runs(plan)
    assert list(configs) == list(PRECISIONS)
    assert configs["fp32"].applicable and configs["bf16"].applicable
    assert not configs["tf32"].applicable and "tf32" in configs["tf32"].reason
    assert not configs["fp16"].applicable and "fp16" in configs["fp16"].reason
    assert "CPU" in configs["tf32"].reason and "CPU" in configs["fp16"].reason
    for name, r in configs.items():
        assert own_overrides(r) == {"runtime.precision": name}
        assert own_labels(r) == {"precision": name}
    assert plan.runs[0].id == "fp32/warmup"
    assert repeat_counts(plan) == {p: 2 for p in PRECISIONS}
    assert plan.options["precisions"] == list(PRECISIONS)


def test_precision_plan_with_a_subset():
    plan = precision.plan(BASE, CPU, repeats=1, precisions=["fp32"])
    assert [r.id for r in plan.runs] == ["fp32/warmup", "fp32/r1"]
    assert plan.options["precisions"] == ["fp32"]
    assert precision.applicability("fp32", CPU) is None
    assert precision.applicability("fp16", CPU) is not None


def test_precision_plan_with_only_inapplicable_precisions_is_refused():
    with pytest.raises(TrainscopeError, match="no configuration can run"):
        precision.plan(BASE, CPU, precisions=["tf32", "fp16"])


# --------------------------------------------------------------------------- profile


def test_profile_plan():
    plan = profile.plan(BASE, CPU, repeats=4)
    assert plan.kind == "profile"
    assert [r.id for r in plan.runs] == ["run/warmup", "run/r1", "run/r2", "run/r3", "run/r4"]
    assert all(own_overrides(r) == {} and r.applicable for r in plan.runs)
    assert plan.base_config == BASE
    budget = plan.options.pop("core_budget")
    assert plan.options == {"repeats": 4, "warmup": True, "device": "cpu"}
    assert all(r.overrides["runtime.threads"] == budget for r in plan.runs)

    no_warm = profile.plan(BASE, CPU, repeats=2, warmup=False)
    assert [r.id for r in no_warm.runs] == ["run/r1", "run/r2"]
    assert no_warm.options["warmup"] is False


# ---------------------------------------------------------------------------- checkpointing


def test_checkpointing_plan_has_one_configuration_per_policy():
    plan = checkpointing.plan(BASE, CPU, repeats=2)
    firsts = first_runs(plan)
    assert list(firsts) == list(checkpointing.DEFAULT_POLICIES)
    assert {k: own_overrides(r) for k, r in firsts.items()} == {
        p: {"runtime.checkpointing": p} for p in checkpointing.DEFAULT_POLICIES
    }
    assert set(repeat_counts(plan).values()) == {2}
    assert plan.runs[0].warmup and plan.options["policies"] == list(firsts)


def test_checkpointing_plan_refuses_an_unknown_policy():
    with pytest.raises(ConfigError, match="every-0"):
        checkpointing.plan(BASE, CPU, policies=["none", "every-0"])
