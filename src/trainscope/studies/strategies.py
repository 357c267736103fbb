"""``study strategies``: every parallel strategy on one workload, same global batch and seed.

Configurations: ``single``; ``dp`` (DataParallel, one process); ``ddp-1proc`` (DDP in a
world of one: the wrapper's own cost, next to ``single``); and ``ddp``, ``fsdp``,
``gather-scatter``, ``allreduce`` (one all_reduce per tensor) and ``allreduce-bucketed``
(the same, flattened into ``bucket_mb`` buckets: what bucketing buys without DDP's overlap)
with ``nproc`` processes. With a cost model (the α–β fits of a ``trainscope collectives``
sweep, kept in the plan) the report sets each strategy's measured communication beside
its prediction. Every run executes in a process
of its own (multi-process ones through torchrun), so start-up and peak memory are each
run's own and the configurations are compared on equal terms.
"""

from __future__ import annotations

from typing import Any

import torch

from trainscope.records.study_dir import PlannedRun, StudyPlan
from trainscope.studies.base import finish_plan, repeats_of

ONE_PROCESS = ("single", "dp", "ddp-1proc")
MULTI_PROCESS = ("ddp", "fsdp", "gather-scatter", "allreduce", "allreduce-bucketed")
ALL = ONE_PROCESS + MULTI_PROCESS
FRESH_PROCESS = True
"""Tells the study command to run each configuration in a process of its own."""


def _config(name: str, nproc: int, bucket_mb: float) -> tuple[dict[str, Any], int]:
    if name == "ddp-1proc":
        return {"dist.strategy": "ddp", "dist.nproc": 1}, 1
    if name == "allreduce-bucketed":
        return {
            "dist.strategy": "allreduce",
            "dist.nproc": nproc,
            "dist.bucket_mb": bucket_mb,
        }, nproc
    procs = nproc if name in MULTI_PROCESS else 1
    return {"dist.strategy": name, "dist.nproc": procs}, procs


def applicability(name: str, procs: int, device: torch.device) -> str | None:
    """None when the configuration can run here, else why not."""
    if device.type == "cuda" and procs > torch.cuda.device_count():
        return f"{procs} processes need {procs} GPUs; {torch.cuda.device_count()} here"
    return None


def plan(
    base_config: dict[str, Any],
    device: torch.device,
    *,
    repeats: int = 3,
    warmup: bool = True,
    nproc: int = 2,
    strategies: list[str] | None = None,
    bucket_mb: float = 25.0,
    cost_model: dict[str, Any] | None = None,
) -> StudyPlan:
    """One configuration per strategy, each repeated; the global batch stays the same.
    ``cost_model``: {"source": where, "fits": α–β fits as study.json keeps them}."""
    names = list(ALL) if strategies is None else strategies
    runs: list[PlannedRun] = []
    for name in names:
        overrides, procs = _config(name, nproc, bucket_mb)
        reason = applicability(name, procs, device)
        runs += repeats_of(
            name,
            repeats,
            labels={"strategy": name, "processes": procs},
            overrides=overrides,
            applicable=reason is None,
            reason=reason,
        )
    options = {
        "repeats": repeats,
        "warmup": warmup,
        "nproc": nproc,
        "strategies": names,
        "device": str(device),
        "bucket_mb": bucket_mb,
    }
    if cost_model:
        options["cost_model"] = cost_model
    return finish_plan("strategies", base_config, options, runs, warmup)
