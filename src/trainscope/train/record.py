"""A run's ``summary.json`` has one owner: :class:`RunSummary`.

The modules of a run contribute typed sections through its methods: the run's facts
(:mod:`trainscope.train.run`), the workload as built and the results (the
:class:`~trainscope.train.trainer.Trainer`), the attempts (:mod:`trainscope.train.resume`),
the ranks' figures (:mod:`trainscope.train.ranks`), a stall's verdict (the watchdog's
thread). Only :meth:`RunSummary.write` writes the file. What it writes is what
:data:`~trainscope.records.record_specs.SUMMARY` reads: the same keys, in the same order,
as the mutable dict it replaces (``schema_version`` 1, unchanged).

Every method takes the summary's lock, so that the stall watchdog, which writes from its
own thread while the main thread may be stuck in a collective, always writes a whole one.
"""

from __future__ import annotations

import threading
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Any

from trainscope.records import RunWriter
from trainscope.train.failures import machine_cause


def now_utc() -> str:
    """The time now, as the summary's timestamps are written (UTC, to the second)."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


@dataclass
class RunFacts:
    """What the run is, known before it trains (:mod:`trainscope.train.run`)."""

    workload: str
    device: str
    device_name: str | None
    precision: str
    batch_size: int
    loader: str
    num_workers: int | str
    """As configured (``auto`` too) until the loaders are made, then the count used."""
    data_only: bool
    started_at: str | None
    strategy: str
    world_size: int
    rank: int
    clock: dict[str, Any]
    process: dict[str, Any]
    """Start-up seconds; ``time_s``, this process's life, once the run has finished."""
    scheduler: dict[str, Any] | None = None
    """The scheduler that placed this rank (SLURM, a PyTorchJob, torchrun): its job id,
    nodes and tasks; None when the run was started by hand."""


@dataclass
class SetupFacts:
    """The workload, model and loaders as built (``Trainer.setup``)."""

    model: str
    num_parameters: int
    workload_description: str | None
    workload_info: dict[str, Any] | None
    task: str | None
    """Which figures the evaluations hold (reports read it)."""
    timing_mode: str
    train_samples: int
    local_batch_size: int
    lr: float
    parallel: dict[str, Any]
    gradients: dict[str, Any]
    """Per-tensor gradient bytes: what the strategies study's predictions start from."""
    optimizer: dict[str, Any] | None = None
    """Where the optimizer is two (muon: Muon's and AdamW's shares of the parameters)."""


@dataclass
class Results:
    """Times, counts and evaluations of the finished run (``Trainer.finish``)."""

    wall_time_s: float
    train_time_s: float
    stages_s: dict[str, float]
    steps: int
    samples: int
    samples_per_s: float | None
    epochs: list[dict[str, Any]]
    first_losses: list[float]
    skipped_steps: int
    test_loss: float | None
    test_accuracy: float | None
    test_metrics: dict[str, Any] | None
    per_class_accuracy: dict[str, float] | None
    peak_rss_bytes: int | None
    comm: dict[str, Any] | None
    steady_state: dict[str, Any] | None


@dataclass
class MemoryFigures:
    """The peak memory and what the probe step held (``Trainer.finish``)."""

    peak_memory_bytes: int | None
    peak_memory_kind: str
    memory: dict[str, Any]
    compile: dict[str, Any] | None = None
    counted: bool = True
    """False for a data-only run: no model step, no ``compile`` entry."""

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "peak_memory_bytes": self.peak_memory_bytes,
            "peak_memory_kind": self.peak_memory_kind,
        }
        if self.counted:
            out["compile"] = self.compile
        return {**out, "memory": self.memory}


@dataclass
class Throughput:
    """tokens/s and model FLOPs utilisation, where the workload states its sizes."""

    tokens_per_s: float | None = None
    flops_per_sample: float | None = None
    """None: the workload states none (and there is no MFU either)."""
    peak_flops_per_device: float | None = None
    mfu: float | None = None
    mfu_note: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.tokens_per_s is not None:
            out["tokens_per_s"] = self.tokens_per_s
        if self.flops_per_sample:
            out["flops_per_sample"] = self.flops_per_sample
            out["peak_flops_per_device"] = self.peak_flops_per_device
            out["mfu"] = self.mfu
        if self.mfu_note is not None:
            out["mfu_note"] = self.mfu_note
        return out


