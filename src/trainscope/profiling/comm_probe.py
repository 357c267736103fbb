"""Counting a step's collectives as they pass through the dispatcher (one probed step).

Two kinds of collective are operators the dispatcher sees. DTensor's (tensor parallelism,
FSDP2) are functional ones (``_c10d_functional.all_reduce``, ``all_gather_into_tensor``,
``reduce_scatter_tensor``): on the probed step each is waited for at once, so its time
is the whole collective (DTensor would wait at the result's first use; on a CPU's gloo,
with the next operation needing the result, about the same). Those that
``torch.distributed`` calls from Python are ``c10d`` ops (``allreduce_``, ``send``,
``recv``: a pipeline's transfers, a hand-written sync, DDP's communication hook): timed as
the call, which for a blocking call includes the transfer and for an asynchronous one (an
``isend``, a DDP bucket) is its launch only. A collective that a C++ component issues
directly to the process group is not seen, nor one issued from another thread than the
step's (the dispatch mode is this thread's): FSDP2's counts can be short of its
collectives for that reason.

Only one step is probed (a dispatch mode in Python slows every operator of the step it
watches); the step's stage times are its own as always, and the probe's seconds are host
time inside the collectives, not a share of those stages.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

NAMESPACES = ("_c10d_functional", "c10d_functional", "c10d")
COLLECTIVES = (
    "all_reduce", "all_gather_into_tensor", "reduce_scatter_tensor", "all_to_all_single",
    "broadcast", "allreduce", "allgather", "reduce_scatter", "alltoall", "send", "recv",
    "_allgather_base", "_reduce_scatter_base", "allgather_into_tensor_coalesced",
    "reduce_scatter_tensor_coalesced", "allreduce_coalesced",
)  # fmt: skip
"""Op names (without overload and trailing underscore) counted (c10d's ``_allgather_base``
is what ``dist.all_gather_into_tensor`` calls, as FSDP2 does); helpers such as
``_wrap_tensor_autograd`` are not collectives."""


def _bytes(value: Any) -> int:
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, (list, tuple)):
        return sum(_bytes(v) for v in value)
    return 0


class CollectiveCounter(TorchDispatchMode):
    """Counts, bytes (of the first argument) and host seconds per collective op."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: dict[str, dict[str, float]] = {}

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        name = func.__name__.split(".")[0].rstrip("_")
        if func.namespace not in NAMESPACES or name not in COLLECTIVES:
            return func(*args, **kwargs)
        t0 = time.perf_counter()
        out = func(*args, **kwargs)
        if func.namespace != "c10d" and isinstance(out, torch.Tensor):
            # A functional collective returns at once and is waited for at the result's
            # first use, out of sight; on the probed step it is waited for here, so its
            # seconds are the whole collective (a later wait finds it done).
            torch.ops._c10d_functional.wait_tensor(out)
        seconds = time.perf_counter() - t0
        entry = self.ops.setdefault(name, {"calls": 0, "bytes": 0, "seconds": 0.0})
        entry["calls"] += 1
        entry["bytes"] += _bytes(args[0] if args else None)
        entry["seconds"] += seconds
        return out


StepFn = Callable[[Any, Any, Any], Any]


@dataclass
class CommProbe:
    """Wraps a step function; on call number ``at`` it counts the step's collectives."""

    step_fn: StepFn
    at: int = 3
    calls: int = 0
    figures: dict[str, Any] = field(default_factory=dict)

    def __call__(self, state: Any, batches: Any, timer: Any) -> Any:
        self.calls += 1
        if self.calls != self.at:
            return self.step_fn(state, batches, timer)
        counter = CollectiveCounter()
        with counter:
            out = self.step_fn(state, batches, timer)
        ops = {k: {**v, "seconds": round(v["seconds"], 9)} for k, v in counter.ops.items()}
        self.figures = {"step": state.step, "ops": ops}
        return out

    def record(self) -> dict[str, Any] | None:
        """What the probed step's collectives were (None: no step was probed, or none of
        its collectives went through the dispatcher)."""
        if not self.figures.get("ops"):
            return None
        return {
            **self.figures,
            "method": "collectives seen by the dispatcher on one step: calls, bytes of each "
            "call's input, host seconds (functional ones waited for at once: launch to "
            "result; c10d ones: the call, an asynchronous one's launch only)",
        }
