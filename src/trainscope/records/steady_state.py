"""Warm-up and steady state of a run, from its step records (torch-free).

The first steps of a run pay one-off costs — allocator growth, lazy initialisation, cuDNN
autotuning, caches filling — and are not what the run costs per step afterwards. The
first ``warmup`` steps of each run are therefore reported apart, and the steady-state
figures (median step time with its spread, throughput) come from the steps after them.
The run's totals (``stages_s``, ``samples_per_s``) still count every step.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from trainscope.util.spread import finite, spread


def step_seconds(record: dict[str, Any]) -> float | None:
    """Duration of one step: the sum of its stages (None when it has none)."""
    stages = finite((record.get("stages") or {}).values())
    return sum(stages) if stages else None


def steady_state(
    steps: Sequence[dict[str, Any]], warmup: int, *, scale: int = 1
) -> dict[str, Any] | None:
    """Warm-up and steady-state figures of a run's step records (None without steps).

    ``scale`` turns this rank's samples into the global count (world size for strategies
    that split the batch across ranks). Throughput is total samples over total step time
    of the steady steps, never a mean of per-step rates.
    """
    timed = [(s, t) for s in steps if (t := step_seconds(s)) is not None]
    if not timed:
        return None
    k = min(max(warmup, 0), len(timed))
    warm, rest = timed[:k], timed[k:]
    out: dict[str, Any] = {
        "warmup_steps": k,
        "warmup_time_s": sum(t for _, t in warm),
        "steps": len(rest),
    }
    if warm:
        out["warmup_step_s_median"] = spread(t for _, t in warm).median
    if not rest:
        out["note"] = f"all {len(timed)} steps fell in the warm-up of {warmup}: no steady state"
        return out
    st = spread(t for _, t in rest)
    total = sum(t for _, t in rest)
    samples = sum(int(s.get("batch_size") or 0) for s, _ in rest)
    stage_names = [k for k in (rest[0][0].get("stages") or {})]
    out.update(
        step_s={"median": st.median, "low": st.low, "high": st.high, "kind": st.kind},
        time_s=total,
        samples_per_s=samples * scale / total if total > 0 else None,
        stage_s_median={
            name: spread((s.get("stages") or {}).get(name) for s, _ in rest).median
            for name in stage_names
        },
    )
    return out
