"""Figures a run computes at its end from what it measured (kept apart from the trainer,
which only hands them on to the record)."""

from __future__ import annotations

from typing import Any

import torch

from trainscope.profiling.peak import ENV_VAR, mfu, peak_flops
from trainscope.train.compose import compiled_graphs
from trainscope.train.record import MemoryFigures, Throughput


def memory_figures(
    composed: dict[str, Any], device: torch.device, step_fn: Any, rss: int | None, *,
    data_only: bool, sharded: bool,
) -> MemoryFigures:  # fmt: skip
    """The run's peak memory (CUDA's allocator peak, or the process's peak RSS) and the
    ``memory`` section: what the memory probe's step held."""
    if device.type == "cuda":
        peak, kind = torch.cuda.max_memory_allocated(device), "cuda_max_allocated"
    else:
        peak, kind = rss, "process_peak_rss"
    if data_only:
        note = {"note": "data-only run: no model step, nothing counted"}
        return MemoryFigures(peak, kind, note, counted=False)
    compiled = composed.get("compile")
    if compiled and compiled.get("graphs") is not None:
        graphs = compiled_graphs()
        # Graphs compiled after the warm-up (new shapes, say): inside step times.
        compiled["recompiled_later"] = (graphs or 0) - compiled["graphs"]
    memory = step_fn.section(checkpointing=composed["checkpointing"], sharded=sharded)
    return MemoryFigures(peak, kind, memory, compile=compiled)


def throughput_figures(
    workload: Any, device: torch.device, precision: str, world: int, rate: float | None
) -> Throughput:
    """tokens/s and model FLOPs utilisation at ``rate`` samples/s, where the workload
    states its sizes (tokens and FLOPs per sample)."""
    out = Throughput()
    if rate and workload.tokens_per_sample:
        out.tokens_per_s = rate * workload.tokens_per_sample
    if not workload.flops_per_sample:
        out.mfu_note = "the workload states no FLOPs per sample"
        return out
    out.flops_per_sample = flops = workload.flops_per_sample
    out.peak_flops_per_device = peak = peak_flops(device, precision)
    # Every rank's device contributes its peak: MFU is achieved / (peak x devices).
    out.mfu = mfu(flops, rate, peak * world) if rate and peak else None
    if peak is None:
        out.mfu_note = (
            f"no known peak FLOP/s for {device.type} at {precision}; set {ENV_VAR} to give one"
        )
    return out


__all__ = ["memory_figures", "throughput_figures"]
