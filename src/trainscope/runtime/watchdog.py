"""Stall watchdog: a rank that is alive but not progressing becomes a one-line verdict.

Without it, a rank stuck in its data loader, a loop or a deadlocked callback makes every
other rank wait inside a collective until the process-group timeout, in silence. Here each
rank's training loop advances a :class:`Progress` (a few attribute writes per stage), and a
daemon thread per rank (:class:`StallWatchdog`) publishes that position to the job's store
every ``poll_s`` and reads everybody else's.

Each thread decides on its own, with its own monotonic clock (clocks are never compared
across hosts): it notes when it last saw each rank's counter change. The verdict rule:

    the whole job has made no progress for ``timeout_s`` (no rank's counter changed) and the
    ranks are not level; the stalled ranks are those behind the most advanced one.

Ranks that are all equally slow (one long forward pass) are level: not a stall. Requiring
*every* rank to be still, not only the laggard, keeps work that legitimately runs on fewer
ranks (rank 0 alone advancing through something while the others wait) from being blamed
on the waiters; a real stall still ends within ``timeout_s`` plus the time the leaders take
to reach their next collective, where they stop too.

Store keys: ``key_prefix + str(rank)`` holds ``"counter|step|stage"``. Reads never block:
``store.get`` waits until a key exists, so keys are first probed with ``store.check`` (a
rank that has not published yet counts as level with a freshly started one). Any store
error (rank 0, which hosts the store, has exited) ends the thread quietly; a leftover key
from an earlier run in the same store is overwritten when that rank's watchdog starts, so
reuse a store across runs only with a fresh ``key_prefix``.

No torch import: the store is anything with ``set``/``get``/``check`` (``multi_get`` used
when present), e.g. ``torch.distributed.distributed_c10d._get_default_store()``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import NamedTuple, Protocol

logger = logging.getLogger(__name__)

# Ranks named one by one in a verdict; the rest are counted (keeps the message one line).
MAX_RANKS_NAMED = 8


class ProgressStore(Protocol):
    """The part of ``torch.distributed.Store`` the watchdog uses."""

    def set(self, key: str, value: str | bytes) -> None: ...

    def get(self, key: str) -> bytes: ...

    def check(self, keys: list[str]) -> bool: ...


class Position(NamedTuple):
    """Where a rank is: ``counter`` orders positions; ``step``/``stage`` name them."""

    counter: int
    step: int
    stage: str


START = Position(0, 0, "")
"""A rank before its first :meth:`Progress.advance` (or one that has not published yet)."""


class Progress:
    """This rank's progress counter, advanced by the training loop.

    Contract for the caller:

    - Call :meth:`advance` when *entering* a stage (``advance(step, "data_wait")`` before
      fetching the batch, ``advance(step, "forward")`` before the forward...), so a stall
      names the stage the rank is stuck in. Evaluation batches and other phases may call it
      too (``advance(step, "evaluation")``).
    - Every rank makes the same sequence of calls: the counter is the number of calls so
      far, so equal counters mean the same place in the code. Work done on some ranks only
      (rank 0 writing a checkpoint) calls it on every rank or on none, or the ranks that
      skipped it look behind for the rest of the run.

    The hot path is one tuple built and one attribute written (atomic for the reader
    thread: it never sees a counter with the previous stage); no lock, no I/O.
    """

    __slots__ = ("_pos",)

    def __init__(self) -> None:
        self._pos: tuple[int, int, str] = (0, 0, "")

    def advance(self, step: int, stage: str) -> None:
        """Record that this rank entered ``stage`` of ``step``."""
        self._pos = (self._pos[0] + 1, step, stage)

    @property
    def position(self) -> Position:
        """A consistent snapshot (counter, step, stage), for the watchdog thread."""
        return Position(*self._pos)

    @property
    def counter(self) -> int:
        """Number of :meth:`advance` calls so far."""
        return self._pos[0]

    @property
    def step(self) -> int:
        """Step of the last :meth:`advance` (0 before any)."""
        return self._pos[1]

    @property
    def stage(self) -> str:
        """Stage of the last :meth:`advance` ("" before any)."""
        return self._pos[2]


@dataclass
class StalledRank:
    """A rank that stopped: its last position and how long this watchdog saw it still."""

    rank: int
    step: int
    stage: str
    idle_s: float

    def last(self) -> str:
        """``"step 6, forward"`` (or a note that it never reported progress)."""
        if not self.stage:
            return "no progress reported"
        return f"step {self.step}, {' '.join(self.stage.split())}"  # stages stay on one line


@dataclass
class StallVerdict:
    """Which ranks stopped while the others waited, under which timeout."""

    stalled: list[StalledRank]
    timeout_s: float

    def message(self, setting: str = "--stall-timeout") -> str:
        """One line naming the stalled rank(s), their last step and stage, and the timeout.

        ``setting`` is the option that changes the timeout, named so the user can act.
        """
        ranks = sorted(self.stalled, key=lambda s: s.rank)
        tail = f"while the other ranks waited; stall timeout {self.timeout_s:g} s ({setting})"
        if len(ranks) == 1:
            r = ranks[0]
            return f"rank {r.rank} made no progress for {r.idle_s:.0f} s (last: {r.last()}) {tail}"
        named, rest = ranks[:MAX_RANKS_NAMED], len(ranks) - MAX_RANKS_NAMED
        idle = min(r.idle_s for r in ranks)
        last = "; ".join(f"rank {r.rank} {r.last()}" for r in named)
        more = f"; {rest} more" if rest > 0 else ""
        ids = ", ".join(str(r.rank) for r in named) + (f" and {rest} more" if rest > 0 else "")
        return f"ranks {ids} made no progress for {idle:.0f} s or more (last: {last}{more}) {tail}"


def find_stalled(
    positions: dict[int, Position], changed_at: dict[int, float], now: float, timeout_s: float
) -> list[StalledRank]:
    """The verdict rule (see the module docstring): the ranks behind the most advanced one,
    when no rank's counter has changed for ``timeout_s``; empty otherwise."""
    if not positions or any(now - changed_at[r] < timeout_s for r in positions):
        return []  # somebody still moves: nobody is stuck waiting for good yet
    lead = max(p.counter for p in positions.values())
    return [
        StalledRank(rank=r, step=p.step, stage=p.stage, idle_s=now - changed_at[r])
        for r, p in sorted(positions.items())
        if p.counter < lead
    ]


