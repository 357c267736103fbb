"""Every way a run ends leaves a true record: SIGTERM, SIGHUP and SIGQUIT end a run as
Ctrl-C does (``failed``, the signal named, metrics flushed, one line on stderr)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import scaled
from tests.forked_launch import ForkedProcess, fork_trainscope

pytestmark = pytest.mark.timeout(120)


LONG_RUN = ["run", "--out", "run", "--epochs", "1000", "--log-every", "1", "--no-progress", "-q"]


def wait_for_training(out: Path, proc: subprocess.Popen | ForkedProcess) -> None:
    """Return once the run has logged a step (it would then train for minutes)."""
    deadline = time.monotonic() + scaled(60)
    metrics = out / "metrics.jsonl"
    while not (metrics.is_file() and '"step"' in metrics.read_text()):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill() if isinstance(proc, subprocess.Popen) else proc.send_signal(9)
            pytest.fail("the run did not start training")
        time.sleep(0.05)


def test_sigterm_ends_a_real_process_with_a_true_record(tmp_path: Path) -> None:
    """As a user starts it (a fresh interpreter): the exit status, the one line, the record."""
    proc = subprocess.Popen([sys.executable, "-m", "trainscope", *LONG_RUN], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    wait_for_training(tmp_path / "run", proc)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=scaled(60))
    assert_ended_by(signal.SIGTERM, proc.returncode, err, tmp_path / "run")


@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGQUIT])
def test_a_signal_ends_the_run_with_a_true_record(
    isolated_cli: Path, capfd: pytest.CaptureFixture[str], sig: signal.Signals
) -> None:
    """The other ending signals, to a run in a process forked from this one (the same
    code; the real process is the SIGTERM test's)."""
    proc = fork_trainscope(LONG_RUN, os.environ)
    wait_for_training(isolated_cli / "run", proc)
    capfd.readouterr()
    proc.send_signal(sig)
    code = proc.wait(timeout=scaled(60))
    assert_ended_by(sig, code, capfd.readouterr().err, isolated_cli / "run")


def assert_ended_by(sig: signal.Signals, code: int, err: str, out: Path) -> None:
    assert code == 128 + sig
    lines = err.strip().splitlines()
    assert lines == [f"trainscope: terminated by {sig.name}"], lines
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "failed"
    assert summary["error"].startswith(f"terminated by {sig.name}")
    assert summary["finished_at"]
    events = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert sum(e["event"] == "step" for e in events) >= 1  # flushed, every line whole


def test_ctrl_c_is_recorded_the_same_way(
    isolated_cli: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    proc = fork_trainscope(LONG_RUN, os.environ)
    wait_for_training(isolated_cli / "run", proc)
    capfd.readouterr()
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=scaled(60)) == 130
    assert capfd.readouterr().err.strip().splitlines() == ["trainscope: interrupted"]
    summary = json.loads((isolated_cli / "run" / "summary.json").read_text())
    assert summary["status"] == "failed" and "interrupted" in summary["error"]


def test_signals_end_runs_raises_once_and_restores_handlers() -> None:
    from trainscope.errors import Terminated
    from trainscope.runtime.signals import signals_end_runs

    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(Terminated) as caught, signals_end_runs():
        signal.raise_signal(signal.SIGTERM)
        pytest.fail("the signal did not interrupt")
    assert caught.value.signame == "SIGTERM" and caught.value.signum == signal.SIGTERM
    assert str(caught.value) == "terminated by SIGTERM"
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_second_signal_does_not_break_the_recording_of_the_first() -> None:
    from trainscope.errors import Terminated
    from trainscope.runtime.signals import signals_end_runs

    recorded = []
    with pytest.raises(Terminated), signals_end_runs():
        try:
            signal.raise_signal(signal.SIGTERM)
        finally:  # a run writing its record while `timeout` or docker signals again
            signal.raise_signal(signal.SIGHUP)
            recorded.append("summary written")
    assert recorded == ["summary written"]


def test_the_last_record_write_is_not_cut_short_by_a_signal() -> None:
    """A signal during the final write waits for it, then ends the command as usual."""
    from trainscope.errors import Terminated
    from trainscope.runtime.signals import signals_deferred, signals_end_runs

    written = []
    with pytest.raises(Terminated), signals_end_runs():
        with signals_deferred():
            signal.raise_signal(signal.SIGTERM)
            written.append("summary.json")  # still runs: the signal is held
        pytest.fail("the held signal was not delivered after the block")
    assert written == ["summary.json"]


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_stop_whose_exception_a_finalizer_swallowed_is_raised_at_the_next_step() -> None:
    """Python drops an exception raised inside ``__del__``: a Ctrl-C (or SIGTERM) landing
    there would let the run train on. The loop's per-step check raises it again."""
    import gc
    import os

    from trainscope.errors import Terminated
    from trainscope.runtime.signals import raise_if_stopped, signals_end_runs

    class SignalsInFinalizer:
        def __init__(self, sig: int) -> None:
            self.sig = sig

        def __del__(self) -> None:
            os.kill(os.getpid(), self.sig)  # the handler runs here, inside the finalizer
            for _ in range(1000):  # give the interpreter bytecodes to run the handler on
                pass

    for sig, expected in ((signal.SIGINT, KeyboardInterrupt), (signal.SIGTERM, Terminated)):
        with signals_end_runs():
            raise_if_stopped()  # nothing asked yet: no-op
            obj = SignalsInFinalizer(sig)
            del obj  # the exception is printed as "ignored" and dropped
            gc.collect()
            with pytest.raises(expected):
                raise_if_stopped()
        raise_if_stopped()  # outside the block the slate is clean
