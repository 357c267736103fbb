"""The training loop: one readable ``train_step`` with named stages, an epoch, evaluation.

Measurement rule: nothing in a step forces the host to wait for the device. Losses stay
on the device and stage times are CUDA events (on GPU) until :meth:`Epoch.flush` reads
them every ``log_every`` steps, so the CPU can queue work ahead as it would untimed.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from trainscope.data.loaders import BatchLoader
from trainscope.errors import DivergedError
from trainscope.precision import Precision
from trainscope.profiling.timer import StageTimer, device_sync
from trainscope.signals import raise_if_stopped
from trainscope.strategies.base import Strategy
from trainscope.workloads.base import LossFn, Workload, move_to

TRAIN_STAGES = ("data_wait", "h2d", "forward", "backward", "comm", "optimizer")


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
            "optimizer": _local_optimizer(self.optimizer.state_dict()),
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
        self.model.load_state_dict(_like(sd["model"], self.model.state_dict()))
        params = [p for g in self.optimizer.param_groups for p in g["params"]]
        optimizer = sd["optimizer"]
        state = {
            idx: _like(entry, dict.fromkeys(entry, params[int(idx)]), shaped=True)
            for idx, entry in optimizer["state"].items()
        }
        self.optimizer.load_state_dict({**optimizer, "state": state})
        self.precision.load_state_dict(sd.get("precision") or {})
        if self.scheduler is not None and sd.get("scheduler"):
            self.scheduler.load_state_dict(sd["scheduler"])
        self.step, self.epoch = int(sd["step"]), int(sd["epoch"])
        self.epoch_step = int(sd.get("epoch_step", 0))
        set_rng_states(sd["rng"])


def local_tensors(tensors: dict[str, Any]) -> dict[str, Any]:
    """DTensors (FSDP's shards) as this rank's local tensor; anything else as it is."""
    from torch.distributed.tensor import DTensor

    return {k: v.to_local() if isinstance(v, DTensor) else v for k, v in tensors.items()}


def _local_optimizer(sd: dict[str, Any]) -> dict[str, Any]:
    return {**sd, "state": {idx: local_tensors(entry) for idx, entry in sd["state"].items()}}


def _like(
    loaded: dict[str, Any], reference: dict[str, Any], shaped: bool = False
) -> dict[str, Any]:
    """Local shards read back, made DTensors again where ``reference`` (the live model's
    tensors, or the parameter an optimizer state belongs to) is one: the same mesh and
    placements, so each rank gets back exactly the shard it saved. With ``shaped`` only
    tensors the parameter's shape (exp_avg, momentum) are sharded, not e.g. Adam's step."""
    from torch.distributed.tensor import DTensor

    out = {}
    for k, v in loaded.items():
        ref = reference.get(k)
        if isinstance(ref, DTensor) and isinstance(v, torch.Tensor):
            if not shaped or v.shape == ref.to_local().shape and v.dim() > 0:
                v = DTensor.from_local(
                    v.to(ref.device), ref.device_mesh, ref.placements,
                    shape=ref.shape, stride=ref.stride(),
                )  # fmt: skip
        out[k] = v
    return out


def rng_states() -> dict[str, Any]:
    """Every random generator a run draws from: Python's, NumPy's, torch's CPU and CUDA
    generators (DataLoader workers derive their seeds from torch's, so it covers them)."""
    import random

    import numpy as np

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
    import random

    import numpy as np

    random.setstate(states["python"])
    np.random.set_state(states["numpy"])
    torch.set_rng_state(states["torch"])
    if states.get("cuda") and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])


def train_step(
    state: TrainState, batches: Iterator[tuple[torch.Tensor, torch.Tensor]], timer: StageTimer
) -> tuple[torch.Tensor, int]:
    """One optimizer step in five timed stages (six with hand-written gradient sync).

    Returns the detached loss (still on the device: reading it would force a sync) and the
    batch size (the last batch of an epoch may be short).
    """
    timer.start_step()
    inputs, targets = next(batches)  # 1. wait for the next batch from the input pipeline
    timer.mark("data_wait")
    inputs = move_to(inputs, state.device)  # 2. copy it to the device
    targets = targets.to(state.device, non_blocking=True)
    timer.mark("h2d")
    with state.precision.autocast():
        outputs = state.model(inputs)  # 3. forward
        timer.mark("forward")
        loss = state.loss_fn(outputs, targets)  # 4. loss + backward
    state.precision.backward(loss)
    timer.mark("backward")
    if state.strategy is not None and state.strategy.comm_stage:
        state.strategy.sync_gradients(state.model)  # 4b. average gradients across ranks
        timer.mark("comm")
    state.precision.step(state.optimizer, state.grad_clip)  # 5. optimizer step (clipped)
    state.optimizer.zero_grad(set_to_none=True)
    if state.scheduler is not None:
        state.scheduler.step()  # the lr of the next step
    timer.mark("optimizer")
    timer.end_step()
    state.step += 1
    return loss.detach(), targets.shape[0]


