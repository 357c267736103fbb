"""The stage clock of a script run: where the time of code trainscope did not write goes.

The hooks (:mod:`trainscope.script.hooks`) tell the clock when a stage begins and ends
(a DataLoader blocking, the outermost module call, ``backward``, an optimizer's ``step``
or ``zero_grad``, an evaluation forward, a save) and when a training step ends (the
leading optimizer's ``step`` returned). The clock turns those boundaries into intervals
that partition the wall time:

- before the first stage: ``setup``;
- inside a stage: that stage (one stage at a time, see :meth:`StageClock.enter` for nesting);
- between two stages: ``other`` — the script's own code (a ``get_batch()`` that is not a
  DataLoader, copies to the device, a functional loss, logging) — except between two
  evaluation stages, where it is ``evaluation`` (the evaluation loop's own batches).

Every boundary is a *token* from a :class:`Ticks` source: a ``perf_counter`` reading on
the CPU; on CUDA a host reading and an event, resolved later without a per-step
synchronize (:mod:`trainscope.script.ticks`). Durations are computed when
:meth:`StageClock.resolve` is called (every log interval and at the end), so no boundary
waits for the device.

Torch-free: the hooks hand in losses as opaque objects and read them back themselves.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

STEP_STAGES = ("data_wait", "forward", "backward", "optimizer")
"""The stages of a training step, in the order a step usually runs them."""
BETWEEN_STAGES = ("evaluation", "checkpoint")
"""Stages that happen between training steps: in the run's totals, kept out of the
step's own time (a step record lists them apart, as ``between``)."""
SCRIPT_STAGES = ("setup", *STEP_STAGES, "checkpoint", "evaluation")
"""Every stage a script run measures (``other`` is the wall time's rest)."""
_OPAQUE = ("data_wait", "forward", "backward", "evaluation", "checkpoint")
"""Stages inside which nothing else is timed apart (see :meth:`StageClock.enter`)."""


class Ticks(Protocol):
    """Where boundary tokens come from, and how two of them become seconds."""

    def tick(self) -> Any:
        """A token for now."""
        ...

    def host(self, token: Any) -> float:
        """The token's host time (a perf_counter reading)."""
        ...

    def seconds(self, start: Any, end: Any) -> float:
        """Seconds from ``start`` to ``end`` (both resolvable: see :meth:`ready`)."""
        ...

    def ready(self, token: Any, block: bool) -> bool:
        """Whether ``token`` can be read now (``block``: wait until it can)."""
        ...


