"""``study checkpointing``: none / every-K / selective / full activation checkpointing.

The same workload, seed and data order under each policy: what each keeps for backward
(saved-activation bytes, counted from the tensors), what it costs in step time (the
recomputation), and that the losses stay those of ``none``. The seeds' "O(n) -> O(c)
memory for O(n - c) recompute", measured.
"""

from __future__ import annotations

from typing import Any

from trainscope.config import checkpointing_policy
from trainscope.errors import ConfigError
from trainscope.records.study_dir import PlannedRun
from trainscope.studies.base import PlanRequest, PlanResult, repeats_of, study_planner

DEFAULT_POLICIES = ("none", "every-2", "selective", "full")

# Without a workload named on the command line or in --config: a 4-block character GPT
# that runs on a CPU in seconds per configuration (see cli.cmd_study).
DEFAULT_WORKLOAD: dict[str, Any] = {
    "workload.name": "gpt-char",
    "workload.options.preset": "tiny",
    "workload.options.n_layer": 4,
    "train.epochs": 1,
    "train.max_steps_per_epoch": 30,
}


@study_planner("checkpointing")
def plan(request: PlanRequest, *, policies: list[str] | None = None) -> PlanResult:
    """One configuration per checkpointing policy, each repeated."""
    policies = list(DEFAULT_POLICIES) if policies is None else policies
    runs: list[PlannedRun] = []
    for p in policies:
        checkpointing_policy(p)  # a bad name: one line before anything runs
        runs += repeats_of(
            p, request.repeats, labels={"checkpointing": p}, overrides={"runtime.checkpointing": p}
        )
    return runs, {"policies": policies}


def options_from_args(args: Any, overrides: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The checkpointing study's flags as :func:`plan`'s keyword arguments (registry hook);
    without a workload named on the command line or in --config, it studies
    :data:`DEFAULT_WORKLOAD` (added to ``overrides``)."""
    if getattr(args, "config", None) is None and "workload.name" not in overrides:
        for key, value in DEFAULT_WORKLOAD.items():
            overrides.setdefault(key, value)
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    for p in policies:
        checkpointing_policy(p)
    if not policies:
        raise ConfigError("--policies: give at least one policy")
    return {"policies": policies}, []