def encode(pos: Position) -> str:
    """The store value for a position: ``"counter|step|stage"`` (stage last: it may hold ``|``)."""
    return f"{pos.counter}|{pos.step}|{pos.stage}"


def decode(raw: bytes | str) -> Position | None:
    """The position in a store value; None when it is not one (never raise in the thread)."""
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
    parts = text.split("|", 2)
    try:
        return Position(int(parts[0]), int(parts[1]), parts[2])
    except (ValueError, IndexError):
        return None


class StallWatchdog:
    """A daemon thread that publishes this rank's :class:`Progress` and judges everyone's.

    ``on_stall(verdict)`` is called at most once, *from the watchdog thread*, while the main
    thread may be blocked inside a collective it cannot leave: to end the run, do the
    reporting there and finish with ``os._exit`` (``sys.exit`` would end only the thread).
    After it returns the thread ends. Usable as a context manager (start on enter, stop on
    exit). A world of one has nobody to wait for: :meth:`start` then starts nothing.
    """

    def __init__(
        self,
        store: ProgressStore,
        rank: int,
        world_size: int,
        progress: Progress,
        timeout_s: float,
        on_stall: Callable[[StallVerdict], None],
        poll_s: float = 1.0,
        key_prefix: str = "trainscope/progress/",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if timeout_s <= 0 or poll_s <= 0:
            raise ValueError(f"timeout_s and poll_s must be > 0, got {timeout_s}, {poll_s}")
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} is not in a world of {world_size}")
        self.store, self.rank, self.world_size = store, rank, world_size
        self.progress, self.timeout_s, self.on_stall = progress, timeout_s, on_stall
        self.poll_s, self.key_prefix, self.clock = poll_s, key_prefix, clock
        self.verdict: StallVerdict | None = None
        """The verdict once reached (None before)."""
        self._published: Position | None = None
        self._seen: dict[int, Position] = {}
        self._changed_at: dict[int, float] = {}
        self._stop = threading.Event()
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    def key(self, rank: int) -> str:
        """The store key holding ``rank``'s position."""
        return f"{self.key_prefix}{rank}"

    def poll(self) -> StallVerdict | None:
        """One round: publish this rank's position if it changed, read the others', judge.

        The thread calls it every ``poll_s``; store errors propagate (the thread stops).
        """
        mine = self.progress.position
        if mine != self._published:
            self.store.set(self.key(self.rank), encode(mine))
            self._published = mine
        now = self.clock()
        positions = self._read_others()
        positions[self.rank] = mine  # our own, fresh rather than as published
        for r, pos in positions.items():
            old = self._seen.get(r)
            if old is None or old.counter != pos.counter:
                self._changed_at[r] = now  # first sight counts as a change: idle from here
            self._seen[r] = pos
        stalled = find_stalled(positions, self._changed_at, now, self.timeout_s)
        return StallVerdict(stalled, self.timeout_s) if stalled else None

    def behind(self) -> list[StalledRank]:
        """The ranks behind the most advanced one as last seen, whatever the timeout: for
        the main thread to say who kept a collective waiting when it gave up first."""
        try:
            seen, changed = dict(self._seen), dict(self._changed_at)
        except RuntimeError:  # the thread changed them meanwhile: read again
            seen, changed = dict(self._seen), dict(self._changed_at)
        if not seen:
            return []
        now, lead = self.clock(), max(p.counter for p in seen.values())
        return [
            StalledRank(rank=r, step=p.step, stage=p.stage, idle_s=now - changed.get(r, now))
            for r, p in sorted(seen.items())
            if p.counter < lead
        ]

    def _read_others(self) -> dict[int, Position]:
        """Every other rank's published position (:data:`START` for a key not there yet)."""
        others = [r for r in range(self.world_size) if r != self.rank]
        keys = [self.key(r) for r in others]
        multi_get: Callable[[list[str]], Sequence[bytes]] | None
        multi_get = getattr(self.store, "multi_get", None)
        if keys and multi_get is not None and self.store.check(keys):
            raws: list[bytes | None] = list(multi_get(keys))  # one round trip once all are there
        else:
            # store.get blocks until its key exists: only get what check says is there.
            raws = [self.store.get(k) if self.store.check([k]) else None for k in keys]
        out: dict[int, Position] = {}
        for r, raw in zip(others, raws):
            pos = decode(raw) if raw is not None else None
            out[r] = pos if pos is not None else START
        return out

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                try:
                    verdict = self.poll()
                except Exception as e:  # the store went away (rank 0 exited): not our failure
                    logger.debug("stall watchdog stopped: store unavailable (%s)", e)
                    return
                if verdict is not None:
                    self.verdict = verdict
                    self._done.set()
                    try:
                        self.on_stall(verdict)
                    except Exception:
                        logger.exception("stall watchdog: on_stall failed")
                    return
                self._stop.wait(self.poll_s)
        finally:
            self._done.set()

    def start(self) -> None:
        """Start the daemon thread (no-op for a world of one or when already running)."""
        if self.world_size == 1 or self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="trainscope-watchdog", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread and wait for it briefly (idempotent, safe from ``on_stall``)."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            # A store call can hang on a wedged host: bounded, the daemon thread then dies
            # with the process rather than holding the training process up.
            thread.join(timeout=self.poll_s + 5.0)

    @property
    def running(self) -> bool:
        """Still watching: started, and no verdict, store error or :meth:`stop` ended it."""
        return self._thread is not None and not self._done.is_set()

    def wait_for_verdict(self, timeout_s: float) -> StallVerdict | None:
        """The verdict, waiting up to ``timeout_s`` for the thread to reach one (or stop).

        For the main thread's error path: a collective that failed because a stalled peer
        exited is explained by the verdict this rank reaches a moment later.
        """
        self._done.wait(timeout_s)
        return self.verdict

    def __enter__(self) -> StallWatchdog:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
