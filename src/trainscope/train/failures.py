"""What ended a failed run, in one line: the ``error`` of its summary and what the user
reads. Failures whose cause is the user's setting or the machine (a collective that gave
up waiting, a full disk, a DataLoader worker killed, memory running out) are named as
such, with what to change, instead of surfacing as an unexplained library error."""

from __future__ import annotations

import contextlib
import errno
import re
import signal
import time
from typing import Any

from trainscope.errors import Terminated, TrainscopeError

# How gloo and nccl say that the rank at the other end of a collective is gone.
PEER_LOST = ("Connection reset by peer", "Connection closed by peer", "Broken pipe",
             "NCCL communicator was aborted", "Connection refused")  # fmt: skip
PEER_LOST_TEXT = "lost the connection to another rank (it ended or crashed)"
# How gloo and nccl say a collective waited past the process group's timeout.
TIMED_OUT = re.compile(
    r"Timed out waiting \d+ ?ms|collective operation timeout|operation timed out", re.I
)
WORKER_KILLED = re.compile(r"DataLoader worker \(pid\(?s?\)? ?([\d, ]+)\)? (?:is killed by signal: "
                           r"([^.]+)|exited unexpectedly)")  # fmt: skip


WORKER_END_WAIT_S = 2.0
"""How long a reset connection to a DataLoader worker waits for the worker to be seen ended."""


def _dead_loader_workers(e: BaseException) -> list[tuple[int, int]]:
    """``(pid, exit code)`` of the DataLoader workers that had ended when ``e`` came out of
    a DataLoader's iterator. A worker killed mid-batch can surface as a reset connection
    (the main process was reading the batch it was sending) rather than as torch's "worker
    is killed" error: the iterator in the traceback still knows its workers."""
    tb = e.__traceback__
    while tb is not None:
        workers = getattr(tb.tb_frame.f_locals.get("self"), "_workers", None)
        if isinstance(workers, list) and workers:
            # The connection closes as the worker dies, a moment before the kernel reports
            # it ended: wait for that moment, briefly (this is already the failure path).
            deadline = time.monotonic() + WORKER_END_WAIT_S
            while True:
                dead = [(w.pid, w.exitcode) for w in workers if getattr(w, "exitcode", None)]
                if dead or time.monotonic() > deadline:
                    return dead
                time.sleep(0.02)
        tb = tb.tb_next
    return []


def _worker_ended(e: BaseException) -> str | None:
    """How a DataLoader worker ended, from torch's message or from the iterator's workers."""
    killed = WORKER_KILLED.search(_text(e))
    if killed:
        pid, sig = killed.group(1).strip(), killed.group(2)
        return f"(pid {pid}) " + (
            f"was killed by signal {sig.strip()}" if sig else "exited unexpectedly"
        )
    if not isinstance(e, (ConnectionError, EOFError)):
        return None
    for pid, code in _dead_loader_workers(e):
        if code < 0:
            with contextlib.suppress(ValueError):
                return f"(pid {pid}) was killed by signal {signal.Signals(-code).name}"
        return f"(pid {pid}) exited unexpectedly (exit code {code})"
    return None


def _text(e: BaseException) -> str:
    return " ".join(str(e).split())  # one line, whatever the exception holds


def _collective_timeout(cfg: Any, watchdog: Any) -> str:
    """A collective gave up before the stall watchdog spoke: who kept it waiting."""
    timeout, stall = cfg.dist.timeout_s, cfg.dist.stall_timeout_s
    behind = watchdog.behind() if hasattr(watchdog, "behind") else []
    if behind:
        who = "; ".join(
            f"rank {r.rank} made no progress for {r.idle_s:.0f} s (last: {r.last()})"
            for r in behind[:8]
        )
    else:
        who = "another rank did not reach it (it is stalled, or slower by that much)"
    hint = (
        f"; the stall watchdog waits {stall:g} s (--stall-timeout): keep it below --timeout "
        "to have a stalled rank named"
        if stall >= timeout
        else ""
    )
    return f"a collective gave up after {timeout:g} s (--timeout): {who}{hint}"


def explain(e: BaseException, cfg: Any, watchdog: Any = None) -> str | None:
    """The one-line cause of a failure that is the user's setting or the machine's, or
    None for anything else (then :func:`describe` says what it was)."""
    if isinstance(e, (TrainscopeError, KeyboardInterrupt, Terminated)):
        return None
    if TIMED_OUT.search(_text(e)) and cfg.dist.nproc * cfg.dist.nnodes > 1:
        return _collective_timeout(cfg, watchdog)
    return machine_cause(e)


def machine_cause(e: BaseException) -> str | None:
    """The one-line cause of a failure that is the machine's (a full disk, a DataLoader
    worker killed, memory running out), or None. The command line asks too, for what
    escapes a run: torch reports a killed worker from its SIGCHLD handler, which can fire
    while the run is already recording another failure."""
    if isinstance(e, OSError) and e.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", -1)):
        where = f" writing {e.filename}" if e.filename else ""
        return (
            f"the disk is full ({e.strerror}){where}: free some space, or write the run "
            "elsewhere with --out"
        )
    worker = _worker_ended(e)
    if worker:
        return (
            f"a DataLoader worker {worker}: the kernel's out-of-memory killer is the usual "
            "cause; lower --num-workers or --batch-size, or use --loader fast"
        )
    if isinstance(e, MemoryError):
        return "out of host memory: lower --batch-size or --num-workers, or use a smaller model"
    if type(e).__name__ == "OutOfMemoryError":  # torch.OutOfMemoryError (CUDA)
        return (
            "out of GPU memory: lower --batch-size, or try --precision bf16 or "
            "--checkpointing full (trainscope estimate-memory shows where it goes)"
        )
    return None


def describe(e: BaseException, explained: str | None = None) -> str:
    """The ``error`` of a failed run's summary: what ended it, in one line."""
    if explained:
        return explained
    if isinstance(e, KeyboardInterrupt):
        return "interrupted by the user (Ctrl-C)"
    if isinstance(e, Terminated):
        return f"{e} (the run was stopped from outside)"
    text = _text(e)
    if any(mark in text for mark in PEER_LOST):
        # A collective failed because another rank went away: this rank is not the cause.
        return f"{PEER_LOST_TEXT} ({type(e).__name__}: {text[:300]})"
    return text if isinstance(e, TrainscopeError) else f"{type(e).__name__}: {text}"
