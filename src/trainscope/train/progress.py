"""Where a run stands, as plain data (torch-free): an epoch's running totals
(:class:`EpochProgress`), what an epoch measured (:class:`EpochResult`), and the run's
totals across epochs and attempts (:class:`RunProgress`).

A checkpoint saves :meth:`RunProgress.state_dict` beside the
:class:`~trainscope.train.loop.TrainState` (``trainer.json``'s ``run``, see
:data:`~trainscope.records.record_specs.RUN_STATE`); a resume puts it back with one
:meth:`RunProgress.load_state_dict`, so that the resumed run's summary covers every
attempt as one uninterrupted run's would.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from trainscope.records import STAGES

TRAIN_STAGES = ("data_wait", "h2d", "forward", "backward", "comm", "pipeline_wait", "optimizer")
FIRST_LOSSES = 5
"""How many of the run's first step losses the summary keeps (``first_losses``)."""


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
    paused_s: float = 0.0
    """Seconds inside the epoch spent on other work than training (evaluations between
    steps): not part of its duration."""

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

    def snapshot(self, elapsed_s: float) -> EpochProgress:
        """A copy as a checkpoint saves it, ``elapsed_s`` more seconds of the epoch spent."""
        copy = EpochProgress.from_dict(self.to_dict())
        copy.elapsed_s += elapsed_s
        return copy

    def result(self, epoch: int, steps: int, own_s: float, t_end: float) -> EpochResult:
        """The epoch's result once it ends: ``own_s`` seconds of it in this attempt."""
        return EpochResult(
            epoch=epoch,
            steps=steps,
            samples=self.samples,
            duration_s=self.elapsed_s + own_s - self.paused_s,
            mean_loss=self.loss_sum / self.loss_samples if self.loss_samples else None,
            stage_s=self.stage_s,
            loader_start_s=self.loader_start_s,
            t_start=self.t_start if self.t_start is not None else 0.0,
            t_end=t_end,
        )


def _stages() -> dict[str, float]:
    return dict.fromkeys(STAGES, 0.0)


@dataclass
class RunProgress:
    """The run's totals so far, across epochs and attempts: seconds per stage, samples,
    steps, training time, the epochs' rows, the first losses, the wall time of earlier
    attempts and, for a run resumed in mid-epoch, that epoch's totals.

    Where the model is (step, epoch, position in the epoch) is the TrainState's; this is
    what the run has measured on the way there."""

    started: float = 0.0
    """This attempt's clock start (a perf_counter reading): its wall time counts from it."""
    attempt: int = 1
    stages: dict[str, float] = field(default_factory=_stages)
    samples: int = 0
    steps: int = 0
    train_time: float = 0.0
    epochs: list[dict[str, Any]] = field(default_factory=list)
    first_losses: list[float] = field(default_factory=list)
    wall_before: float = 0.0
    """A resumed run: the wall time its earlier attempts kept (up to the checkpoint)."""
    resumed_epoch: EpochProgress | None = None
    """A run resumed in mid-epoch: that epoch's totals, taken by the epoch that goes on."""
    stop_rule: dict[str, Any] = field(default_factory=dict)
    """The stop rule's running figures (train.target: evaluations so far, the best
    figure and when): saved with a checkpoint like the rest."""
    step_records: list[dict[str, Any]] = field(default_factory=list)
    """Batch size and stage times of every step (the steady-state figures). Not saved:
    a resume reads them back from ``metrics.jsonl``."""

    def add_steps(self, records: list[dict[str, Any]]) -> None:
        """Step records as the loop resolves them (see ``train_epoch``)."""
        self.step_records.extend(
            {"batch_size": r["batch_size"], "stages": r["stages"]} for r in records
        )
        for r in records:
            if len(self.first_losses) < FIRST_LOSSES and r["loss"] is not None:
                self.first_losses.append(r["loss"])

    def add_epoch(self, res: EpochResult) -> None:
        """An epoch's stage seconds, samples, steps and time into the run's totals."""
        for k, v in res.stage_s.items():
            self.stages[k] += v
        self.samples += res.samples
        self.steps += res.steps
        self.train_time += res.duration_s

    def add_stage(self, name: str, seconds: float) -> None:
        """``seconds`` more of stage ``name``."""
        self.stages[name] += seconds

    def take_resumed_epoch(self) -> EpochProgress | None:
        """The resumed epoch's totals, once: only the first epoch of an attempt has them."""
        epoch, self.resumed_epoch = self.resumed_epoch, None
        return epoch

    def wall_s(self, now: float) -> float:
        """The run's wall time at ``now`` (a perf_counter reading), earlier attempts too."""
        return self.wall_before + now - self.started

    def state_dict(
        self, *, at: float | None = None, epoch: EpochProgress | None = None
    ) -> dict[str, Any]:
        """Plain data for a checkpoint taken ``at`` (a perf_counter reading; now if None),
        with ``epoch``, the totals of the epoch under way (None between epochs)."""
        at = time.perf_counter() if at is None else at
        return {
            "attempt": self.attempt,
            "stages": {k: v for k, v in self.stages.items() if k != "other"},
            "samples": self.samples,
            "steps": self.steps,
            "train_time": self.train_time,
            "epochs": list(self.epochs),
            "first_losses": list(self.first_losses),
            "epoch_progress": epoch.to_dict() if epoch is not None else None,
            "stop_rule": dict(self.stop_rule),
            "wall_s": self.wall_s(at),  # up to this checkpoint
        }

    def load_state_dict(
        self,
        sd: dict[str, Any],
        *,
        written_s: float = 0.0,
        step_records: list[dict[str, Any]] | None = None,
    ) -> None:
        """Go on from a :meth:`state_dict`: its stage seconds add to this attempt's own so
        far (setup, compile), the rest is taken as it was. ``written_s``: the checkpoint's
        own write time, measured after it was written (its ``metrics.jsonl`` line);
        ``step_records``: the steps up to the checkpoint, from ``metrics.jsonl``."""
        for k, v in (sd.get("stages") or {}).items():
            if k in self.stages:
                self.stages[k] += v
        self.stages["checkpoint"] += written_s
        self.wall_before = float(sd.get("wall_s") or 0.0) + written_s
        self.samples, self.steps = sd.get("samples", 0), sd.get("steps", 0)
        self.train_time = sd.get("train_time", 0.0)
        self.epochs = list(sd.get("epochs") or [])
        self.first_losses = list(sd.get("first_losses") or [])
        self.stop_rule.clear()  # in place: the stop rule holds this very dict
        self.stop_rule.update(sd.get("stop_rule") or {})
        saved = sd.get("epoch_progress")
        self.resumed_epoch = EpochProgress.from_dict(saved) if saved else None
        self.step_records = list(step_records or [])


__all__ = [
    "FIRST_LOSSES",
    "TRAIN_STAGES",
    "EpochProgress",
    "EpochResult",
    "RunProgress",
]
