"""Every way a run ends leaves a true record: SIGTERM, SIGHUP and SIGQUIT end a run as
Ctrl-C does (``failed``, the signal named, metrics flushed, one line on stderr)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import scaled

pytestmark = pytest.mark.timeout(120)


def start_long_run(tmp_path: Path, *extra: str) -> tuple[subprocess.Popen, Path]:
    """A run that would take minutes, started as a user would, once it is training."""
    out = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-m", "trainscope", "run", "--out", str(out), "--epochs", "1000",
         "--log-every", "1", "--no-progress", "-q", *extra],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    metrics = out / "metrics.jsonl"
    while not (metrics.is_file() and '"step"' in metrics.read_text()):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"the run did not start training: {proc.communicate()[1]}")
        time.sleep(0.1)
    return proc, out


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT])
def test_a_signal_ends_the_run_with_a_true_record(tmp_path: Path, sig: signal.Signals) -> None:
    proc, out = start_long_run(tmp_path)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=scaled(60))
    assert proc.returncode == 128 + sig
    lines = err.strip().splitlines()
    assert lines == [f"trainscope: terminated by {sig.name}"], lines
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "failed"
    assert summary["error"].startswith(f"terminated by {sig.name}")
    assert summary["finished_at"]
    events = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert sum(e["event"] == "step" for e in events) >= 1  # flushed, every line whole


def test_ctrl_c_is_recorded_the_same_way(tmp_path: Path) -> None:
    proc, out = start_long_run(tmp_path)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=scaled(60))
    assert proc.returncode == 130
    assert err.strip().splitlines() == ["trainscope: interrupted"]
    summary = json.loads((out / "summary.json").read_text())
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
