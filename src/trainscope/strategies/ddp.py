"""``ddp``: ``DistributedDataParallel``: bucketed all-reduce overlapped with backward.

DDP groups gradients into buckets (by default 1 MiB for the first, then 25 MiB; with
``dist.bucket_mb``, DDP's ``bucket_cap_mb``, every one at most that) in roughly reverse
order of use and starts a bucket's all-reduce as soon as backward has filled it, so
communication runs while backward is still computing earlier layers. There is therefore
no separate ``comm`` stage: what communication is not hidden is part of ``backward``.

On CPU (gloo) a communication hook also measures each bucket's all-reduce from launch to
completion on the host clock: the time communication was *in flight*, overlapped with
backward, so it is reported beside the stages (``comm_stats``), never added to them. On
CUDA that host-side figure would not be the GPU's time, so it is not taken.
"""

from __future__ import annotations

import time
from typing import Any

import torch
from torch import nn

from trainscope.strategies.base import Strategy


class DDPStrategy(Strategy):
    """DistributedDataParallel, with its default buckets or ``bucket_mb`` MiB ones."""

    name = "ddp"
    comm_note = "bucketed all-reduce overlapped with backward: the part not hidden is in backward"

    def __init__(self, info: Any, device: torch.device, bucket_mb: float | None = None) -> None:
        super().__init__(info, device)
        self.bucket_mb = bucket_mb
        if bucket_mb is not None:
            self.comm_note = (
                f"all-reduce in buckets of <= {bucket_mb:g} MiB overlapped with backward: "
                "the part not hidden is in backward"
            )
        self._inflight_s = 0.0
        self._buckets = 0
        self._bucket_bytes = 0

    def wrap(self, model: nn.Module) -> nn.Module:
        from torch.nn.parallel import DistributedDataParallel as DDP

        ids = [self.device.index] if self.device.type == "cuda" else None
        # None leaves DDP's default (a 1 MiB first bucket, then 25 MiB ones).
        ddp = DDP(model, device_ids=ids, bucket_cap_mb=self.bucket_mb)
        if self.device.type == "cpu":
            ddp.register_comm_hook(None, self._make_timed_hook())
        return ddp

    def _make_timed_hook(self) -> Any:
        """The default all-reduce hook, plus each bucket's in-flight time (host clock)."""
        from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

        # No annotations on the hook itself: DDP checks them, and this module's postponed
        # annotations would be strings to it.
        def timed_allreduce(state, bucket):  # noqa: ANN001, ANN202
            t0 = time.perf_counter()
            self._buckets += 1
            self._bucket_bytes += bucket.buffer().numel() * bucket.buffer().element_size()

            def done(fut):  # noqa: ANN001, ANN202
                self._inflight_s += time.perf_counter() - t0
                return fut.value()

            return allreduce_hook(state, bucket).then(done)

        return timed_allreduce

    def unwrap(self, model: nn.Module) -> nn.Module:
        return getattr(model, "module", model)

    def describe(self) -> dict[str, Any]:
        d = super().describe()
        if self.bucket_mb is not None:
            d["bucket_mb"] = self.bucket_mb
        return d

    def comm_stats(self) -> dict[str, Any]:
        if self.device.type != "cpu":
            return {}
        return {
            "hook_inflight_s": self._inflight_s,
            "hook_buckets": self._buckets,
            "hook_bytes": self._bucket_bytes,
            "hook_note": "all-reduce launch to completion per bucket, host clock; overlapped "
            "with backward, so not additive to the stages",
        }
