"""``dp``: ``torch.nn.DataParallel``, one process driving every visible GPU.

Each step DataParallel scatters the batch over the GPUs, *replicates the module* to each
of them (a copy of every parameter, every step), runs the replicas in threads (under the
GIL), gathers the outputs on the first GPU and reduces the gradients back there. Those
per-step copies and the single-process bottleneck are why DDP beats it; the copies happen
inside forward and backward, so they show up in those stages.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from trainscope.strategies.base import Strategy


class DataParallelStrategy(Strategy):
    """DataParallel over every visible GPU; on one device (or the CPU) a pass-through."""

    name = "dp"
    comm_note = "scatter/replicate/gather inside forward and backward (not a separate stage)"

    def __init__(self, info: Any, device: torch.device) -> None:
        super().__init__(info, device)
        self.device_ids = list(range(torch.cuda.device_count())) if device.type == "cuda" else []

    @property
    def splits_batch_across_ranks(self) -> bool:
        return False  # one process loads the global batch; DataParallel splits it

    @property
    def replicas(self) -> int:
        """Devices the batch is split over (1: nothing is parallel)."""
        return max(len(self.device_ids), 1)

    def wrap(self, model: nn.Module) -> nn.Module:
        if self.device.type == "cuda":
            return nn.DataParallel(model, device_ids=self.device_ids, output_device=self.device)
        return nn.DataParallel(model)  # no GPUs: DataParallel calls the module as is

    def unwrap(self, model: nn.Module) -> nn.Module:
        return model.module if isinstance(model, nn.DataParallel) else model

    def describe(self) -> dict[str, Any]:
        out = super().describe()
        out["replicas"] = self.replicas
        if self.replicas == 1:
            out["note"] = (
                "DataParallel on one device: no replicas and no communication, the module "
                "is called as is (the wrapper's own overhead only)"
            )
        return out
