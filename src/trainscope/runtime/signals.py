"""How a trainscope process ends when it is told to: signals become an exception that
every run records, and launched children never outlive their parent (torch-free).

``timeout``, batch schedulers and ``docker stop`` send SIGTERM; a closed terminal sends
SIGHUP; Ctrl-\\ sends SIGQUIT. Python's default for each is to die on the spot, which
leaves a run's ``summary.json`` at ``running`` forever. Inside :func:`signals_end_runs`
each of them raises :class:`~trainscope.errors.Terminated` in the main thread instead,
exactly as Ctrl-C raises KeyboardInterrupt, so the run's ``finally`` blocks record
``failed`` with the signal's name and flush what they hold.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator
from types import FrameType
from typing import Any

from trainscope.errors import Terminated

# The signals that end a run the way Ctrl-C does (SIGINT keeps Python's own handler).
ENDING_SIGNALS = tuple(
    getattr(signal, name) for name in ("SIGTERM", "SIGHUP", "SIGQUIT") if hasattr(signal, name)
)


# Signals that asked this process to stop, inside signals_end_runs: a process-wide fact,
# as signals are. raise_if_stopped() reads it at every step.
_fired: list[int] = []


@contextlib.contextmanager
def signals_end_runs() -> Iterator[None]:
    """Within this block, SIGTERM/SIGHUP/SIGQUIT raise :class:`Terminated` (once), and
    Ctrl-C raises KeyboardInterrupt (every time, as Python's own handler does).

    The first ending signal raises; later ones, arriving while the run records its end,
    are noted and ignored so that the record is completed. Every signal is also noted for
    :func:`raise_if_stopped`. Outside the main thread (where Python cannot install
    handlers) this is a no-op.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        _fired.append(signum)
        if sum(s != signal.SIGINT for s in _fired) == 1:
            raise Terminated(signum)

    def interrupt(signum: int, frame: FrameType | None) -> None:
        _fired.append(signum)
        raise KeyboardInterrupt

    previous = {s: signal.signal(s, handler) for s in ENDING_SIGNALS}
    previous[signal.SIGINT] = signal.signal(signal.SIGINT, interrupt)
    _fired.clear()
    try:
        yield
    finally:
        for s, old in previous.items():
            signal.signal(s, old)
        _fired.clear()


def raise_if_stopped() -> None:
    """Raise again for a stop signal whose exception was lost.

    Python runs a signal's handler between any two bytecodes of the main thread, and an
    exception raised while that thread is inside a finalizer (``__del__``) or a garbage
    collector callback is printed and dropped: the run would train on, to the end. The
    training loop calls this at every step (a list check), so a stop asked for is a stop.
    """
    if _fired:
        sig = _fired[0]
        if sig == signal.SIGINT:
            raise KeyboardInterrupt
        raise Terminated(sig)


def die_with_parent() -> None:
    """Ask the kernel to send this process SIGTERM when its parent dies (Linux only).

    A launched process (torchrun, its workers, a study's run in a process of its own)
    whose launcher is killed, even by SIGKILL, must stop instead of training on,
    re-parented, to the end. Elsewhere this is a no-op.
    """
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    pr_set_pdeathsig = 1
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(pr_set_pdeathsig, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):
        return
    # The parent may have died before the request was made: then no signal would come.
    expected = os.environ.get("TRAINSCOPE_PARENT_PID")
    if expected is not None and str(os.getppid()) != expected:
        os.kill(os.getpid(), signal.SIGTERM)


@contextlib.contextmanager
def signals_deferred() -> Iterator[None]:
    """Hold Ctrl-C and the ending signals until the block is done (a run writing its last
    record: an exception in the middle would leave ``summary.json`` at ``running``).

    A signal that arrived meanwhile is delivered again as the block ends, to whatever
    handler was in place before. No-op outside the main thread.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []
    # SIGCHLD too: torch's DataLoader raises "worker is killed" from its SIGCHLD handler,
    # wherever the main thread is, even while a run records why it failed.
    previous = {
        s: signal.signal(s, lambda signum, frame: held.append(signum))
        for s in (signal.SIGINT, *ENDING_SIGNALS, signal.SIGCHLD)
    }
    try:
        yield
    finally:
        for s, old in previous.items():
            signal.signal(s, old)
        for s in dict.fromkeys(held):  # each signal once, in the order they came
            signal.raise_signal(s)


# A preemption asked for inside preemption_noted: the signal, until the run has agreed
# on a step to stop at (train.preemption reads it at every log interval).
_preempt: list[int] = []


def preemption_signals() -> tuple[int, ...]:
    """What a scheduler sends before it takes the machine back: SLURM's pre-timeout
    signal (``--signal=USR1@90``) and SIGTERM (preemption, pod eviction, ``scancel``)."""
    return tuple(getattr(signal, n) for n in ("SIGUSR1", "SIGTERM") if hasattr(signal, n))


@contextlib.contextmanager
def preemption_noted(signums: tuple[int, ...]) -> Iterator[None]:
    """Within this block, the first of ``signums`` is only noted (:func:`preempt_signal`):
    the run goes on to a step every rank agrees on, checkpoints there and stops. The same
    signal again is noted too (a scheduler or a launcher may deliver it twice); another
    one after it stops the run at once as :class:`Terminated` (SLURM's SIGTERM at the
    time limit, after its SIGUSR1: its patience has run out). No-op outside the main
    thread."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    raised: list[int] = []

    def handler(signum: int, frame: FrameType | None) -> None:
        if not _preempt or signum == _preempt[0]:
            _preempt.append(signum)
            return
        _fired.append(signum)  # for raise_if_stopped, should the exception be lost
        raised.append(signum)
        raise Terminated(signum)

    _preempt.clear()
    try:
        with _installed(dict.fromkeys(signums, handler)):
            yield
    finally:
        _preempt.clear()
        for s in raised:  # this block's own: a process that goes on is not stopped again
            if s in _fired:
                _fired.remove(s)


@contextlib.contextmanager
def ignored(signums: tuple[int, ...]) -> Iterator[None]:
    """Within this block, ``signums`` are ignored (a late pre-timeout signal while a run
    writes its last record must not kill the process: SIGUSR1's default), then restored.
    No-op outside the main thread."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    with _installed(dict.fromkeys(signums, signal.SIG_IGN)):
        yield


@contextlib.contextmanager
def _installed(handlers: dict[int, Any]) -> Iterator[None]:
    """``handlers`` in place within this block, the previous ones restored after."""
    previous = {s: signal.signal(s, h) for s, h in handlers.items()}
    try:
        yield
    finally:
        for s, old in previous.items():
            signal.signal(s, old)


def preempt_signal() -> int:
    """The preemption signal this process received inside :func:`preemption_noted`, 0
    when none has come."""
    return _preempt[0] if _preempt else 0
