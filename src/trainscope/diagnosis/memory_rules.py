"""The doctor's memory rules: a run near its device's memory limit, and what holds the
memory (torch-free).

The figures are the run's memory probe (``summary.json`` ``memory``: the tensor bytes one
training step holds, counted by :mod:`trainscope.profiling.memory`) and the device's
limit: the GPU's total memory or the machine's (env.json), or a limit the user gives
(``trainscope doctor --memory-limit``, e.g. the smaller GPU the run is meant for).
"""

from __future__ import annotations

from typing import Any

from trainscope import registry
from trainscope.diagnosis.facts import RunFacts
from trainscope.diagnosis.findings import Finding, ms, pct, severity_of
from trainscope.util.numfmt import fmt_bytes

NEAR_LIMIT = 0.80
"""Memory in use above 80% of the limit: the allocator's fragmentation, a longer
sequence or a larger batch would not fit (PyTorch's caching allocator commonly reserves
10-20% above what it has allocated)."""
ACTIVATIONS_DOMINATE = 0.50
"""Activations are at least half the counted bytes: checkpointing is the lever."""
STATES_DOMINATE = 0.40
"""Optimizer states are the largest component and at least 40% of the counted bytes
(Adam keeps two fp32 moments per parameter: twice the weights)."""


def _int(value: Any) -> int | None:
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= 0
    return value if ok else None


def memory_section(f: RunFacts) -> dict[str, Any] | None:
    """The run's memory probe figures, or None when it has none that can be read."""
    mem = f.view.memory
    if _int(mem.get("total_bytes")) in (None, 0):
        return None
    return mem


def memory_limit(f: RunFacts) -> tuple[int, int, str] | None:
    """(bytes in use, the limit, what both are) or None when either is unknown.

    Against a limit the user gave, the counted tensor bytes are compared (what would move
    to the target device); against the device's own, the run's measured peak (the CUDA
    allocator's, or the process's resident memory on a CPU), which is what the device
    runs out of.
    """
    mem = memory_section(f)
    if mem is None:
        return None
    if f.memory_limit_bytes:
        return (
            mem["total_bytes"],
            f.memory_limit_bytes,
            "tensor bytes counted against the limit given",
        )
    peak = _int(f.view.count("peak_memory_bytes"))
    if peak is None:
        return None
    index = f.cuda_index()
    if index is not None:
        gpus = f.env.get("gpus") if isinstance(f.env.get("gpus"), list) else []
        totals = [
            g.get("total_memory_bytes")
            for g in gpus
            if isinstance(g, dict) and g.get("index") == index
        ]
        limit = _int(totals[0]) if totals else None
        what = "the CUDA allocator's peak against the GPU's memory"
    else:
        limit = _int(f.env.get("host_memory_bytes"))
        what = "the process's peak resident memory against the machine's"
    return (peak, limit, what) if limit else None


def _near(f: RunFacts) -> tuple[int, int, str] | None:
    found = memory_limit(f)
    return found if found is not None and found[0] >= NEAR_LIMIT * found[1] else None


def _limit_text(used: int, limit: int, what: str) -> str:
    return f"{fmt_bytes(used)} of {fmt_bytes(limit)} ({pct(used / limit)}; {what})"


