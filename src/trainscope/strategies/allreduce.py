"""``allreduce``: gradient sync written by hand, one all-reduce per gradient tensor.

After backward each rank all-reduces (sums) every gradient and divides it by the world
size. Unlike DDP nothing overlaps with backward and nothing is bucketed: a model with many
small tensors pays one collective's latency per tensor. All of it is the ``comm`` stage.
"""

from __future__ import annotations

from torch import nn

from trainscope.strategies.base import Strategy, broadcast_module, grads_for_sync


class AllReduceStrategy(Strategy):
    """Sum every gradient across ranks with all_reduce, then divide by the world size."""

    name = "allreduce"
    comm_stage = True
    comm_note = "one all_reduce per gradient tensor after backward, timed as stage comm"

    def wrap(self, model: nn.Module) -> nn.Module:
        broadcast_module(model, self.info)
        return model

    def sync_gradients(self, model: nn.Module) -> None:
        import torch.distributed as dist

        world = self.info.world_size
        for g in grads_for_sync(model):
            dist.all_reduce(g, op=dist.ReduceOp.SUM)
            g.div_(world)