@dataclass
class RankFigures:
    """Every rank's figures, gathered on rank 0 (:func:`~trainscope.train.ranks.gather_ranks`)."""

    ranks: list[dict[str, Any]]
    stage_spread: dict[str, dict[str, float]]
    peak_memory_bytes_max_rank: int | None
    node_cpu: dict[str, Any] | None = None
    """The CPU verdict counting every rank on rank 0's node (replaces its own ``cpu``)."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "ranks": self.ranks,
            "stage_spread": self.stage_spread,
            "peak_memory_bytes_max_rank": self.peak_memory_bytes_max_rank,
        }


@dataclass
class Attempts:
    """A resumed run's attempts: the earlier ones and this one (filled in as it goes)."""

    earlier: list[dict[str, Any]]
    current: dict[str, Any] = field(default_factory=dict)

    def to_list(self) -> list[dict[str, Any]]:
        return [*(dict(a) for a in self.earlier), dict(self.current)]


class RunSummary:
    """summary.json as typed sections, written only by :meth:`write`.

    The status, the error and the run's facts come first; every other section follows in
    the order it was first contributed (as a dict's keys did): a run that failed early
    has its ``system`` before its ``cpu``, one that finished the other way round."""

    def __init__(self, writer: RunWriter, facts: RunFacts) -> None:
        self._writer = writer
        self._lock = threading.Lock()
        self._order: dict[str, None] = {}  # sections by when they were first set
        self.status = "running"
        self.error: str | None = None
        self.facts = facts
        self.attempts: Attempts | None = None
        self.notes: list[str] = []
        self.num_workers_auto: dict[str, Any] | None = None
        self.setup: SetupFacts | None = None
        self.results: Results | None = None
        self.memory: MemoryFigures | None = None
        self.throughput: Throughput | None = None
        self.cpu: dict[str, Any] | None = None
        self.ranks: RankFigures | None = None
        self.after_wall_s: dict[str, float] = {}
        self.after_wall_not_timed: str | None = None
        self.weights: dict[str, Any] | None = None
        self.system: dict[str, Any] | None = None
        self.finished_at: str | None = None
        self.tracking: dict[str, Any] | None = None
        self.preemption: dict[str, Any] | None = None
        self.target: dict[str, Any] | None = None

    def _put(self, section: str, **values: Any) -> None:
        with self._lock:
            for name, value in values.items():
                setattr(self, name, value)
            self._order.setdefault(section, None)

    # --- what the run's modules contribute -----------------------------------------------

    def note(self, text: str) -> None:
        """One line for the reader (``notes``)."""
        self._put("notes", notes=[*self.notes, text])

    def set_num_workers(self, workers: int, auto: dict[str, Any] | None = None) -> None:
        """The DataLoader workers used, and how ``auto`` chose them (if it did)."""
        with self._lock:
            self.facts.num_workers = workers
        if auto is not None:
            self._put("num_workers_auto", num_workers_auto=auto)

    def begin_attempt(self, earlier: list[dict[str, Any]], current: dict[str, Any]) -> None:
        """A resumed run: the attempts before this one, and this one as it starts."""
        self._put("attempts", attempts=Attempts(list(earlier), dict(current)))

    def resumed(self, earlier: list[dict[str, Any]], **position: Any) -> None:
        """Where this attempt went on from (once the checkpoint is loaded), and the earlier
        attempts as every rank's previous record tells how the last one ended."""
        current = self.attempts.current if self.attempts is not None else {}
        self._put("attempts", attempts=Attempts(list(earlier), {**current, **position}))

    def set_setup(self, setup: SetupFacts) -> None:
        self._put("setup", setup=setup)

    def set_results(self, results: Results, own_wall_s: float) -> None:
        """The run's results, and this process's life: its start-up and ``own_wall_s``,
        its own part of the wall time (a resumed run's earlier attempts left out)."""
        with self._lock:
            time_s = self.facts.process["startup_s"] + own_wall_s
            self.facts.process = {**self.facts.process, "time_s": time_s}
        self._put("results", results=results)

    def set_memory(self, memory: MemoryFigures) -> None:
        self._put("memory", memory=memory)

    def set_throughput(self, throughput: Throughput) -> None:
        self._put("throughput", throughput=throughput)

    def set_cpu(self, cpu: dict[str, Any]) -> None:
        """This rank's share of the CPU (``cpu``)."""
        self._put("cpu", cpu=cpu)

    def set_ranks(self, figures: RankFigures | None) -> None:
        """Every rank's figures (rank 0 of a multi-process run; None: nothing gathered)."""
        if figures is None:
            return
        self._put("ranks", ranks=figures)
        if figures.node_cpu is not None:
            self._put("cpu", cpu=figures.node_cpu)

    def time_after_wall(self, name: str, seconds: float, not_timed: str | None = None) -> None:
        """Seconds of work after the wall time ends (``after_wall_s``), and what follows
        it untimed (``after_wall_not_timed``)."""
        after = {**self.after_wall_s, name: seconds}
        untimed = not_timed if not_timed is not None else self.after_wall_not_timed
        self._put("after_wall", after_wall_s=after, after_wall_not_timed=untimed)

    def set_weights(self, weights: dict[str, Any]) -> None:
        self._put("weights", weights=weights)

    def set_system(self, system: dict[str, Any]) -> None:
        """The system sampler's summary."""
        self._put("system", system=system)

    def set_target(self, target: dict[str, Any]) -> None:
        """The stop rule's section (train.target): target, how the run ended, when."""
        self._put("target", target=dict(target))

    def set_tracking(self, tracking: dict[str, Any]) -> None:
        """What the tracking sinks did (and their warnings)."""
        self._put("tracking", tracking=tracking)

    # --- how it ends ---------------------------------------------------------------------

    def complete(self) -> None:
        """The run completed, unless the stall watchdog has ended it already."""
        with self._lock:
            if self.status != "failed":
                self.status = "completed"

    def fail(self, message: str) -> None:
        """The run failed; the first reason given stands (the stall watchdog may have
        said why already)."""
        with self._lock:
            if self.status != "failed":
                self.error = message
            self.status = "failed"

    def stop(self, status: str, message: str, preemption: dict[str, Any]) -> None:
        """A scheduler stopped the run (``preempted`` or ``cancelled``) at a checkpoint:
        the line that says so, and the ``preemption`` section (signal, step, checkpoint,
        and later the requeue)."""
        with self._lock:
            if self.status != "failed":  # a stall verdict given first stands
                self.status, self.error = status, message
        self._put("preemption", preemption=dict(preemption))

    def end(self) -> None:
        """The time it ended and, for a resumed run, how this attempt ended."""
        self._put("finished_at", finished_at=now_utc())
        with self._lock:
            if self.attempts is not None:
                ended = f"{self.status}: {self.error}" if self.error else self.status
                self.attempts.current.update(ended=ended, finished_at=self.finished_at)

    def stall(self, message: str) -> None:
        """The stall watchdog's verdict, from its own thread: the metrics so far and the
        summary, failed, are written now; the main thread, should it get going again,
        records the same verdict. The main thread may be stuck while holding the lock
        (in a write to a hung disk): then the summary is copied without it, and the copy
        tried again if it raced with a change."""
        finished = now_utc()
        locked = self._lock.acquire(timeout=1.0)
        try:
            for _ in range(3):
                try:
                    self._writer.flush()
                    data = {**self._dict(), "status": "failed", "error": message}
                    self._writer.write_summary({**data, "finished_at": finished})
                    break
                except (RuntimeError, ValueError, OSError):
                    time.sleep(0.1)
            self.status, self.error = "failed", message
        finally:
            if locked:
                self._lock.release()

    # --- the record ----------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """The summary as summary.json holds it (less ``schema_version``): a copy."""
        with self._lock:
            return self._dict()

    def write(self) -> None:
        """Write summary.json (atomically): the only writer of it. Metrics lines that a
        full disk refused as they were closed make a completed run a failed one (once the
        run has ended, the writer gets the summary onto a full disk all the same)."""
        with self._lock:
            lost = getattr(self._writer, "lost", None)
            if lost is not None and self.status == "completed":
                self.status = "failed"
                self.error = machine_cause(lost) or f"metrics.jsonl: {lost}"
            self._writer.write_summary(self._dict())

    def _dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"status": self.status, "error": self.error}
        out.update(asdict(self.facts))
        for section in list(self._order):
            out.update(self._section(section))
        return out

    def _section(self, name: str) -> dict[str, Any]:
        """One section's keys, as summary.json holds them."""
        if name in ("setup", "results"):
            return asdict(getattr(self, name))
        if name in ("memory", "throughput", "ranks"):
            return getattr(self, name).to_dict()
        if name == "attempts":
            return {"attempts": self.attempts.to_list()}  # type: ignore[union-attr]
        if name == "notes":
            return {"notes": list(self.notes)}
        if name == "after_wall":
            out: dict[str, Any] = {"after_wall_s": dict(self.after_wall_s)}
            if self.after_wall_not_timed is not None:
                out["after_wall_not_timed"] = self.after_wall_not_timed
            return out
        return {name: getattr(self, name)}  # cpu, weights, system, finished_at, ...


__all__ = [
    "Attempts",
    "MemoryFigures",
    "RankFigures",
    "Results",
    "RunFacts",
    "RunSummary",
    "SetupFacts",
    "Throughput",
    "now_utc",
]