def activations_near_limit(f: RunFacts) -> Finding | None:
    """Near the memory limit with activations the largest part: checkpoint the blocks."""
    mem, near = memory_section(f), _near(f)
    if mem is None or near is None:
        return None
    total, act = mem["total_bytes"], _int(mem.get("activations_bytes")) or 0
    policy = (mem.get("checkpointing") or {}).get("policy", "none")
    if act < ACTIVATIONS_DOMINATE * total or policy not in (None, "none"):
        return None
    split = mem.get("activations") if isinstance(mem.get("activations"), dict) else {}
    blocks, inside = _int(split.get("blocks")) or 0, _int(split.get("inside_blocks_bytes"))
    inputs = _int(split.get("block_inputs_bytes"))
    saved = inside - inputs if blocks and inside is not None and inputs is not None else None
    evidence = [
        f"memory in use: {_limit_text(*near)}",
        f"activations {fmt_bytes(act)} of {fmt_bytes(total)} counted on step {mem.get('step')} "
        f"({pct(act / total)}; threshold {pct(ACTIVATIONS_DOMINATE)})",
    ]
    cost = ms(f.stages["forward"], "forward") if "forward" in f.stages else None
    if saved is not None and saved > 0:
        evidence.append(
            f"saved inside the {blocks} blocks {fmt_bytes(inside)}, "
            f"their inputs {fmt_bytes(inputs)}"
        )
        gain = (
            f"checkpointing every block keeps only the blocks' inputs: about {fmt_bytes(saved)} "
            f"less, activations from {fmt_bytes(act)} to {fmt_bytes(act - saved)} (measured split "
            "on the probe step); it re-runs the blocks' forward in backward, at most one more "
            "forward per step" + (f" ({cost})" if cost else "")
        )
    else:
        gain = (
            "not estimated: the model has no blocks the probe could split at; --apply measures it"
        )
    return Finding(
        "activations-near-limit",
        severity_of(saved / near[0] if saved else None),
        f"Memory is at {pct(near[0] / near[1])} of the limit (threshold {pct(NEAR_LIMIT)}) and "
        f"activations are {pct(act / total)} of what a step holds.",
        evidence,
        gain,
        {"--checkpointing": "full"},
        gain_share=saved / near[0] if saved else None,
        measure="memory",
        notes=["checkpointing recomputes the same values: the loss is unchanged"],
    )


def _sharding(
    f: RunFacts, states: int, model_states: int
) -> tuple[dict[str, Any], str, int | None]:
    """The fix, its gain text and the bytes it saves per process."""
    strategy, world = f.view.strategy, f.view.world_size or 1
    if world >= 2 and registry.capabilities(strategy).replicates_states:
        saved = model_states * (world - 1) // world
        gain = (
            f"FSDP shards weights, gradients and optimizer states over the {world} ranks: "
            f"each holds 1/{world} of the {fmt_bytes(model_states)} of model states, about "
            f"{fmt_bytes(saved)} less per process; it moves 1.5x DDP's bytes per step "
            "(all-gathers in forward and backward)"
        )
        return {"--strategy": "fsdp"}, gain, saved
    gain = (
        f"sharding needs several processes: with --nproc N --strategy fsdp each holds 1/N of "
        f"the {fmt_bytes(states)} of optimizer states (and of the weights and gradients)"
    )
    return {}, gain, None


def optimizer_states_near_limit(f: RunFacts) -> Finding | None:
    """Near the memory limit with optimizer states the largest part: shard them."""
    mem, near = memory_section(f), _near(f)
    if mem is None or near is None or mem.get("sharded") is True:
        return None
    parts = {
        k: _int(mem.get(f"{k}_bytes")) or 0
        for k in ("parameters", "gradients", "optimizer_states", "activations")
    }
    total, states = mem["total_bytes"], parts["optimizer_states"]
    if states < STATES_DOMINATE * total or states < max(parts.values()):
        return None
    fix, gain, saved = _sharding(f, states, _int(mem.get("model_states_bytes")) or 0)
    return Finding(
        "optimizer-states-near-limit",
        severity_of(saved / near[0]) if saved else "moderate",
        f"Memory is at {pct(near[0] / near[1])} of the limit (threshold {pct(NEAR_LIMIT)}) and "
        f"optimizer states are its largest part ({pct(states / total)} of what a step holds).",
        [
            f"memory in use: {_limit_text(*near)}",
            f"optimizer states {fmt_bytes(states)}, weights {fmt_bytes(parts['parameters'])}, "
            f"gradients {fmt_bytes(parts['gradients'])}, activations "
            f"{fmt_bytes(parts['activations'])} (step {mem.get('step')})",
        ],
        gain,
        fix,
        gain_share=saved / near[0] if saved else None,
        measure="memory",
    )


__all__ = [
    "ACTIVATIONS_DOMINATE",
    "NEAR_LIMIT",
    "STATES_DOMINATE",
    "activations_near_limit",
    "memory_limit",
    "optimizer_states_near_limit",
]