class HostTicks:
    """Tokens that are ``time.perf_counter`` readings: right on the CPU, where the work
    is done when the call returns."""

    kind = "perf_counter"
    deferred = False
    """Every token is readable at once: intervals are counted as they close (no queue)."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self._clock = clock

    def tick(self) -> float:
        return self._clock()

    def host(self, token: float) -> float:
        return token

    def seconds(self, start: float, end: float) -> float:
        return end - start

    def ready(self, token: float, block: bool) -> bool:
        return True


@dataclass
class _Step:
    """A training step under way: its first boundary, samples and losses so far."""

    start: Any
    samples: int = 0
    losses: list[Any] = field(default_factory=list)
    micro: int = 0
    """Forward calls of the training model in it (several: gradient accumulation)."""


@dataclass
class _Interval:
    label: str
    start: Any
    end: Any
    step: int
    """The training step the interval belongs to (0-based; the steps taken so far)."""


@dataclass
class _Boundary:
    """A finished step, waiting for its intervals to resolve."""

    index: int
    step: _Step
    end: Any
    optimizers: Any
    """Steps taken so far by each optimizer (the hooks' own value, handed back as is)."""


class StageClock:
    """Stage seconds and step records from the hooks' boundaries (see module docs)."""

    def __init__(self, ticks: Ticks, origin: float) -> None:
        self.ticks = ticks
        self.origin = origin
        """The run's clock origin (a perf_counter reading): every ``t`` counts from it."""
        self.totals: dict[str, float] = dict.fromkeys(SCRIPT_STAGES, 0.0)
        self._stack: list[str] = []
        self._last: Any = None  # the last boundary's token (None: setup still running)
        self._closed: str | None = None  # the stage that closed last (for evaluation gaps)
        self._step: _Step | None = None
        self.steps_done = 0
        self._pending: list[_Interval | _Boundary] = []
        self._ready: list[dict[str, Any]] = []  # records of steps counted as they ended
        self._open: dict[str, float] = {}  # the resolved step's stage seconds so far
        self._between: dict[str, float] = {}
        self.setup_end_s: float | None = None
        self.on_leave: Callable[[str], None] | None = None
        """Called with each stage as it ends (the memory probe's CUDA peaks per stage)."""

    # --- boundaries ----------------------------------------------------------------------

    @property
    def current(self) -> str | None:
        """The stage being timed now (None: the script's own code)."""
        return self._stack[-1] if self._stack else None

    def holds(self, stage: str) -> bool:
        """Whether ``stage`` is open now, at any depth."""
        return stage in self._stack

    def enter(self, stage: str) -> bool:
        """``stage`` begins. Returns False when it is not timed apart, because another
        stage holds it: inside data wait, forward, backward, an evaluation or a save
        everything is that stage's (a forward inside backward is activation
        checkpointing's recompute, backward's cost). Only an optimizer step takes nested
        stages apart: Lightning and LBFGS run forward and backward in ``step(closure)``,
        and the closure's own code is entered as ``other`` (the script's, not the
        optimizer's), inside which forward and backward are again their own.
        Call :meth:`leave` only after an ``enter`` that returned True."""
        top = self.current
        if top is not None and (top in _OPAQUE or top == stage):
            return False
        now = self.ticks.tick()
        if self._last is None:  # the first stage: setup ends here
            self._add("setup", self.ticks.host(now) - self.origin)
            self.setup_end_s = self.ticks.host(now) - self.origin
            self._step = _Step(now)
        elif top is not None:
            self._interval(top, now)
        else:
            gap = "evaluation" if stage == self._closed == "evaluation" else "other"
            self._interval(gap, now)
        self._last = now
        self._stack.append(stage)
        return True

    def leave(self, stage: str) -> None:
        """``stage`` ends (after an :meth:`enter` of it that returned True). A stage left
        out of order (an exception unwound past inner ones) closes those too."""
        if stage not in self._stack:
            return
        now = self.ticks.tick()
        self._interval(self._stack[-1], now)
        self._last = now
        while self._stack and self._stack.pop() != stage:
            pass
        self._closed = stage
        if self.on_leave is not None:
            self.on_leave(stage)

    def step_end(self, optimizers: Any) -> int:
        """The leading optimizer's step returned: the training step ends at the last
        boundary. ``optimizers``: steps taken so far by each optimizer, in whatever form
        the caller reads back from the record. Returns the number of steps done."""
        if self._step is None or self._last is None:
            return self.steps_done
        self.steps_done += 1
        boundary = _Boundary(self.steps_done, self._step, self._last, optimizers)
        if self._pending or getattr(self.ticks, "deferred", True):
            self._pending.append(boundary)
        else:  # its intervals are all counted (see _interval): its record is ready
            self._ready.append(self._record(boundary))
        self._step = _Step(self._last)
        return self.steps_done

    def add_samples(self, n: int) -> None:
        """Samples the current step trains on (a training batch's first dimension)."""
        if self._step is not None:
            self._step.samples += n

    def add_loss(self, loss: Any) -> None:
        """A value the current step passed to backward (read back later, in a batch)."""
        if self._step is not None:
            self._step.losses.append(loss)

    def add_micro(self) -> int:
        """One more forward of the training model in this step; returns how many so far."""
        if self._step is None:
            return 0
        self._step.micro += 1
        return self._step.micro

    @property
    def step_samples(self) -> int:
        """Samples counted in the step under way so far."""
        return self._step.samples if self._step is not None else 0

    # --- resolution ----------------------------------------------------------------------

    def _interval(self, label: str, end: Any) -> None:
        # Tokens that are readable now (perf_counter) are counted now: the queue is for
        # CUDA events, and costs a step of a few microseconds more in hook calls.
        if self._pending or getattr(self.ticks, "deferred", True):
            self._pending.append(_Interval(label, self._last, end, self.steps_done))
        else:
            self._count(label, self.ticks.seconds(self._last, end))

    def _count(self, label: str, seconds: float) -> None:
        self._add(label, seconds)
        into = self._between if label in BETWEEN_STAGES else self._open
        into[label] = into.get(label, 0.0) + seconds

    def _add(self, label: str, seconds: float) -> None:
        if label != "other":
            self.totals[label] = self.totals.get(label, 0.0) + seconds

    def resolve(self, block: bool = False) -> list[dict[str, Any]]:
        """Turn boundaries into seconds, oldest first, as far as their tokens can be read
        (``block``: all of them); returns the records of the steps that finished.

        A step record: ``{"step", "t", "batch_size", "micro_batches", "stages",
        "between", "optimizers", "losses"}`` — ``stages`` the step's own seconds (its
        four stages and ``other``, which add up to the step's time), ``between`` the
        evaluation or checkpoint seconds that fell inside it, ``losses`` the objects given
        to :meth:`add_loss` (the hooks read them)."""
        records: list[dict[str, Any]] = []
        done = 0
        for item in self._pending:
            if not self.ticks.ready(item.end, block):
                break
            done += 1
            if isinstance(item, _Interval):
                self._count(item.label, self.ticks.seconds(item.start, item.end))
                continue
            records.append(self._record(item))
        del self._pending[:done]
        ready, self._ready = self._ready, []
        return ready + records

    def _record(self, b: _Boundary) -> dict[str, Any]:
        stages = {k: self._open.get(k, 0.0) for k in (*STEP_STAGES, "other")}
        self._open, between, self._between = {}, self._between, {}
        return {
            "step": b.index,
            "t": round(self.ticks.host(b.step.start) - self.origin, 6),
            "batch_size": b.step.samples,
            "micro_batches": b.step.micro,
            "stages": stages,
            "between": {k: v for k, v in between.items() if v},
            "optimizers": b.optimizers,
            "losses": b.step.losses,
        }

    def close(self) -> float:
        """The run ends now: every open stage is closed at one last boundary, whose host
        time (a perf_counter reading) is returned as the run's end. The wall time must
        end at that same boundary: an end read earlier (before the hooks came off, say)
        would leave the intervals longer than the wall and shrink ``other`` by the gap,
        which on a loaded machine is a scheduling slice. The seconds count in
        :attr:`totals` once resolved (the caller's last :meth:`resolve`, with ``block``)."""
        token = self.ticks.tick()
        end = self.ticks.host(token)
        if self._last is None:  # no stage at all: the whole run was setup
            self.totals["setup"] = end - self.origin
            return end
        label = self._stack[-1] if self._stack else "other"
        self._interval(label, token)
        self._last = token
        self._stack.clear()
        return end

    def tail(self) -> dict[str, float]:
        """Seconds after the last finished step that belong to no step record."""
        out = {k: v for k, v in self._open.items() if v}
        out.update({k: v for k, v in self._between.items() if v})
        return out


def stage_totals(totals: dict[str, float], wall: float) -> dict[str, float]:
    """``stages_s`` of a script run: the measured stages and ``other`` = wall − their sum."""
    stages = {k: float(totals.get(k, 0.0)) for k in SCRIPT_STAGES}
    stages["other"] = wall - sum(stages.values())
    return stages


__all__ = [
    "BETWEEN_STAGES",
    "SCRIPT_STAGES",
    "STEP_STAGES",
    "HostTicks",
    "StageClock",
    "Ticks",
    "stage_totals",
]
