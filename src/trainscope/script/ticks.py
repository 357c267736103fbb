"""Stage boundaries on CUDA: a host reading and an event, read back without a per-step
``synchronize()`` (the clock resolves them every log interval and at the end)."""

from __future__ import annotations

import time
from typing import Any

import torch


class CudaTicks:
    """Boundary tokens on CUDA: a host reading and an event on the current stream. Two
    tokens that both carry events are the GPU's time between them (no synchronize until
    they are read); a host-only token (from before the first CUDA forward) counts host
    time."""

    kind = "cuda_events"
    deferred = True
    """Tokens are read later (see :meth:`ready`): the clock queues its intervals."""

    def __init__(self, device: torch.device) -> None:
        self.device = device

    def tick(self) -> Any:
        ev = torch.cuda.Event(enable_timing=True)
        ev.record(torch.cuda.current_stream(self.device))
        return (time.perf_counter(), ev)

    def host(self, token: Any) -> float:
        return token[0] if isinstance(token, tuple) else token

    def seconds(self, start: Any, end: Any) -> float:
        if isinstance(start, tuple) and isinstance(end, tuple):
            return start[1].elapsed_time(end[1]) / 1000.0
        return self.host(end) - self.host(start)

    def ready(self, token: Any, block: bool) -> bool:
        if not isinstance(token, tuple):
            return True
        if block:
            token[1].synchronize()
            return True
        return bool(token[1].query())


__all__ = ["CudaTicks"]