def data_step(
    state: TrainState, batches: Iterator[tuple[torch.Tensor, torch.Tensor]], timer: StageTimer
) -> tuple[None, int]:
    """The input pipeline of :func:`train_step` alone (``--data-only``): fetch, copy, no model."""
    timer.start_step()
    inputs, targets = next(batches)
    timer.mark("data_wait")
    inputs = move_to(inputs, state.device)
    targets = targets.to(state.device, non_blocking=True)
    timer.mark("h2d")
    timer.end_step()
    state.step += 1
    return None, targets.shape[0]


@dataclass
class EpochResult:
    """What one epoch of training measured."""

    epoch: int
    steps: int
    samples: int
    duration_s: float
    mean_loss: float | None
    stage_s: dict[str, float] = field(default_factory=dict)
    loader_start_s: float = 0.0
    """Part of data wait spent creating the epoch's iterator (DataLoader worker start-up)."""
    t_start: float = 0.0
    """When the epoch began, in seconds since the run's clock origin."""
    t_end: float = 0.0
    """When its last step (and worker shutdown) ended, on the same clock."""


@dataclass
class EpochProgress:
    """An epoch's running totals: what a checkpoint in mid-epoch saves, so that a resumed
    epoch's row is the row the uninterrupted epoch would have had (plain data, JSON-able)."""

    stage_s: dict[str, float] = field(default_factory=lambda: dict.fromkeys(TRAIN_STAGES, 0.0))
    samples: int = 0
    loss_sum: float = 0.0
    loss_samples: int = 0
    elapsed_s: float = 0.0
    """Seconds of the epoch spent before the current attempt's part of it."""
    loader_start_s: float = 0.0
    t_start: float | None = None
    """When the epoch began, on the run's clock (None until it does)."""

    def to_dict(self) -> dict[str, Any]:
        """Plain data for a checkpoint."""
        return dict(self.__dict__, stage_s=dict(self.stage_s))

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> EpochProgress:
        """The inverse of :meth:`to_dict` (unknown keys ignored)."""
        known = {k: d[k] for k in cls.__dataclass_fields__ if k in d}
        progress = cls(**known)
        progress.stage_s = {**dict.fromkeys(TRAIN_STAGES, 0.0), **progress.stage_s}
        return progress


StepLog = Callable[[list[dict[str, Any]]], None]
StepFn = Callable[
    [TrainState, Iterator[tuple[torch.Tensor, torch.Tensor]], StageTimer],
    tuple["torch.Tensor | None", int],
]
OnCheckpoint = Callable[[TrainState, EpochProgress], None]


def _start_epoch(loader: BatchLoader, epoch: int, skip: int) -> None:
    """The epoch's order (and its random draws) for ``epoch``; a resumed epoch starts
    ``skip`` batches in, without fetching the ones it has trained on already."""
    if hasattr(loader, "set_epoch"):
        loader.set_epoch(epoch)
    else:
        sampler = getattr(loader, "sampler", None)
        if hasattr(sampler, "set_epoch"):
            sampler.set_epoch(epoch)  # a fresh shuffle each epoch, the same on every rank
    if skip:
        if not hasattr(loader, "skip"):
            raise TypeError(f"{type(loader).__name__} cannot start inside an epoch (no skip())")
        loader.skip(skip)


