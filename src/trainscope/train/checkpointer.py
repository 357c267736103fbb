"""When a run checkpoints, what goes in, and how many it keeps: one :class:`Checkpointer`.

The loop asks :meth:`Checkpointer.due` after every step and the trainer asks
:meth:`Checkpointer.due_at_epoch_end` after every epoch; nothing else knows the interval.
A checkpoint holds the :class:`~trainscope.train.loop.TrainState` and, as its ``run``,
the run's facts (what a resume compares) and its
:class:`~trainscope.train.progress.RunProgress` so far (what a resume goes on from).
The files and their format are :mod:`trainscope.train.checkpoint`'s.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainscope.config import TrainConfig
from trainscope.records import RunWriter
from trainscope.train.checkpoint import CHECKPOINT_FILES, TMP_PREFIX, prune, write_checkpoint
from trainscope.train.progress import EpochProgress, RunProgress

if TYPE_CHECKING:
    from trainscope.train.fault_injection import Fault
    from trainscope.train.state import TrainState


class Checkpointer:
    """Writes ``checkpoints/step-N`` as often as the config asks and keeps the newest
    ``keep_checkpoints``; the write's time is the run's ``checkpoint`` stage."""

    def __init__(
        self,
        train: TrainConfig,
        writer: RunWriter,
        progress: RunProgress,
        facts: Callable[[], dict[str, Any]],
        origin: float = 0.0,
        fault: Fault | None = None,
    ) -> None:
        self.every = train.checkpoint_every
        """Every this many (global) optimizer steps; 0: not by steps."""
        self.every_epoch = train.checkpoint_every_epoch
        """At the end of every epoch, after its validation."""
        self.keep = train.keep_checkpoints
        """Complete checkpoints kept; older ones are removed as newer ones are written."""
        self.writer, self.progress, self.facts = writer, progress, facts
        self.origin = origin
        self.fault = fault

    @property
    def enabled(self) -> bool:
        """Whether this run writes checkpoints at all."""
        return bool(self.every or self.every_epoch)

    @property
    def root(self) -> Path:
        """The run's ``checkpoints`` folder."""
        return self.writer.run_dir / "checkpoints"

    def due(self, step: int) -> bool:
        """A checkpoint is due after global step ``step``."""
        return bool(self.every) and step % self.every == 0

    def due_at_epoch_end(self, step: int) -> bool:
        """A checkpoint is due at the end of an epoch whose last step was ``step``: every
        epoch if asked, or a step checkpoint due at the epoch's last step (taken after the
        epoch's row and validation, so that a resume from it starts the next epoch)."""
        return self.every_epoch or self.due(step)

    def save(self, state: TrainState, epoch: EpochProgress | None = None) -> None:
        """Write ``state`` as ``checkpoints/step-N`` (its files recorded as ours first)
        with the run's facts and progress (``epoch``: the totals of the epoch under way,
        None between epochs), then keep the newest :attr:`keep`."""
        t0 = time.perf_counter()
        step = state.step
        folders = [f"checkpoints/step-{step}", f"checkpoints/{TMP_PREFIX}step-{step}"]
        self.writer.record(
            *(f"{d}/{name}" for d in folders for name in CHECKPOINT_FILES),
            dirs=["checkpoints", *folders],
        )
        sd = state.state_dict()
        sd["run"] = {**self.facts(), **self.progress.state_dict(at=t0, epoch=epoch)}
        fault = self.fault
        ckpt = write_checkpoint(
            self.root, sd,
            after_file=(lambda _: fault.die_at("checkpoint", step)) if fault else None,
        )  # fmt: skip
        self.prune()
        seconds = time.perf_counter() - t0
        self.progress.add_stage("checkpoint", seconds)
        self.writer.log(
            "checkpoint", step=step, path=str(ckpt.path.relative_to(self.writer.run_dir)),
            t=t0 - self.origin, seconds=seconds,
        )  # fmt: skip

    def prune(self) -> list[Path]:
        """Remove all but the newest :attr:`keep` complete checkpoints; what was removed."""
        return prune(self.root, self.keep)


__all__ = ["Checkpointer"]
