"""What a run is made of, as typed values: the :class:`RunContext` it starts from, the
:class:`RunPlace` its results go to, and the :class:`Parts` its setup builds
(:func:`trainscope.train.setup.build_parts`) and the :class:`~trainscope.train.trainer.Trainer`
trains with. Nothing here is created by calling methods in some order: each value is
whole when it exists."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from trainscope.config import RunConfig
from trainscope.data.loaders import BatchLoader
from trainscope.profiling.comm_probe import CommProbe
from trainscope.profiling.timer import ProgressTimer, StageTimer
from trainscope.records import RunWriter
from trainscope.runtime.dist import DistInfo
from trainscope.strategies.base import Strategy
from trainscope.tracking import Sinks
from trainscope.train.checkpointer import Checkpointer
from trainscope.train.console import RunConsole
from trainscope.train.fault_injection import Fault
from trainscope.train.progress import RunProgress
from trainscope.train.record import RunSummary, SetupFacts
from trainscope.train.state import TrainState
from trainscope.train.target import StepEvaluations
from trainscope.workloads.base import Workload


@dataclass
class RunContext:
    """What a run is made of before it trains: checked, built, and shared by its phases."""

    cfg: RunConfig
    device: torch.device
    info: DistInfo
    t_start: float
    """The run's clock origin (a perf_counter reading): every ``t`` counts from it."""
    precision: Any
    strategy: Strategy
    sinks: Sinks
    console: RunConsole
    origin: float | None = None
    """Where the run's time axis starts (a perf_counter reading): ``t_start`` for a first
    attempt; for a resumed one the first attempt's start, so that every attempt's ``t``
    lies on one axis (the gap between them shows)."""
    attempt: int = 1
    """1, or the how-manieth attempt at this run a resume is."""
    previous: dict[str, Any] | None = None
    """A resumed run: this rank's summary as the previous attempt left it."""
    restarted: bool = False
    """Restarted by torchrun after a rank failed (resume from a checkpoint if any)."""
    cpu: Any = None
    """The run's :class:`~trainscope.runtime.threads.CpuMeter` (threads, cores, load)."""
    stop_vote: Any = None
    """A run a scheduler may preempt: its :class:`~trainscope.train.preemption.StopVote`,
    asked at every log interval (None: a preemption signal ends the run at once)."""

    def __post_init__(self) -> None:
        if self.origin is None:
            self.origin = self.t_start


@dataclass
class RunPlace:
    """Where a run's results go, made before its setup: the context, the run directory's
    writer, summary.json's owner and the run's progress (what a checkpoint saves)."""

    ctx: RunContext
    writer: RunWriter
    record: RunSummary
    """summary.json's owner: the phases contribute their sections."""
    progress: RunProgress
    watch: Any = None
    """Where this rank is, for a multi-process stall watchdog (None: one process)."""

    @property
    def cfg(self) -> RunConfig:
        return self.ctx.cfg

    def note(self, text: str) -> None:
        """A note for the record and the console."""
        self.record.note(text)
        self.ctx.console.note(text)


@dataclass
class Loaders:
    """The run's data loaders and what they were made with."""

    train: BatchLoader
    val: BatchLoader | None
    """None: no validation (no data for it, or a data-only run)."""
    args: dict[str, Any]
    """What every loader of the run takes (device, workers, collate): the test loader's."""
    local_batch: int
    """This rank's share of the batch."""
    test: BatchLoader | None = None
    """Made at the first test evaluation."""


@dataclass
class Parts:
    """Everything a run's setup builds, whole: the Trainer's and the resume's inputs."""

    workload: Workload
    state: TrainState
    composed: dict[str, Any]
    """What compose applied (precision, checkpointing, compile, strategy): the record's."""
    lr: float
    """The learning rate the optimizer got (``--scale-lr`` applied)."""
    num_parameters: int
    loaders: Loaders
    total_steps: int
    """Optimizer steps over every epoch, as the schedule counts them."""
    step_fn: Callable[..., Any]
    """One step (its memory probe around it), or the data-only step."""
    comm_probe: CommProbe
    timer: StageTimer
    watch_timer: ProgressTimer | None
    """The timer that tells the stall watchdog each step (multi-process runs)."""
    fault: Fault | None
    checkpointer: Checkpointer
    stop_rule: StepEvaluations
    reduce_losses: Callable[..., Any]
    fingerprint: dict[str, Any] | None
    """The training data's fingerprint, when a checkpoint or a resume needs it."""
    evaluate: Callable[[str], dict[str, Any]]
    """One timed evaluation of the ``val`` or ``test`` split."""
    facts: SetupFacts
    """What the record says of the run as set up."""
    compile_graphs: int | None = None
    """Graphs ``--compile`` captured (None: not compiled, or not known)."""
