"""Stage timing of training steps.

A step is a chain of marks: ``start_step()`` then ``mark("data_wait")``, ``mark("h2d")``,
... each mark closing the stage that began at the previous one. Two implementations:

- :class:`HostStageTimer` reads ``time.perf_counter`` at each mark. Right on CPU, where the
  work is done when the call returns. In ``exact`` mode on CUDA it synchronizes the device
  before each reading, which makes host time true at the price of serialising the GPU.
- :class:`CudaEventStageTimer` records a CUDA event at each mark and reads the elapsed
  times later, once the events have completed: no per-step ``synchronize()``. The
  intervals partition the GPU stream's timeline, so ``data_wait`` is the time the GPU sat
  idle waiting for the next batch (zero when loading hid behind the previous step).

Both hand back, per finished step, a mapping stage -> seconds via :meth:`resolve`.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import Any

import torch

StepTimes = dict[str, float]


class HostStageTimer:
    """Stage times from a host clock (optionally synchronizing CUDA before each reading)."""

    kind = "perf_counter"

    def __init__(
        self,
        clock: Callable[[], float] = time.perf_counter,
        sync: Callable[[], None] | None = None,
    ) -> None:
        self._clock = clock
        self._sync = sync
        self._prev = 0.0
        self._current: StepTimes = {}
        self._done: list[StepTimes] = []
        if sync is not None:
            self.kind = "cuda_sync"

    def _now(self) -> float:
        if self._sync is not None:
            self._sync()
        return self._clock()

    def start_step(self) -> None:
        """Begin a step: the next mark measures from here."""
        self._current = {}
        self._prev = self._now()

    def mark(self, stage: str) -> None:
        """Close ``stage``: it ran from the previous mark until now."""
        now = self._now()
        self._current[stage] = self._current.get(stage, 0.0) + (now - self._prev)
        self._prev = now

    def mark_split(self, parts: dict[str, float], rest: str) -> None:
        """Close the stages in ``parts`` at once: the time since the previous mark is
        theirs (seconds measured inside it, on this clock) and ``rest``'s, the remainder."""
        now = self._now()
        elapsed = now - self._prev
        for stage, seconds in parts.items():
            self._current[stage] = self._current.get(stage, 0.0) + seconds
        self._current[rest] = self._current.get(rest, 0.0) + elapsed - sum(parts.values())
        self._prev = now

    def end_step(self) -> None:
        """Finish the step; its times become available to :meth:`resolve`."""
        self._done.append(self._current)
        self._current = {}

    def resolve(self, block: bool = False) -> list[StepTimes]:
        """Stage times of every step finished since the last call, oldest first."""
        out, self._done = self._done, []
        return out


class CudaEventStageTimer:
    """Stage times from CUDA events, read back lazily (no per-step synchronize)."""

    kind = "cuda_events"

    def __init__(self, device: torch.device) -> None:
        self._stream = torch.cuda.current_stream(device)
        self._marks: list[tuple[str, torch.cuda.Event]] = []
        self._pending: deque[list[tuple[str, torch.cuda.Event]]] = deque()

    def _record(self) -> torch.cuda.Event:
        ev = torch.cuda.Event(enable_timing=True)
        ev.record(self._stream)
        return ev

    def start_step(self) -> None:
        """Record the step's first event."""
        self._marks = [("", self._record())]

    def mark(self, stage: str) -> None:
        """Record the event that closes ``stage``."""
        self._marks.append((stage, self._record()))

    def mark_split(self, parts: dict[str, float], rest: str) -> None:
        """Not on CUDA events: the parts would be host seconds inside a GPU interval
        (a strategy that times its own parts runs under ``--timing exact``)."""
        raise NotImplementedError("mark_split needs a host stage timer (--timing exact)")

    def end_step(self) -> None:
        """Queue the step's events for later reading."""
        self._pending.append(self._marks)
        self._marks = []

    def resolve(self, block: bool = False) -> list[StepTimes]:
        """Read every completed step; with ``block`` wait for the last queued one first."""
        if block and self._pending:
            self._pending[-1][-1][1].synchronize()
        out: list[StepTimes] = []
        while self._pending:
            marks = self._pending[0]
            # Events complete in stream order: if the last one of this step is not done,
            # nothing after it is either.
            if not marks[-1][1].query():
                break
            self._pending.popleft()
            times: StepTimes = {}
            for (_, start), (stage, end) in zip(marks, marks[1:]):
                times[stage] = times.get(stage, 0.0) + start.elapsed_time(end) / 1000.0
            out.append(times)
        return out


class ProgressTimer:
    """A stage timer that also tells a stall watchdog where this rank is.

    Every stage boundary advances the :class:`~trainscope.runtime.watchdog.Progress` (a
    few attribute writes): a step's start as entering ``data_wait``, each mark as leaving
    the stage it closes. All ranks pass the same boundaries, so their positions compare.
    """

    def __init__(self, timer: HostStageTimer | CudaEventStageTimer, progress: Any) -> None:
        self.timer = timer
        self.kind = timer.kind
        self.progress = progress
        self.step = 0

    def start_step(self) -> None:
        """Begin a step (see the wrapped timer)."""
        self.step += 1
        self.progress.advance(self.step, "data_wait")
        self.timer.start_step()

    def mark(self, stage: str) -> None:
        """Close ``stage`` (see the wrapped timer)."""
        self.timer.mark(stage)
        self.progress.advance(self.step, f"after {stage}")

    def mark_split(self, parts: dict[str, float], rest: str) -> None:
        """Close several stages at once (see the wrapped timer)."""
        self.timer.mark_split(parts, rest)
        self.progress.advance(self.step, f"after {rest}")

    def end_step(self) -> None:
        """Finish the step (see the wrapped timer)."""
        self.timer.end_step()

    def resolve(self, block: bool = False) -> list[StepTimes]:
        """Stage times of the finished steps (see the wrapped timer)."""
        return self.timer.resolve(block=block)


StageTimer = HostStageTimer | CudaEventStageTimer | ProgressTimer


def make_stage_timer(device: torch.device, mode: str) -> StageTimer:
    """The right timer for a device: perf_counter on CPU; events or synced host time on CUDA."""
    if device.type == "cuda":
        if mode == "exact":
            return HostStageTimer(sync=lambda: torch.cuda.synchronize(device))
        return CudaEventStageTimer(device)
    return HostStageTimer()


def device_sync(device: torch.device) -> None:
    """Wait for the device (a no-op on CPU); used at boundaries that are timed on the host."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
