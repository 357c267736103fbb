"""The Strategy interface: how a model is spread over devices and how gradients meet.

One class per strategy, each one level below :class:`Strategy`, whose defaults are the
single-device no-ops (in the spirit of Lightning Fabric's strategy objects). The training
step calls :meth:`Strategy.sync_gradients` between backward and the optimizer step and
times it as its own stage, ``comm``, when the strategy does its communication there
(:attr:`Strategy.comm_stage`). DDP and FSDP communicate inside backward (and FSDP inside
forward too): their communication is part of those stages, and :meth:`describe` says so.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from trainscope.errors import ConfigError
from trainscope.runtime.dist import DistInfo


class Strategy:
    """single: one process, one device; every hook a no-op."""

    name = "single"
    comm_stage = False
    """True when :meth:`sync_gradients` does all gradient communication (timed exactly)."""
    comm_note = "no gradient communication (one process)"
    runs_schedule = False
    """True when the strategy runs forward and backward itself, microbatch by microbatch
    (:meth:`forward_backward`, a pipeline schedule) instead of the step's own calls."""

    def __init__(self, info: DistInfo, device: torch.device) -> None:
        self.info = info
        self.device = device
        self.example: Any = None
        """Training inputs of :meth:`example_size` samples, on the device, or None."""

    @property
    def splits_batch_across_ranks(self) -> bool:
        """Each rank loads 1/world of the global batch (False: one process loads it all)."""
        return True

    def local_batch_size(self, global_batch: int) -> int:
        """This rank's share of the global batch; it must divide evenly."""
        world = self.info.world_size if self.splits_batch_across_ranks else 1
        if global_batch % world:
            raise ConfigError(
                f"the global batch size {global_batch} does not split evenly across "
                f"{world} processes: choose a multiple of {world}"
            )
        return global_batch // world

    def training_data(self, data: Any, n_train: int | None) -> tuple[Any, str | None]:
        """The data settings the training loader uses (a DataConfig), and a line for the
        record when the strategy changed them: as configured here."""
        return data, None

    def data_shard(self) -> tuple[int, int]:
        """(this rank's index, the number of shards) of the training data: each rank its
        own shard, or every rank the same batches (a pipeline's stages)."""
        if not self.splits_batch_across_ranks:
            return 0, 1
        return self.info.rank, self.info.world_size

    def loss_share(self) -> float | None:
        """This rank's weight in the logged global loss, a sum over ranks (a pipeline's
        last stage 1, its other stages 0); None: the mean over ranks, each computing a
        loss on its share of the batch."""
        return None

    def example_size(self) -> int:
        """Samples of training input :meth:`wrap` wants to see first (in ``example``, set
        by the trainer), e.g. to time the model's parts; 0: none."""
        return 0

    def wrap(self, model: nn.Module) -> nn.Module:
        """The model as the training step uses it (wrapped, sharded...)."""
        return model

    def forward_backward(
        self, model: nn.Module, inputs: Any, targets: torch.Tensor, loss_fn: Any, precision: Any
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """Forward, loss and backward of a whole batch, run by the strategy (only where
        :attr:`runs_schedule`): the loss and the seconds of the step's stages it ran."""
        raise NotImplementedError(f"strategy {self.name} does not run its own schedule")

    def take_microbatches(self, n: int, origin: float) -> list[list[list[Any]]]:
        """The microbatches of the oldest ``n`` steps not yet taken (a pipeline's, for
        the step records and the trace), on the run's clock from ``origin``; [] here."""
        return []

    def grad_norm(self, params: list[torch.Tensor]) -> torch.Tensor | None:
        """The global norm of the gradients when they are spread over ranks (for
        clipping); None: the local gradients are all of them."""
        return None

    def sync_gradients(self, model: nn.Module) -> None:
        """Make every rank's gradients the global average (after backward)."""

    def unwrap(self, model: nn.Module) -> nn.Module:
        """The user's module inside whatever :meth:`wrap` returned."""
        return model

    def full_state_dict(self, model: nn.Module) -> dict[str, torch.Tensor]:
        """Every parameter and buffer, unsharded, on the CPU (called on every rank; only
        rank 0's result is saved)."""
        return {k: v.detach().cpu() for k, v in self.unwrap(model).state_dict().items()}

    def comm_stats(self) -> dict[str, Any]:
        """Communication measured outside the step's stages (e.g. a DDP hook); may be empty."""
        return {}

    def describe(self) -> dict[str, Any]:
        """What the summary records about the strategy."""
        return {
            "strategy": self.name,
            "world_size": self.info.world_size,
            "backend": self.info.backend,
            "comm_stage": self.comm_stage,
            "comm_note": self.comm_note,
        }


def trainable_params(model: nn.Module) -> list[nn.Parameter]:
    """Parameters that get gradients, in a fixed order (the same on every rank)."""
    return [p for p in model.parameters() if p.requires_grad]


def broadcast_module(model: nn.Module, info: DistInfo) -> None:
    """Copy rank 0's parameters and buffers to every rank, so all start identical."""
    if info.world_size == 1:
        return
    import torch.distributed as dist

    with torch.no_grad():
        for t in [*model.parameters(), *model.buffers()]:
            dist.broadcast(t.data, src=0)


def grads_for_sync(model: nn.Module) -> list[torch.Tensor]:
    """The gradient of every trainable parameter; a missing one becomes zeros so every
    rank sends the same list of tensors (an unused branch must not desynchronise ranks)."""
    grads = []
    for p in trainable_params(model):
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        grads.append(p.grad)
    return grads


def grad_layout(model: nn.Module) -> dict[str, Any]:
    """What gradient communication sees of ``model``: each trainable parameter's gradient
    bytes in registration order, and FSDP's units (the parameters outside ``model.blocks``
    first, then each block's); the input of :mod:`trainscope.comm.predict`."""
    from trainscope.workloads.base import model_blocks

    def nbytes(p: torch.Tensor) -> int:
        return p.numel() * p.element_size()

    tensors = [nbytes(p) for p in trainable_params(model)]
    blocks = [sum(nbytes(p) for p in trainable_params(b)) for b in model_blocks(model)]
    return {"tensor_bytes": tensors, "unit_bytes": [sum(tensors) - sum(blocks)] + blocks}
