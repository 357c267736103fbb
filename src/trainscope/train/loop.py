"""The training loop: one readable ``train_step`` with named stages, an epoch, evaluation.

Measurement rule: nothing in a step forces the host to wait for the device. Losses stay
on the device and stage times are CUDA events (on GPU) until :meth:`Epoch.flush` reads
them every ``log_every`` steps, so the CPU can queue work ahead as it would untimed.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from trainscope.data.loaders import BatchLoader
from trainscope.errors import DivergedError, Preempted
from trainscope.profiling.timer import StageTimer, device_sync
from trainscope.runtime.signals import raise_if_stopped
from trainscope.train.progress import TRAIN_STAGES, EpochProgress, EpochResult
from trainscope.train.state import TrainState
from trainscope.workloads.base import Workload, move_to


class CheckpointPolicy(Protocol):
    """What the loop asks of :class:`trainscope.train.checkpointer.Checkpointer`: whether
    a checkpoint is due after a step, and to write one (the rule is the checkpointer's)."""

    def due(self, step: int) -> bool:
        """A checkpoint is due after global step ``step``."""
        ...

    def save(self, state: TrainState, epoch: EpochProgress | None = None) -> None:
        """Write ``state``'s checkpoint."""
        ...


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
    strategy = state.strategy
    if strategy is not None and strategy.runs_schedule:
        # 3-4. forward, loss and backward of every microbatch, in a pipeline schedule's
        # order: this rank's forward and backward time, the rest waiting on other stages.
        loss, own = strategy.forward_backward(
            state.model, inputs, targets, state.loss_fn, state.precision
        )
        timer.mark_split(own, rest="pipeline_wait")
    else:
        with state.precision.autocast():
            outputs = state.model(inputs)  # 3. forward
            timer.mark("forward")
            loss = state.loss_fn(outputs, targets)  # 4. loss + backward
        state.precision.backward(loss)
        timer.mark("backward")
    if strategy is not None and strategy.comm_stage:
        strategy.sync_gradients(state.model)  # 4b. average gradients across ranks
        timer.mark("comm")
    norm = strategy.grad_norm if strategy is not None else None
    state.precision.step(state.optimizer, state.grad_clip, norm)  # 5. optimizer step (clipped)
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


StepLog = Callable[[list[dict[str, Any]]], None]
BetweenSteps = Callable[["TrainState", Callable[[], None], float], tuple[bool, float]]
StepFn = Callable[
    [TrainState, Iterator[tuple[torch.Tensor, torch.Tensor]], StageTimer],
    tuple["torch.Tensor | None", int],
]


@dataclass
class EpochOptions:
    """How :func:`train_epoch` trains an epoch (every field has a default)."""

    max_steps: int | None = None
    """Stop the epoch after this many steps (None: the whole loader)."""
    log_every: int = 10
    """Resolve the step records (and read the losses back) every this many steps."""
    on_steps: StepLog | None = None
    """Called with each batch of resolved step records."""
    step_fn: StepFn = train_step
    """One step: :func:`train_step`, or :func:`data_step` for the input pipeline alone."""
    reduce_losses: Callable[[torch.Tensor], torch.Tensor] | None = None
    """The mean over ranks of a tensor of losses (one collective per log interval)."""
    rank_has_loss: bool = True
    """This rank computes a loss of its own (a pipeline's last stage alone does): its
    ``rank_loss`` is recorded beside the global one."""
    origin: float = 0.0
    """The run's clock origin (a perf_counter reading): every ``t`` counts from it."""
    checkpointer: CheckpointPolicy | None = None
    """Asked after every step whether a checkpoint is due (and then writes it)."""
    resumed: EpochProgress | None = None
    """A resumed epoch's totals up to its checkpoint."""
    stop_vote: Any = None
    """Asked every ``log_every`` global steps (alike on every rank): the preemption
    signal any rank received, or 0 (:class:`trainscope.train.preemption.StopVote`)."""
    between_steps: BetweenSteps | None = None
    """Called after every step with a function that resolves the pending step records
    and the epoch's training seconds so far; returns whether the run ends here and the
    seconds it spent (an evaluation: kept out of the epoch's training time).
    :class:`trainscope.train.target.StepEvaluations` is one."""


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


class _PendingSteps:
    """Steps taken but not yet read back: (step, batch size, device loss, start time, lr).
    :meth:`flush` resolves their stage times and losses in one go (one device sync per
    log interval, not per step) and hands the records on."""

    def __init__(
        self, state: TrainState, timer: StageTimer, opts: EpochOptions, epoch: int,
        progress: EpochProgress,
    ) -> None:  # fmt: skip
        self.state, self.timer, self.opts = state, timer, opts
        self.epoch, self.progress = epoch, progress
        self.steps: list[tuple[int, int, torch.Tensor | None, float, float]] = []

    def add(
        self, step: int, batch_size: int, loss: torch.Tensor | None, t: float, lr: float
    ) -> None:
        self.steps.append((step, batch_size, loss, t, lr))

    def __len__(self) -> int:
        return len(self.steps)

    def flush(self, block: bool) -> None:
        """Resolve what the timer has finished; raise DivergedError on a non-finite loss
        (unless the precision skips such steps)."""
        times = self.timer.resolve(block=block)
        if not times:
            return
        done, self.steps[:] = self.steps[: len(times)], self.steps[len(times) :]
        records, diverged = self._records(done, times)
        if self.opts.on_steps is not None:
            self.opts.on_steps(records)
        if diverged is not None and not self.state.precision.skips_nonfinite_steps:
            raise DivergedError(
                f"the loss was {diverged[1]} at step {diverged[0]} (epoch {self.epoch}; "
                "computed in the loss + backward stage): training stopped there. Lower --lr, "
                "or look for bad inputs"
            )

    def _losses(self, done: list) -> tuple[list[float | None], Iterator[float]]:
        """This rank's losses (None for a data-only step) and, with ``reduce_losses``,
        the global ones: one read of many losses."""
        losses = [loss for _, _, loss, _, _ in done if loss is not None]
        stacked = torch.stack(losses).float() if losses else None
        read = iter(stacked.cpu().tolist() if losses else [])
        values = [None if loss is None else next(read) for _, _, loss, _, _ in done]
        reduce = self.opts.reduce_losses
        glob = iter(reduce(stacked).cpu().tolist() if reduce and losses else [])
        return values, glob

    def _records(self, done: list, times: list) -> tuple[list[dict[str, Any]], Any]:
        """The step records, the epoch's totals updated; the first non-finite loss."""
        values, glob = self._losses(done)
        progress, records, diverged = self.progress, [], None
        for (step, bs, _, t, lr), value, st in zip(done, values, times):
            for k, v in st.items():
                progress.stage_s[k] += v
            rec = {"step": step, "epoch": self.epoch, "loss": value, "batch_size": bs, "t": t}
            rec["lr"] = lr
            rec["stages"] = st
            if self.opts.reduce_losses is not None and value is not None:
                rec["rank_loss"], rec["loss"] = value, next(glob)
                if not self.opts.rank_has_loss:
                    del rec["rank_loss"]
            if rec["loss"] is not None and not math.isfinite(rec["loss"]):
                # Written as null (strict JSON); under GradScaler the step was skipped.
                diverged = diverged or (step, rec["loss"])
                rec["nonfinite_loss"] = str(rec["loss"])
                rec["loss"] = None
            if rec["loss"] is not None:
                progress.loss_sum += rec["loss"] * bs
                progress.loss_samples += bs
            records.append(rec)
        return records, diverged


def _checkpoint_or_stop(
    state: TrainState, opts: EpochOptions, pending: _PendingSteps, n_steps: int,
    snapshot: Callable[[], EpochProgress],
) -> None:  # fmt: skip
    """After a step: the checkpoint, where one is due; then, every ``log_every`` global
    steps (alike on every rank, whatever was flushed when) and mid-epoch, the preemption
    vote (at an epoch's end the trainer asks, after the epoch's validation)."""
    saved = False
    if opts.checkpointer is not None and opts.checkpointer.due(state.step):
        pending.flush(block=True)  # every step up to here is in the record before it
        if state.epoch_step < n_steps:  # at the epoch's end the epoch's own row saves it
            opts.checkpointer.save(state, snapshot())
            saved = True
    if opts.stop_vote is not None and state.step % opts.log_every == 0:
        if state.epoch_step < n_steps:
            _stop_if_voted(state, opts, pending, snapshot, saved)


def _stop_if_voted(
    state: TrainState, opts: EpochOptions, pending: _PendingSteps,
    snapshot: Callable[[], EpochProgress], saved: bool,
) -> None:  # fmt: skip
    """Stop here, checkpointed, if any rank received a preemption signal (every rank asks
    at the same step, and all stop together)."""
    assert opts.stop_vote is not None
    signum = opts.stop_vote()
    if not signum:
        return
    pending.flush(block=True)  # every step up to here is in the record before it
    where = None
    if opts.checkpointer is not None:
        if not saved:
            opts.checkpointer.save(state, snapshot())
        where = f"checkpoints/step-{state.step}"
    raise Preempted(signum, state.step, where, opts.stop_vote.status(signum))


def train_epoch(
    state: TrainState, loader: BatchLoader, timer: StageTimer, options: EpochOptions | None = None
) -> EpochResult:
    """Train one epoch; every ``log_every`` steps hand the resolved step records to ``on_steps``.

    A step record is ``{"step", "epoch", "loss", "batch_size", "t", "lr", "stages": {...}}``
    (``loss`` is None when ``step_fn`` is :func:`data_step`; ``t`` is when the step began,
    in ``time.perf_counter`` seconds since ``origin``, the run's clock origin). With
    ``reduce_losses`` (the mean over ranks, one collective per log interval, not per step)
    ``loss`` is the global loss and ``rank_loss`` this rank's. Whenever the checkpointer
    says one is due, the records so far are resolved and it saves the state with the
    epoch's totals. A resumed epoch (``state.epoch_step`` > 0, its totals ``resumed``)
    starts where the checkpoint was taken.
    """
    opts = options if options is not None else EpochOptions()
    epoch = state.epoch + 1
    state.model.train()
    skip = state.epoch_step
    _start_epoch(loader, epoch, skip)
    n_steps = len(loader) if opts.max_steps is None else min(len(loader), opts.max_steps)
    progress = opts.resumed if opts.resumed is not None and skip else EpochProgress()
    pending = _PendingSteps(state, timer, opts, epoch, progress)
    t0 = time.perf_counter()
    if progress.t_start is None:
        progress.t_start = t0 - opts.origin
    # Creating the iterator starts the DataLoader workers: time the batch pipeline pays, so
    # it counts as data wait (host-timed; the device is idle at an epoch boundary anyway).
    batches = iter(loader)
    loader_start = time.perf_counter() - t0
    progress.stage_s["data_wait"] += loader_start
    progress.loader_start_s += loader_start
    for _ in range(n_steps - skip):
        raise_if_stopped()  # a Ctrl-C or SIGTERM whose exception a finalizer swallowed
        # Host time at the step's start, on the run's clock: stages, evaluation and
        # system samples of one run then share one axis (the timeline, the trace).
        t_step = round(time.perf_counter() - opts.origin, 6)
        lr = state.optimizer.param_groups[0]["lr"]  # this step's (the schedule moves it)
        loss, batch_size = opts.step_fn(state, batches, timer)
        state.epoch_step += 1
        pending.add(state.step, batch_size, loss, t_step, lr)
        progress.samples += batch_size
        if len(pending) >= opts.log_every:
            pending.flush(block=True)
        if opts.between_steps is not None:  # first: a checkpoint here holds its outcome
            epoch_s = progress.elapsed_s + time.perf_counter() - t0 - progress.paused_s
            ended, paused = opts.between_steps(state, lambda: pending.flush(block=True), epoch_s)
            progress.paused_s += paused
            if ended:  # a target met or a time limit passed: the epoch (and run) ends here
                n_steps = state.epoch_step
                break
        _checkpoint_or_stop(state, opts, pending, n_steps,
                            lambda: progress.snapshot(time.perf_counter() - t0))  # fmt: skip
    pending.flush(block=True)
    del batches  # shut non-persistent workers down inside the epoch's time
    device_sync(state.device)
    state.epoch, state.epoch_step = epoch, 0
    t_end = time.perf_counter()
    return progress.result(epoch, n_steps, t_end - t0, t_end - opts.origin)


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


# TRAIN_STAGES, EpochProgress and EpochResult live with the run's other progress figures
# (train.progress); they are imported from here as well.
__all__ = [
    "TRAIN_STAGES",
    "EpochOptions",
    "EpochProgress",
    "EpochResult",
    "data_step",
    "evaluate",
    "train_epoch",
    "train_step",
]
