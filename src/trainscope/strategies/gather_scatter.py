"""``gather-scatter``: gradient sync written by hand through one rank.

For every gradient tensor: gather all ranks' copies on rank 0, average them there, and
scatter the average back. Rank 0 receives and sends world_size x the model's gradients
each step, so it is a bandwidth bottleneck (the parameter-server pattern in miniature);
compare it with ``allreduce`` and DDP. All of it is the ``comm`` stage.
"""

from __future__ import annotations

import torch
from torch import nn

from trainscope.strategies.base import Strategy, broadcast_module, grads_for_sync


class GatherScatterStrategy(Strategy):
    """Gather every gradient on rank 0, average in rank order, scatter the mean back."""

    name = "gather-scatter"
    comm_stage = True
    comm_note = "gather to rank 0, average, scatter back, per gradient tensor (stage comm)"

    def wrap(self, model: nn.Module) -> nn.Module:
        broadcast_module(model, self.info)
        return model

    def sync_gradients(self, model: nn.Module) -> None:
        import torch.distributed as dist

        world, root = self.info.world_size, self.info.rank == 0
        for g in grads_for_sync(model):
            parts = [torch.empty_like(g) for _ in range(world)] if root else None
            dist.gather(g, gather_list=parts, dst=0)
            if root:
                # Summed in rank order, then divided: the same arithmetic as all_reduce's
                # sum / world, so on two ranks both strategies give identical gradients.
                total = parts[0].clone()
                for p in parts[1:]:
                    total += p
                total /= world
                dist.scatter(g, scatter_list=[total] * world, src=0)
            else:
                dist.scatter(g, scatter_list=None, src=0)
