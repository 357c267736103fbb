"""Failures that are the user's setting or the machine's, said as such: a full disk, a
killed DataLoader worker, a collective that gave up before the stall watchdog, memory
running out; and a run killed while writing its weights leaves nothing --overwrite
cannot remove."""

from __future__ import annotations

import errno
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.train.fault_driver import trainscope
from trainscope.cli import main
from trainscope.config import from_dict
from trainscope.errors import ConfigError
from trainscope.runtime.watchdog import StalledRank
from trainscope.train.failures import describe, explain

pytestmark = pytest.mark.timeout(60)


def _cfg(nproc: int = 2, timeout: float = 20, stall: float = 60) -> SimpleNamespace:
    return SimpleNamespace(dist=SimpleNamespace(nproc=nproc, nnodes=1, timeout_s=timeout,
                                                stall_timeout_s=stall))  # fmt: skip


class Behind:
    def behind(self) -> list[StalledRank]:
        return [StalledRank(rank=1, step=3, stage="forward", idle_s=19.6)]


def test_a_collective_timeout_names_the_rank_that_kept_it_waiting() -> None:
    gloo = RuntimeError(
        "[../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting "
        "20000ms for recv operation to complete"
    )
    text = explain(gloo, _cfg(), Behind())
    assert text == (
        "a collective gave up after 20 s (--timeout): rank 1 made no progress for 20 s "
        "(last: step 3, forward); the stall watchdog waits 60 s (--stall-timeout): keep it "
        "below --timeout to have a stalled rank named"
    )
    nccl = RuntimeError("[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(...)")
    assert explain(nccl, _cfg(stall=5), None).startswith(
        "a collective gave up after 20 s (--timeout): another rank did not reach it"
    )
    assert explain(gloo, _cfg(nproc=1), None) is None  # one process: no collective to blame


def test_a_full_disk_and_a_killed_worker_are_named() -> None:
    full = OSError(errno.ENOSPC, "No space left on device", "runs/a/metrics.jsonl")
    assert explain(full, _cfg()) == (
        "the disk is full (No space left on device) writing runs/a/metrics.jsonl: free some "
        "space, or write the run elsewhere with --out"
    )
    killed = RuntimeError("DataLoader worker (pid 4242) is killed by signal: Killed. ")
    assert explain(killed, _cfg()).startswith(
        "a DataLoader worker (pid 4242) was killed by signal Killed: the kernel's "
        "out-of-memory killer is the usual cause"
    )
    gone = RuntimeError("DataLoader worker (pid(s) 11, 12) exited unexpectedly")
    assert "(pid 11, 12) exited unexpectedly" in explain(gone, _cfg())
    assert explain(MemoryError(), _cfg()).startswith("out of host memory")
    # Anything else is not explained, and described as it was.
    other = ValueError("something\nelse")
    assert explain(other, _cfg()) is None and describe(other) == "ValueError: something else"


KILLS_ITS_WORKER = """
import os, signal
import torch
from torch.utils.data import Dataset
from trainscope.workloads.builtin import digits

class Dies(Dataset):
    def __init__(self, inner):
        self.inner = inner
    def __len__(self):
        return len(self.inner)
    def __getitem__(self, i):
        if i == 5 and torch.utils.data.get_worker_info() is not None:
            os.kill(os.getpid(), signal.SIGKILL)  # as the out-of-memory killer would
        return self.inner[i]

def factory(cfg):
    wl = digits(cfg, None)
    wl.train_set = Dies(wl.train_set)
    return wl
"""


def test_a_run_whose_dataloader_worker_is_killed_says_so_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "dies.py").write_text(KILLS_ITS_WORKER)
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "r"
    argv = ["run", "--workload", "dies:factory", "--num-workers", "1", "--epochs", "1",
            "--out", str(out), "-q"]  # fmt: skip
    assert main(argv) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("trainscope: error: a DataLoader worker (pid")
    assert "internal error" not in err[0] and "out-of-memory killer" in err[0]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["error"].startswith("a DataLoader worker")