def train_epoch(
    state: TrainState,
    loader: BatchLoader,
    timer: StageTimer,
    *,
    max_steps: int | None = None,
    log_every: int = 10,
    on_steps: StepLog | None = None,
    step_fn: StepFn = train_step,
    reduce_losses: Callable[[torch.Tensor], torch.Tensor] | None = None,
    origin: float = 0.0,
    checkpoint_every: int = 0,
    on_checkpoint: OnCheckpoint | None = None,
    resumed: EpochProgress | None = None,
) -> EpochResult:
    """Train one epoch; every ``log_every`` steps hand the resolved step records to ``on_steps``.

    A step record is ``{"step", "epoch", "loss", "batch_size", "t", "lr", "stages": {...}}``
    (``loss`` is None when ``step_fn`` is :func:`data_step`; ``t`` is when the step began,
    in ``time.perf_counter`` seconds since ``origin``, the run's clock origin). With
    ``reduce_losses`` (the mean over ranks, one collective per log interval, not per step)
    ``loss`` is the global loss and ``rank_loss`` this rank's. Every ``checkpoint_every``
    (global) steps the records so far are resolved and ``on_checkpoint`` gets the state and
    the epoch's totals. A resumed epoch (``state.epoch_step`` > 0, its totals ``resumed``)
    starts where the checkpoint was taken.
    """
    epoch = state.epoch + 1
    state.model.train()
    skip = state.epoch_step
    _start_epoch(loader, epoch, skip)
    n_steps = len(loader) if max_steps is None else min(len(loader), max_steps)
    progress = resumed if resumed is not None and skip else EpochProgress()
    totals = progress.stage_s
    # (step, batch size, device loss, start time, lr): read back every log interval.
    pending: list[tuple[int, int, torch.Tensor | None, float, float]] = []

    def flush(block: bool) -> None:
        times = timer.resolve(block=block)
        if not times:
            return
        done, pending[:] = pending[: len(times)], pending[len(times) :]
        # One read of many losses: a single device sync per log interval, not per step.
        losses = [loss for _, _, loss, _, _ in done if loss is not None]
        stacked = torch.stack(losses).float() if losses else None
        read = iter(stacked.cpu().tolist() if losses else [])
        values = [None if loss is None else next(read) for _, _, loss, _, _ in done]
        glob = iter(reduce_losses(stacked).cpu().tolist() if reduce_losses and losses else [])
        records, diverged = [], None
        for (step, bs, _, t, lr), value, st in zip(done, values, times):
            for k, v in st.items():
                totals[k] += v
            rec = {"step": step, "epoch": epoch, "loss": value, "batch_size": bs, "t": t}
            rec["lr"] = lr
            rec["stages"] = st
            if reduce_losses is not None and value is not None:
                rec["rank_loss"], rec["loss"] = value, next(glob)
            if rec["loss"] is not None and not math.isfinite(rec["loss"]):
                # Written as null (strict JSON); under GradScaler the step was skipped.
                diverged = diverged or (step, rec["loss"])
                rec["nonfinite_loss"] = str(rec["loss"])
                rec["loss"] = None
            if rec["loss"] is not None:
                progress.loss_sum += rec["loss"] * bs
                progress.loss_samples += bs
            records.append(rec)
        if on_steps is not None:
            on_steps(records)
        if diverged is not None and not state.precision.skips_nonfinite_steps:
            raise DivergedError(
                f"the loss was {diverged[1]} at step {diverged[0]} (epoch {epoch}; computed "
                "in the loss + backward stage): training stopped there. Lower --lr, or look "
                "for bad inputs"
            )

    t0 = time.perf_counter()
    if progress.t_start is None:
        progress.t_start = t0 - origin
    # Creating the iterator starts the DataLoader workers: time the batch pipeline pays, so
    # it counts as data wait (host-timed; the device is idle at an epoch boundary anyway).
    batches = iter(loader)
    loader_start = time.perf_counter() - t0
    totals["data_wait"] += loader_start
    progress.loader_start_s += loader_start
    for _ in range(n_steps - skip):
        raise_if_stopped()  # a Ctrl-C or SIGTERM whose exception a finalizer swallowed
        # Host time at the step's start, on the run's clock: stages, evaluation and
        # system samples of one run then share one axis (the timeline, the trace).
        t_step = round(time.perf_counter() - origin, 6)
        lr = state.optimizer.param_groups[0]["lr"]  # this step's (the schedule moves it)
        loss, batch_size = step_fn(state, batches, timer)
        state.epoch_step += 1
        pending.append((state.step, batch_size, loss, t_step, lr))
        progress.samples += batch_size
        if len(pending) >= log_every:
            flush(block=True)
        if checkpoint_every and on_checkpoint and state.step % checkpoint_every == 0:
            flush(block=True)  # every step up to here is in the record before the checkpoint
            if state.epoch_step < n_steps:  # at the epoch's end the epoch's own row saves it
                snapshot = EpochProgress.from_dict(progress.to_dict())
                snapshot.elapsed_s += time.perf_counter() - t0
                on_checkpoint(state, snapshot)
    flush(block=True)
    del batches  # shut non-persistent workers down inside the epoch's time
    device_sync(state.device)
    state.epoch, state.epoch_step = epoch, 0
    t_end = time.perf_counter()
    return EpochResult(
        epoch=epoch,
        steps=n_steps,
        samples=progress.samples,
        duration_s=progress.elapsed_s + t_end - t0,
        mean_loss=progress.loss_sum / progress.loss_samples if progress.loss_samples else None,
        stage_s=totals,
        loader_start_s=progress.loader_start_s,
        t_start=progress.t_start,
        t_end=t_end - origin,
    )


@torch.no_grad()
def evaluate(state: TrainState, workload: Workload, loader: BatchLoader) -> dict[str, Any]:
    """Loss, accuracy and per-class accuracy on one split (autocast as in training)."""
    state.model.eval()
    metrics = workload.new_metrics(state.device)
    for inputs, targets in loader:
        if state.progress is not None:  # every rank evaluates every batch
            state.progress.advance(state.step, "evaluation")
        inputs = move_to(inputs, state.device)
        targets = targets.to(state.device, non_blocking=True)
        with state.precision.autocast():
            outputs = state.model(inputs)
            loss = state.loss_fn(outputs, targets)
        metrics.update(outputs.float(), targets, loss.float())
    return metrics.compute()
