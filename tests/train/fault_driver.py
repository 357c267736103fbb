"""``trainscope`` commands in forked children of the test process (test helper).

The resume, preemption and fault tests kill runs (SIGKILL at chosen points), signal them
and read their exit codes: each attempt must be a process of its own. A fresh
interpreter per attempt would spend most of the test importing torch (~3 s each on a
2-core machine); a child forked from the test process, which has imported torch and
trainscope already, runs exactly what ``trainscope ARGV`` runs (``trainscope.cli.main``,
in the environment and folder given) at once. It is a real process: its own signals,
exit code, files and (for two ranks) gloo over 127.0.0.1.

What it is not: a fresh interpreter (imports from the current directory, start-up time
and a process's own memory stay with real launches), nor torchrun (nothing restarts).
Each child is told it has started no run before (``runs_before`` 0), as the command it
stands in for would be, so a record's process time is its own; its start-up is then the
time since the fork.
"""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import traceback
from collections.abc import Mapping, Sequence
from pathlib import Path

from tests.conftest import scaled
from tests.forked_launch import ForkedProcess, run_worker

# A run of these tests is seconds; a hang is still caught.
TIMEOUT_S = 60.0


def _child(argv: Sequence[str], env: Mapping[str, str], cwd: Path | None, logs: Path) -> None:
    """In the forked child: become ``trainscope ARGV`` in ``cwd`` with its output in
    ``logs`` (:func:`tests.forked_launch.run_worker`), then exit with its status."""
    try:
        for fd, name in ((1, "stdout"), (2, "stderr")):
            target = os.open(logs / name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(target, fd)
            os.close(target)
        # pytest's capture objects write elsewhere: the command's own streams, as a
        # launched process has them.
        sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), line_buffering=True)
        sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), line_buffering=True)
        if cwd is not None:
            os.chdir(cwd)
    except BaseException:
        traceback.print_exc()
        os._exit(1)
    run_worker(argv, env)  # exits


class Forked:
    """A forked ``trainscope`` process: ``wait()`` for its exit code (negative: the signal
    that killed it, as ``subprocess`` gives it), then read ``stdout`` and ``stderr``. The
    fork is :class:`tests.forked_launch.ForkedProcess`'s (from a thread of its own, the
    inherited heap frozen: a child of a process that has trained would otherwise hang)."""

    def __init__(self, process: ForkedProcess, logs: Path) -> None:
        self.process, self.pid, self.logs = process, process.pid, logs

    @property
    def returncode(self) -> int | None:
        return self.process.returncode

    def poll(self) -> int | None:
        return self.process.poll()

    def wait(self, timeout: float = TIMEOUT_S) -> int:
        """The exit code; a child still running after ``scaled(timeout)`` is killed and
        the test fails."""
        try:
            return self.process.wait(scaled(timeout))
        except subprocess.TimeoutExpired:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()
            raise subprocess.TimeoutExpired(["trainscope"], timeout) from None

    @property
    def stdout(self) -> str:
        return (self.logs / "stdout").read_text()

    @property
    def stderr(self) -> str:
        return (self.logs / "stderr").read_text()


def _warm() -> None:
    """Import once, in the test process, what every child would import."""
    import torch._dynamo  # noqa: F401  (imported lazily by torch.optim's first step)

    import trainscope.cli  # noqa: F401
    import trainscope.train.run  # noqa: F401


def start(
    *argv: str,
    env: Mapping[str, str] | None = None,
    fault: str | None = None,
    cwd: Path | None = None,
    logs: Path,
) -> Forked:
    """Fork ``trainscope ARGV`` in the background. Its environment is the test process's
    (without ``TRAINSCOPE_FAULT``, SLURM's variables and ``RANK``) updated with
    ``env`` and ``fault``; its stdout and stderr go to files in ``logs``."""
    _warm()
    logs.mkdir(parents=True, exist_ok=True)
    full = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SLURM_", "RANK", "TRAINSCOPE_FAULT"))
    }
    full.update(env or {})
    if fault:
        full["TRAINSCOPE_FAULT"] = fault
    full["TRAINSCOPE_PARENT_PID"] = str(os.getpid())
    return Forked(ForkedProcess(_child, argv, full, cwd, logs), logs)


_count = 0


def trainscope(
    *argv: str,
    env: Mapping[str, str] | None = None,
    fault: str | None = None,
    cwd: Path | None = None,
    timeout: float = TIMEOUT_S,
) -> Forked:
    """Run ``trainscope ARGV`` in a forked child to its end (see :func:`start`): the
    finished process, its exit code in ``returncode``. Its stdout and stderr are kept
    beside the run folder (``--out`` or ``--resume``)."""
    global _count
    _count += 1
    run = next(argv[i + 1] for i, a in enumerate(argv) if a in ("--out", "--resume"))
    logs = Path(run).parent / f".logs-{Path(run).name}-{_count}"
    child = start(*argv, env=env, fault=fault, cwd=cwd, logs=logs)
    child.wait(timeout)
    return child


def flip_a_bit(path: Path) -> None:
    """Damage a file: one bit of its third byte from the end."""
    with open(path, "r+b") as f:
        f.seek(-3, os.SEEK_END)
        byte = f.read(1)[0]
        f.seek(-3, os.SEEK_END)
        f.write(bytes([byte ^ 0x40]))
