"""``study strategies``: every parallel strategy on one workload, same global batch and seed.

Its configurations are those the registered strategies contribute
(:mod:`trainscope.registry`; built in: ``single``; ``dp`` (DataParallel, one process);
``ddp-1proc`` (DDP in a world of one: the wrapper's own cost, next to ``single``); and
``ddp``, ``fsdp``, ``gather-scatter``, ``allreduce`` (one all_reduce per tensor) and
``allreduce-bucketed`` (the same, flattened into ``bucket_mb`` buckets: what bucketing
buys without DDP's overlap) with ``nproc`` processes). With a cost model (the α–β fits of
a ``trainscope collectives`` sweep, kept in the plan) the report sets each configuration's
measured communication beside its prediction. Every run executes in a process of its own
(multi-process ones through torchrun), so start-up and peak memory are each run's own and
the configurations are compared on equal terms.
"""

from __future__ import annotations

from typing import Any

import torch

from trainscope import registry
from trainscope.records.study_dir import PlannedRun
from trainscope.studies.base import (
    PlanRequest,
    PlanResult,
    name_list,
    positive,
    repeats_of,
    study_planner,
)
from trainscope.studies.strategies_model import study_options


def configurations() -> tuple[str, ...]:
    """The study's configurations, in the order every strategy registered them."""
    return tuple(registry.study_variants())


def _config(name: str, nproc: int, bucket_mb: float) -> tuple[dict[str, Any], int]:
    entry, variant = registry.study_variants()[name]
    procs = nproc if entry.multiprocess and not variant.one_process else 1
    overrides: dict[str, Any] = {"dist.strategy": entry.name, "dist.nproc": procs}
    if variant.bucketed:
        overrides["dist.bucket_mb"] = bucket_mb
    return overrides, procs


def applicability(name: str, procs: int, device: torch.device) -> str | None:
    """None when the configuration can run here, else why not."""
    if device.type == "cuda" and procs > torch.cuda.device_count():
        return f"{procs} processes need {procs} GPUs; {torch.cuda.device_count()} here"
    return None


@study_planner("strategies")
def plan(
    request: PlanRequest,
    *,
    nproc: int = 2,
    strategies: list[str] | None = None,
    bucket_mb: float = 25.0,
    cost_model: dict[str, Any] | None = None,
) -> PlanResult:
    """One configuration per strategy, each repeated; the global batch stays the same.
    ``cost_model``: {"source": where, "fits": α–β fits as study.json keeps them}."""
    names = list(configurations()) if strategies is None else strategies
    runs: list[PlannedRun] = []
    for name in names:
        overrides, procs = _config(name, nproc, bucket_mb)
        reason = applicability(name, procs, request.device)
        runs += repeats_of(
            name,
            request.repeats,
            labels={"strategy": name, "processes": procs},
            overrides=overrides,
            applicable=reason is None,
            reason=reason,
        )
    options: dict[str, Any] = {"nproc": nproc, "strategies": names, "bucket_mb": bucket_mb}
    if cost_model:
        options["cost_model"] = cost_model
    return runs, options


def options_from_args(args: Any, overrides: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The strategies study's flags as :func:`plan`'s keyword arguments (registry hook).
    ``--nproc`` is the study's process count and ``--bucket-mb`` allreduce-bucketed's
    bucket: taken out of the run overrides, since each configuration sets its own."""
    nproc = positive("nproc", overrides.pop("dist.nproc", 2))
    bucket_mb = overrides.pop("dist.bucket_mb", 25.0)
    chosen = args.strategies or ",".join(configurations())
    options: dict[str, Any] = {
        "strategies": name_list("strategies", chosen, configurations()),
        "nproc": nproc,
    }
    options.update(study_options(bucket_mb, args.cost_model, options["strategies"], nproc))
    return options, list((options.get("cost_model") or {}).get("notes") or [])
