"""A run's ``summary.json`` read through typed fields (torch-free).

The schema (:data:`~trainscope.records.record_specs.SUMMARY`) checks what a record may
hold; :class:`SummaryView` is how readers ask for it. Every field a record may lack (an
old record, a run that ended before writing it, a script's run) reads as its empty value:
``None`` for a value, ``{}`` for a section, ``[]`` for a list, ``""`` for text, and a value
of the wrong type reads as missing. Readers therefore ask ``view.world_size`` instead of
``summary.get("world_size")`` followed by their own ``isinstance`` check, and the key's
spelling and type live here once.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trainscope.util.load import finite_number


def _count(value: Any) -> int | None:
    """An int (bool is not one), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


class SummaryView:
    """One summary.json's fields, typed; ``raw`` is the dictionary as read."""

    def __init__(self, summary: Mapping[str, Any] | None) -> None:
        self.raw: Mapping[str, Any] = summary if isinstance(summary, Mapping) else {}

    # ---------------------------------------------------------------- kinds of field

    def text(self, key: str) -> str:
        """A text field ("" when missing or not text)."""
        value = self.raw.get(key)
        return value if isinstance(value, str) else ""

    def number(self, key: str) -> float | None:
        """A finite number field (None when missing, null or not a number)."""
        return finite_number(self.raw.get(key))

    def count(self, key: str) -> int | None:
        """A whole-number field (None when missing or not one)."""
        return _count(self.raw.get(key))

    def section(self, key: str) -> dict[str, Any]:
        """A section (an object) of the record ({} when missing or null)."""
        value = self.raw.get(key)
        return dict(value) if isinstance(value, Mapping) else {}

    def rows(self, key: str) -> list[Any]:
        """A list field ([] when missing or null)."""
        value = self.raw.get(key)
        return list(value) if isinstance(value, list) else []

    # ---------------------------------------------------------------- the run

    @property
    def status(self) -> str:
        """completed, failed, stopped, running, ... ("" for a record without one)."""
        return self.text("status")

    @property
    def error(self) -> str:
        """The one-line error of a run that failed ("" otherwise)."""
        return self.text("error")

    @property
    def device(self) -> str:
        """``cpu``, ``cuda``, ``cuda:0`` ("" when not recorded)."""
        return self.text("device")

    @property
    def on_gpu(self) -> bool:
        """The run's device was a CUDA device."""
        return self.device.startswith("cuda")

    @property
    def strategy(self) -> str | None:
        """The parallel strategy's name (None: not recorded, e.g. a script's run)."""
        return self.text("strategy") or None

    @property
    def world_size(self) -> int | None:
        """Processes in the run (None: not recorded)."""
        return self.count("world_size")

    @property
    def steps(self) -> int | None:
        """Optimizer steps taken."""
        return self.count("steps")

    @property
    def local_batch_size(self) -> int | None:
        """One rank's batch."""
        return self.count("local_batch_size")

    @property
    def data_only(self) -> bool:
        """The run iterated its training batches only (no model)."""
        return self.raw.get("data_only") is True

    @property
    def samples_per_s(self) -> float | None:
        """Throughput: the run's samples (all ranks) over its ``train_time_s``."""
        return self.number("samples_per_s")

    @property
    def peak_memory_bytes(self) -> int | None:
        """The run's peak memory: CUDA's allocator peak or the process's peak RSS
        (``peak_memory_kind`` says which); ``peak_memory_bytes_max_rank`` is the largest
        rank's."""
        return self.count("peak_memory_bytes")

    # ---------------------------------------------------------------- time

    @property
    def wall_time_s(self) -> float | None:
        """From the run's start to the end of its last evaluation."""
        return self.number("wall_time_s")

    @property
    def train_time_s(self) -> float | None:
        """The epochs' training time (what ``samples_per_s`` divides by): no setup,
        compilation or evaluation."""
        return self.number("train_time_s")

    @property
    def stages_s(self) -> dict[str, float]:
        """Stage -> seconds of the wall time (the stages partition it); entries that are
        not numbers are left out."""
        stages = self.section("stages_s")
        return {k: float(v) for k, v in stages.items() if finite_number(v) is not None}

    @property
    def epochs(self) -> list[dict[str, Any]]:
        """One row per epoch (epoch, train_loss, val_loss, duration_s, ...)."""
        return [e for e in self.rows("epochs") if isinstance(e, dict)]

    @property
    def steady_state(self) -> dict[str, Any]:
        """The steady state's step-time statistics ({} without one)."""
        return self.section("steady_state")

    @property
    def steady_step_s(self) -> float | None:
        """The steady state's median step time."""
        step = self.steady_state.get("step_s")
        return finite_number(step.get("median")) if isinstance(step, Mapping) else None

    # ---------------------------------------------------------------- sections

    @property
    def cpu(self) -> dict[str, Any]:
        """The CPU's share, threads and load while the run ran."""
        return self.section("cpu")

    @property
    def memory(self) -> dict[str, Any]:
        """Where memory went (parameters, gradients, optimizer states, activations)."""
        return self.section("memory")

    @property
    def process(self) -> dict[str, Any]:
        """The process around the run: its start-up and time (``startup_s``, ``time_s``)
        and how many runs it ran before this one (``runs_before``)."""
        return self.section("process")

    @property
    def process_time_s(self) -> float | None:
        """The process's own time: its start-up, the run and what came after it."""
        return finite_number(self.process.get("time_s"))

    @property
    def comm(self) -> dict[str, Any]:
        """What the run communicated (its collectives, the all-reduce hook in flight, a
        pipeline's waits)."""
        return self.section("comm")

    @property
    def target(self) -> dict[str, Any]:
        """The stop rule's outcome: whether the target was met, when, or the best reached."""
        return self.section("target")

    @property
    def source(self) -> dict[str, Any]:
        """What ran: trainscope's workload, or the user's script and its argv."""
        return self.section("source")

    @property
    def script(self) -> dict[str, Any]:
        """A script run's own facts (what was injected, what the script did)."""
        return self.section("script")

    @property
    def ranks(self) -> list[dict[str, Any]]:
        """One row per rank of a multi-process run."""
        return [r for r in self.rows("ranks") if isinstance(r, dict)]


__all__ = ["SummaryView"]
