"""``allreduce``: gradient sync written by hand with all_reduce, per tensor or bucketed.

After backward each rank all-reduces (sums) its gradients and divides them by the world
size. By default there is one all_reduce per gradient tensor: a model with many small
tensors pays one collective's latency per tensor. With ``bucket_mb`` the gradients are
first copied into flat buckets of at most that many MiB (in reverse registration order,
as DDP fills its buckets), one all_reduce per bucket, and copied back: what bucketing
alone buys, without DDP's overlap with backward. Either way nothing overlaps with
backward, and all of it (copies included) is the ``comm`` stage.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from trainscope.strategies.base import (
    Strategy,
    broadcast_module,
    grads_for_sync,
    trainable_params,
)

MIB = 1 << 20


def bucket_groups(grads: list[torch.Tensor], cap_bytes: float) -> list[list[torch.Tensor]]:
    """``grads`` in reverse order, grouped into buckets: a bucket closes when a tensor
    takes it to ``cap_bytes`` or above, or when the dtype or device changes (a flat
    buffer has one of each). :func:`trainscope.comm.predict.buckets` is the same
    rule on sizes alone."""
    groups: list[list[torch.Tensor]] = []
    current: list[torch.Tensor] = []
    size = 0
    for g in reversed(grads):
        if current and (g.dtype, g.device) != (current[0].dtype, current[0].device):
            groups.append(current)
            current, size = [], 0
        current.append(g)
        size += g.numel() * g.element_size()
        if size >= cap_bytes:
            groups.append(current)
            current, size = [], 0
    if current:
        groups.append(current)
    return groups


class AllReduceStrategy(Strategy):
    """Sum the gradients across ranks with all_reduce, then divide by the world size."""

    name = "allreduce"
    comm_stage = True
    comm_note = "one all_reduce per gradient tensor after backward, timed as stage comm"

    def __init__(self, info: Any, device: torch.device, bucket_mb: float | None = None) -> None:
        super().__init__(info, device)
        self.bucket_mb = bucket_mb
        self.buckets = 0
        if bucket_mb is not None:
            self.comm_note = (
                f"gradients flattened into buckets of <= {bucket_mb:g} MiB after backward, "
                "one all_reduce per bucket (copies included), timed as stage comm"
            )

    def wrap(self, model: nn.Module) -> nn.Module:
        broadcast_module(model, self.info)
        if self.bucket_mb is not None:  # the parameters group as their gradients will
            self.buckets = len(bucket_groups(trainable_params(model), self.bucket_mb * MIB))
        return model

    def sync_gradients(self, model: nn.Module) -> None:
        import torch.distributed as dist

        world = self.info.world_size
        grads = grads_for_sync(model)
        if self.bucket_mb is None:
            for g in grads:
                dist.all_reduce(g, op=dist.ReduceOp.SUM)
                g.div_(world)
            return
        for group in bucket_groups(grads, self.bucket_mb * MIB):
            flat = torch.cat([g.reshape(-1) for g in group])
            dist.all_reduce(flat, op=dist.ReduceOp.SUM)
            flat.div_(world)
            offset = 0
            for g in group:
                g.copy_(flat[offset : offset + g.numel()].view_as(g))
                offset += g.numel()

    def describe(self) -> dict[str, Any]:
        d = super().describe()
        if self.bucket_mb is not None:
            d.update(bucket_mb=self.bucket_mb, buckets=self.buckets)
        return d
