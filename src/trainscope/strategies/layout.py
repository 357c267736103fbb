"""A pipeline's layout checked before any process starts (torch-free).

Everything that can be refused from the config alone is refused here, in one line:
microbatches that do not divide the batch, a schedule that needs more microbatches, more
stages than the model has blocks, a workload with no blocks to split, what the pipeline
does not run yet. The launcher calls :func:`check_pipeline` before it starts torchrun;
a run started by the user's own torchrun calls it before it writes any file.
"""

from __future__ import annotations

from typing import Any

from trainscope.comm.pipeline import stages_per_rank
from trainscope.errors import ConfigError
from trainscope.strategies.grid import check_grid, replica_batch
from trainscope.workloads import workload_layout

DEFAULT_MICROBATCHES = 4
DEFAULT_SCHEDULE = "1f1b"


def check_layout(pp: int, microbatches: int, schedule: str, batch: int) -> None:
    """Refuse a pipeline of ``pp`` stages and ``microbatches`` per ``batch`` that cannot
    run under ``schedule``."""
    if pp < 2:
        raise ConfigError(f"a pipeline needs at least 2 stages (processes); got {pp}")
    if batch % microbatches:
        raise ConfigError(
            f"{microbatches} microbatches do not divide the batch of {batch}: choose a "
            "batch size that is a multiple of --microbatches"
        )
    if schedule == "1f1b" and microbatches < pp:
        raise ConfigError(
            f"schedule 1f1b needs at least as many microbatches as stages ({pp}); got "
            f"{microbatches} (or use --pp-schedule gpipe)"
        )
    rounds = max(1, microbatches // pp)  # torch's interleaved schedule runs them in rounds
    if schedule == "interleaved-1f1b" and microbatches % rounds:
        raise ConfigError(
            f"schedule interleaved-1f1b runs microbatches in rounds of about the {pp} "
            f"stages: {microbatches} is not a multiple of its {rounds} rounds; choose a "
            f"multiple of {pp}"
        )


def _common(cfg: Any, strategy: str) -> dict[str, Any] | None:
    """What neither model-splitting strategy runs yet, and the workload's layout."""
    if cfg.runtime.precision == "fp16":
        raise ConfigError(
            f"strategy {strategy} does not run fp16 (its GradScaler) yet: use bf16 or fp32"
        )
    if cfg.runtime.compile:
        raise ConfigError(f"strategy {strategy} does not run with --compile yet")
    layout = workload_layout(cfg.workload)
    if layout is not None and layout.get("blocks") == 0:
        raise ConfigError(f"workload {cfg.workload.name} has no blocks to split")
    return layout


def check_tp(cfg: Any) -> None:
    """Refuse a tensor-parallel run (a RunConfig) that cannot run, before any process
    starts: fewer than 2 processes, heads that do not divide by them."""
    tp, dp = check_grid(cfg.dist.world_size, cfg.dist.tp_size, cfg.dist.dp_size, "--tp-size")
    replica_batch(cfg.data.batch_size, dp)
    if tp < 2:
        raise ConfigError(f"tensor parallelism needs at least 2 processes; got {tp}")
    layout = _common(cfg, "tp")
    if layout is None:
        return  # a user's workload: its model is checked when it is built
    name = cfg.workload.name
    if not layout.get("tp", False):
        raise ConfigError(f"strategy tp cannot split workload {name} yet")
    heads = layout.get("heads")
    if heads and heads % tp:
        raise ConfigError(
            f"tensor parallelism splits attention by heads: workload {name}'s {heads} heads "
            f"do not divide by {tp} processes"
        )
    if cfg.dist.sequence_parallel:
        if not layout.get("sequence_parallel", False):
            raise ConfigError(f"--sequence-parallel does not split workload {name} yet")
        seq = layout.get("sequence")
        if seq and seq % tp:
            raise ConfigError(
                f"sequence parallelism cuts workload {name}'s sequences of {seq} tokens "
                f"into {tp} equal shares: {seq} does not divide by {tp}"
            )


def check_pipeline(cfg: Any) -> None:
    """Refuse a pipeline run (a RunConfig) that cannot run, before any process starts."""
    d = cfg.dist
    pp, dp = check_grid(d.world_size, d.pp_stages, d.dp_size, "--pp-stages")
    schedule = d.pp_schedule or DEFAULT_SCHEDULE
    batch = replica_batch(cfg.data.batch_size, dp)
    check_layout(pp, d.microbatches or DEFAULT_MICROBATCHES, schedule, batch)
    layout = _common(cfg, "pipeline")
    if layout is None:
        return  # a user's workload: its model is checked when it is built
    name, blocks = cfg.workload.name, layout.get("blocks")
    if not layout.get("pipeline", False):
        raise ConfigError(f"strategy pipeline cannot split workload {name} yet")
    need = pp * stages_per_rank(schedule)
    if blocks is not None and blocks < need:
        raise ConfigError(
            f"{need} pipeline stages ({pp} processes x {stages_per_rank(schedule)} under "
            f"{schedule}) need at least {need} blocks; workload {name} has {blocks}"
        )