def test_a_run_whose_disk_fills_up_says_so_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The disk fills while the weights are written (the last write of a run)."""
    from trainscope.train import ranks

    def full(*args: object, **kwargs: object) -> int:
        raise OSError(errno.ENOSPC, "No space left on device", "model.safetensors")

    monkeypatch.setattr(ranks, "save_weights", full)
    out = tmp_path / "r"
    assert main(["run", "--epochs", "1", "--max-steps-per-epoch", "3", "--out", str(out),
                 "-q"]) == 1  # fmt: skip
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line == (
        "trainscope: error: the disk is full (No space left on device) writing "
        "model.safetensors: free some space, or write the run elsewhere with --out"
    )


def test_a_run_killed_while_writing_its_weights_leaves_nothing_overwrite_cannot_remove(
    tmp_path: Path,
) -> None:
    out = tmp_path / "r"  # the killed run: a process of its own, forked (fault_driver.py)
    argv = ["run", "--epochs", "1", "--max-steps-per-epoch", "3", "--out", str(out), "-q"]
    done = trainscope(*argv, fault="step=3,stage=weights")
    assert done.returncode == -9, done.stderr  # SIGKILL with the weights written, not moved
    leftovers = [p for p in out.iterdir() if p.name.startswith(".tmp-trainscope-")]
    assert [p.name.rsplit("-", 1)[0] for p in leftovers] == [".tmp-trainscope-weights"]
    assert [p.name for p in leftovers[0].iterdir()] == ["model.safetensors"]
    assert not (out / "model.safetensors").exists()
    # --overwrite removes what the killed run left, and the new run completes in place.
    assert main(["run", "--epochs", "1", "--max-steps-per-epoch", "3", "--out", str(out),
                 "--overwrite", "-q"]) == 0  # fmt: skip
    assert not [p for p in out.iterdir() if p.name.startswith(".tmp")]
    assert (out / "model.safetensors").is_file()


def test_a_collective_timeout_below_a_second_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"timeout_s must be >= 1"):
        from_dict({"dist": {"timeout_s": 1e-9}})


def test_a_users_factory_that_raises_is_said_to_be_theirs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "raises.py").write_text(
        "def factory(cfg):\n    raise TypeError('needs a cache_dir argument')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "r"
    assert main(["run", "--workload", "raises:factory", "--out", str(out), "-q"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(
        "trainscope: error: workload factory 'raises:factory' raised TypeError: needs a "
        "cache_dir argument"
    )
    assert "internal error" not in line
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "failed" and "raised TypeError" in summary["error"]


def test_a_killed_worker_seen_as_a_reset_connection_is_named(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Under load, the main process can be reading the batch a worker was sending when
    the worker is killed: torch then raises ConnectionResetError, not its "worker is
    killed" error. The iterator in the traceback still knows which worker ended."""
    from types import SimpleNamespace

    from trainscope.train import failures
    from trainscope.train.failures import explain

    # With every worker alive, explain waits this long for one to be seen ended: the
    # answer is the same after 0.1 s as after its 2 s.
    monkeypatch.setattr(failures, "WORKER_END_WAIT_S", 0.1)

    class Iterator:
        _workers = [SimpleNamespace(pid=41, exitcode=None), SimpleNamespace(pid=42, exitcode=-9)]

        def next(self) -> None:
            raise ConnectionResetError(104, "Connection reset by peer")

    try:
        Iterator().next()
    except ConnectionResetError as e:
        err = e
    cfg = SimpleNamespace(dist=SimpleNamespace(nproc=1, nnodes=1))
    assert explain(err, cfg) == (
        "a DataLoader worker (pid 42) was killed by signal SIGKILL: the kernel's "
        "out-of-memory killer is the usual cause; lower --num-workers or --batch-size, "
        "or use --loader fast"
    )
    Iterator._workers[1].exitcode = None  # every worker alive: not a worker's death
    assert explain(err, cfg) is None


def test_a_worker_death_that_escapes_the_run_is_still_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """torch's SIGCHLD handler can raise "worker is killed" while the run is already
    recording another failure, so the error leaves the run unexplained: the command line
    still names it."""

    def dies(*args: object, **kwargs: object) -> None:
        raise RuntimeError("DataLoader worker (pid 7) is killed by signal: Killed. ")

    monkeypatch.setattr("trainscope.launch.launcher.run_or_launch", dies)
    assert main(["run", "--epochs", "1", "--out", str(tmp_path / "r"), "-q"]) == 1
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("trainscope: error: a DataLoader worker (pid 7) was killed by signal")
    assert "internal error" not in line
