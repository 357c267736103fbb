"""What a resumed run needs, in one object: :class:`TrainState` (model, optimizer,
precision, schedule, counters and every random generator's state)."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from trainscope.strategies.base import Strategy
from trainscope.techniques.precision import Precision
from trainscope.train.checkpoint import from_local_like, local_optimizer_state, local_tensors
from trainscope.workloads.base import LossFn


@dataclass
class TrainState:
    """Everything a resumed run needs, reachable from one object."""

    model: nn.Module
    optimizer: torch.optim.Optimizer
    precision: Precision
    loss_fn: LossFn
    device: torch.device
    strategy: Strategy | None = None
    """How gradients meet across devices; None: one device, nothing to sync."""
    scheduler: Any = None
    """The lr schedule (a LambdaLR stepped after every optimizer step); None: constant."""
    grad_clip: float = 0.0
    """Clip the gradients' global norm to this before each step (0: no clipping)."""
    progress: Any = None
    """Where this rank is, for the stall watchdog of a multi-process run (None alone)."""
    step: int = 0
    """Optimizer steps taken so far (global, across epochs)."""
    epoch: int = 0
    """Epochs completed so far."""
    epoch_step: int = 0
    """Steps taken in the epoch under way (0 between epochs): where a resume picks up."""

    def state_dict(self) -> dict[str, Any]:
        """Model, optimizer, precision (scaler), counters and RNG states.

        Sharded tensors (FSDP's DTensors) are this rank's own shard: each rank saves its
        part, and nothing is gathered."""
        return {
            "model": local_tensors(self.model.state_dict()),
            "optimizer": local_optimizer_state(self.optimizer.state_dict()),
            "precision": self.precision.state_dict(),
            "scheduler": self.scheduler.state_dict() if self.scheduler is not None else None,
            "step": self.step,
            "epoch": self.epoch,
            "epoch_step": self.epoch_step,
            "rng": rng_states(),
        }

    def load_state_dict(self, sd: dict[str, Any]) -> None:
        """Put a :meth:`state_dict` (e.g. a loaded checkpoint) back, RNG states included:
        the next step is the one the saved run took next."""
        self.model.load_state_dict(from_local_like(sd["model"], self.model.state_dict()))
        params = [p for g in self.optimizer.param_groups for p in g["params"]]
        optimizer = sd["optimizer"]
        state = {
            idx: from_local_like(entry, dict.fromkeys(entry, params[int(idx)]), shaped=True)
            for idx, entry in optimizer["state"].items()
        }
        self.optimizer.load_state_dict({**optimizer, "state": state})
        self.precision.load_state_dict(sd.get("precision") or {})
        if self.scheduler is not None and sd.get("scheduler"):
            self.scheduler.load_state_dict(sd["scheduler"])
        self.step, self.epoch = int(sd["step"]), int(sd["epoch"])
        self.epoch_step = int(sd.get("epoch_step", 0))
        set_rng_states(sd["rng"])


def rng_states() -> dict[str, Any]:
    """Every random generator a run draws from: Python's, NumPy's, torch's CPU and CUDA
    generators (DataLoader workers derive their seeds from torch's, so it covers them)."""
    states: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def set_rng_states(states: dict[str, Any]) -> None:
    """Restore what :func:`rng_states` returned."""
    random.setstate(states["python"])
    np.random.set_state(states["numpy"])
    torch.set_rng_state(states["torch"])
    if states.get("cuda") and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])
