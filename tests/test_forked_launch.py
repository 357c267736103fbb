"""The forked stand-in for launched processes (tests/forked_launch.py) behaves as a new
process would where the suite relies on it."""

from __future__ import annotations

import gc
import json
import os
import signal
import subprocess
from pathlib import Path

import pytest
import torch

from tests.conftest import scaled
from tests.forked_launch import ForkedProcess, fork_trainscope

pytestmark = pytest.mark.timeout(120)


def test_a_forked_run_trains_on_two_threads_after_this_process_did(isolated_cli: Path) -> None:
    """libgomp's pool of the thread that forks is inherited without its threads: a child
    forked from a thread that has led a parallel region would hang at its first one."""
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        a = torch.randn(512, 512)
        for _ in range(3):
            a @ a  # a parallel region on two threads, led by this thread
    finally:
        torch.set_num_threads(before)
    args = ["run", "--out", "run", "--threads", "2", "--epochs", "1",
            "--max-steps-per-epoch", "3", "--no-progress", "-q"]  # fmt: skip
    proc = fork_trainscope(args, os.environ)
    try:
        code = proc.wait(timeout=scaled(60))
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        pytest.fail("a run forked after a two-thread parallel region did not end")
    assert code == 0
    summary = json.loads((isolated_cli / "run" / "summary.json").read_text())
    assert summary["status"] == "completed"


def test_a_forked_child_leaves_this_process_garbage_alone(tmp_path: Path) -> None:
    """A DDP reducer left in a reference cycle here, collected in a child, would wait
    there for its gloo group's threads, which were not forked: the child never collects
    what it inherited."""
    marks = tmp_path / "collected"

    class Cycle:
        def __init__(self) -> None:
            self.me = self

        def __del__(self) -> None:
            with marks.open("a") as f:
                f.write(f"{os.getpid()}\n")

    def collect_and_exit() -> None:
        gc.collect()
        os._exit(0)

    gc.disable()  # the cycle must still be garbage when the child starts
    try:
        Cycle()
        proc = ForkedProcess(collect_and_exit)
        assert proc.wait(timeout=scaled(30)) == 0
    finally:
        gc.enable()
    assert not marks.exists(), "the child collected this process's garbage"
    gc.collect()
    assert marks.read_text() == f"{os.getpid()}\n"
