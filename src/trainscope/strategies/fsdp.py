"""``fsdp``: FSDP2 (``torch.distributed.fsdp.fully_shard``) on each block and the root.

Parameters, gradients and optimizer state are sharded: each rank keeps 1/world of them.
Before a block runs forward (and again in backward) its parameters are all-gathered, and
after backward its gradients are reduce-scattered, overlapped with compute where FSDP can
prefetch. That communication is inside ``forward`` and ``backward``; there is no separate
``comm`` stage. Wrapping the workload's blocks one by one (``model.blocks``) is what lets
memory drop: only one block's full parameters exist at a time.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from trainscope.strategies.base import Strategy
from trainscope.workloads.base import model_blocks


class FSDPStrategy(Strategy):
    """FSDP2 over the workload's blocks, then the root module."""

    name = "fsdp"
    comm_note = (
        "all-gather of parameters in forward/backward and reduce-scatter of gradients in "
        "backward: part of those stages"
    )

    def __init__(self, info: Any, device: torch.device) -> None:
        super().__init__(info, device)
        self.sharded_blocks = 0

    def wrap(self, model: nn.Module) -> nn.Module:
        from torch.distributed.fsdp import fully_shard

        for block in model_blocks(model):
            fully_shard(block)
            self.sharded_blocks += 1
        fully_shard(model)
        return model

    def full_state_dict(self, model: nn.Module) -> dict[str, torch.Tensor]:
        # A collective: every rank takes part; rank 0 receives the unsharded tensors.
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            get_model_state_dict,
        )

        opts = StateDictOptions(full_state_dict=True, cpu_offload=True)
        return get_model_state_dict(model, options=opts)

    def describe(self) -> dict[str, Any]:
        out = super().describe()
        out["sharded_blocks"] = self.sharded_blocks
        return out
