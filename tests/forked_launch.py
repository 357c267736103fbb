"""Launched processes forked from the test process instead of started as new interpreters
(test helper): the ``forked_launch`` fixture in ``tests/conftest.py``.

``trainscope run --nproc 2`` starts torchrun, which starts two fresh interpreters; each
pays about 3 s of interpreter start-up and torch import on a 2-core machine before its
first step, so a 2-process run of 0.5 s costs about 10 s. A study's "process per run" pays
the same for every run. Where a test asks what the ranks or a run's own process *do*
(parameters after k steps, records, reports), not how they were started, this module
starts the same processes by ``os.fork()`` from the test process, which has imported
torch and trainscope already, and runs in each exactly what the launched process would
run: ``trainscope.cli.main`` on the worker's command line, in the environment the
launcher built, with torchrun's variables for each rank. They are real processes: gloo
over 127.0.0.1, their own signals, exit codes and files.

What is not torchrun's: no elastic agent (a failure stops the other ranks and is written
to ``agent.json`` as ``trainscope.launch.agent`` writes it, but nothing restarts), and no
fresh interpreter (imports from the current directory, start-up time and the process's
own memory are not what a real launch shows). Tests of those use real launches: the
fixture hands any launch it cannot stand in for (``--max-restarts``, several nodes) to
``subprocess.Popen``, unchanged.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import traceback
import types
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from trainscope.launch import launcher

# Seconds an agent gives the other ranks to stop after one failed or a signal came, as
# torchrun does, before it kills them.
STOP_GRACE_S = 30.0
# Seconds between the agent's looks at its ranks: torchrun's --monitor-interval default.
# A faster look would stop the other ranks sooner after one fails than torchrun does.
MONITOR_INTERVAL_S = 0.1


def _exit_code(status: int) -> int:
    """A ``waitpid`` status as ``Popen.returncode`` gives it (a signal: its negative)."""
    if os.WIFSIGNALED(status):
        return -os.WTERMSIG(status)
    return os.WEXITSTATUS(status)


def run_worker(args: Sequence[str], env: Mapping[str, str]) -> None:
    """In a forked child: become the launched ``trainscope ARGS`` process, then exit."""
    code = 1
    try:
        os.environ.clear()
        os.environ.update(env)
        signal.signal(signal.SIGINT, signal.default_int_handler)  # a fresh interpreter's
        for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1,
                    signal.SIGALRM):  # fmt: skip
            signal.signal(sig, signal.SIG_DFL)
        from trainscope.profiling import system
        from trainscope.runtime import signals

        signals._fired.clear()  # the test process's own signals and runs are not ours
        system._runs_started = 0
        signals.die_with_parent()
        sys.argv = ["trainscope", *args]
        from trainscope.cli import main

        code = main(list(args))
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:  # what an interpreter would print before exiting 1
        traceback.print_exc()
        code = 1
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _rank_env(env: Mapping[str, str], rank: int, nproc: int, port: int, run_id: str) -> dict:
    """The variables torchrun gives each worker of a one-node launch."""
    out = dict(env)
    out.setdefault("OMP_NUM_THREADS", "1")  # torchrun's default where it is unset
    for name in ("RANK", "LOCAL_RANK", "ROLE_RANK"):
        out[name] = str(rank)
    for name in ("WORLD_SIZE", "LOCAL_WORLD_SIZE", "ROLE_WORLD_SIZE"):
        out[name] = str(nproc)
    out.update(
        GROUP_RANK="0", GROUP_WORLD_SIZE="1", ROLE_NAME="default",
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
        TORCHELASTIC_RESTART_COUNT="0", TORCHELASTIC_MAX_RESTARTS="0",
        TORCHELASTIC_RUN_ID=run_id, TORCHELASTIC_USE_AGENT_STORE="False",
        TRAINSCOPE_PARENT_PID=str(os.getpid()),
    )  # fmt: skip
    return out


def _stop(pids: dict[int, int], codes: dict[int, int], sig: int) -> None:
    """Send ``sig`` to the ranks still running, wait for them, then kill what is left."""
    for pid in pids:
        if pid not in codes:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
    deadline = time.monotonic() + STOP_GRACE_S
    while len(codes) < len(pids):
        _reap(pids, codes)
        if time.monotonic() > deadline:
            for pid in set(pids) - set(codes):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            deadline = float("inf")
        time.sleep(0.01)


def _reap(pids: dict[int, int], codes: dict[int, int]) -> None:
    for pid in set(pids) - set(codes):
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            codes[pid] = _exit_code(status)


def _agent(worker: Sequence[str], nproc: int, env: Mapping[str, str]) -> None:
    """In a forked child: torchrun's part, for one node and no restarts."""
    code = 1
    try:
        os.setsid()
        from trainscope.runtime.dist import free_port

        port, run_id = free_port(), f"forked-{os.getpid()}"
        pids: dict[int, int] = {}
        for rank in range(nproc):
            rank_env = _rank_env(env, rank, nproc, port, run_id)  # before the fork: our pid
            pid = os.fork()
            if pid == 0:
                run_worker(worker, rank_env)
            pids[pid] = rank
        code = _watch(pids, env.get("TRAINSCOPE_LAUNCH_DIR"))
    except BaseException:
        traceback.print_exc()
    finally:
        os._exit(code)


def _watch(pids: dict[int, int], launch_dir: str | None) -> int:
    """Wait for the ranks; the first failure stops the rest (and is written where the
    launcher reads it), a signal to this process is passed on to every rank."""
    stop: list[int] = []

    def handler(signum: int, frame: Any) -> None:
        stop.append(signum)

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(sig, handler)
    codes: dict[int, int] = {}
    failed: dict[int, tuple[int, float]] = {}
    while len(codes) < len(pids):
        _reap(pids, codes)
        for pid, c in codes.items():
            if c != 0 and pids[pid] not in failed:
                failed[pids[pid]] = (c, time.time())
        if stop or failed:
            _stop(pids, codes, stop[0] if stop else signal.SIGTERM)
            break
        time.sleep(MONITOR_INTERVAL_S)
    if stop:
        return 128 + stop[0]
    if not failed:
        return 0
    if launch_dir:
        first = min(failed, key=lambda r: failed[r][1])
        failures = {
            str(r): {"exitcode": c, "text": _failure_text(c), "time": t}
            for r, (c, t) in failed.items()
        }
        data = {"first_rank": first, "failures": failures, "time": time.time()}
        (Path(launch_dir) / "agent.json").write_text(json.dumps(data))
    return 1


def _failure_text(code: int) -> str:
    from trainscope.launch.agent import _failure_text as text

    return text(code)


class ForkedProcess:
    """What ``subprocess.Popen`` returns, for a process forked by this module:
    ``ForkedProcess(target, *args)`` forks, and runs ``target(*args)`` in the child, which
    must end with ``os._exit``.

    The fork is made from a thread of its own, which becomes the child's main thread and
    then waits for the child. Forked from the test process's main thread, the child would
    inherit that thread's OpenMP pool (libgomp keeps one per thread that has led a
    parallel region) without its threads: its first parallel region on more than one
    thread would wait for them forever, as a run did in CI once an earlier test had
    trained on two threads. A new thread has no pool to inherit, and Python makes the
    forking thread the child's main thread, so its signal handlers are set as in a new
    process. The thread lives as long as the child because Linux sends the child's
    "parent died" signal (``PR_SET_PDEATHSIG``, which launched processes ask for) when
    the thread that forked it ends, not the process.

    The child leaves the test process's objects to the test process: it freezes them
    (``gc.freeze``) before it runs anything. A DDP reducer and its gloo process group,
    left in a reference cycle by an earlier test, would otherwise be collected in the
    child, whose destructor waits for the group's threads, which were not forked.
    """

    def __init__(self, target: Any, *args: Any) -> None:
        self.returncode: int | None = None
        _warm()
        sys.stdout.flush()
        sys.stderr.flush()
        started: queue.SimpleQueue[int | OSError] = queue.SimpleQueue()

        def fork_and_wait() -> None:
            try:
                pid = os.fork()
            except OSError as e:
                started.put(e)
                return
            if pid == 0:
                gc.freeze()  # the test process's garbage is not ours to collect: see above
                target(*args)
                os._exit(1)  # not reached: each target exits
            started.put(pid)
            _, status = os.waitpid(pid, 0)
            self.returncode = _exit_code(status)

        self._waiter = threading.Thread(target=fork_and_wait, name="forked-launch", daemon=True)
        self._waiter.start()
        pid = started.get()
        if isinstance(pid, OSError):
            raise pid
        self.pid = pid

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        self._waiter.join(timeout)
        if self.returncode is None:
            raise subprocess.TimeoutExpired(["forked"], timeout or 0)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            os.kill(self.pid, sig)


def _parse_agent(argv: Sequence[str]) -> tuple[int, list[str]] | None:
    """(processes per node, the worker's ``trainscope`` arguments) of a one-node launch
    without restarts; None for any other torchrun command line."""
    flags, worker = argv[3 : argv.index("--")], list(argv[argv.index("--") + 1 :])
    nproc = None
    for flag in flags:
        name, _, value = flag.partition("=")
        if name == "--nproc-per-node":
            nproc = int(value)
        elif name == "--max-restarts" or (name == "--nnodes" and value != "1"):
            return None
    if nproc is None or worker[1:3] != ["-c", launcher.WORKER_CODE]:
        return None
    return nproc, worker[3:]


def _warm() -> None:
    """Import here, once, what each launched process would import: forked, they have it."""
    import torch._dynamo  # noqa: F401  (every optimizer's first step imports it)
    import torch.distributed.fsdp  # noqa: F401
    import torch.distributed.tensor  # noqa: F401

    import trainscope.train.run  # noqa: F401


def fork_trainscope(args: Sequence[str], env: Mapping[str, str]) -> ForkedProcess:
    """``trainscope ARGS`` in a process forked from this one, in environment ``env``: what
    a scheduler's task (an ``srun`` task, a pod) would start, without a fresh interpreter.
    Its output goes to this process's file descriptors (``capfd`` reads it)."""
    return ForkedProcess(run_worker, list(args), dict(env))


@contextlib.contextmanager
def forked_launches() -> Iterator[list[tuple[str, list[str]]]]:
    """Within this block, the launcher forks what it would start (see :func:`forked_popen`).
    Yields the list of what was launched: ``("torchrun", worker args)`` for a forked
    launch of ranks, ``("process", args)`` for one forked process, ``("popen", argv)`` for
    a command handed to ``subprocess.Popen``."""
    launched: list[tuple[str, list[str]]] = []

    def popen(argv: Sequence[str], **kwargs: Any) -> Any:
        return forked_popen(argv, launched=launched, **kwargs)

    shim = types.SimpleNamespace(**{**vars(subprocess), "Popen": popen})
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(launcher, "subprocess", shim)
        yield launched


def forked_popen(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    launched: list[tuple[str, list[str]]] | None = None,
    **kwargs: Any,
) -> Any:
    """``subprocess.Popen`` for the launcher: a launch of torchrun or of one worker is
    forked from this process; any other command line goes to ``subprocess.Popen``. Each
    is appended to ``launched`` (see :func:`forked_launches`)."""
    import torch.distributed as dist

    note = launched.append if launched is not None else (lambda _: None)
    if len(argv) > 2 and argv[1] == "-c" and not (dist.is_available() and dist.is_initialized()):
        if argv[2] == launcher.AGENT_CODE:
            parsed = _parse_agent(argv)
            if parsed is not None:
                note(("torchrun", parsed[1]))
                return ForkedProcess(_agent, parsed[1], parsed[0], env)
        elif argv[2] == launcher.WORKER_CODE:

            def single(args: Sequence[str]) -> None:
                os.setsid()
                run_worker(args, {**env})

            note(("process", list(argv[3:])))
            return ForkedProcess(single, list(argv[3:]))
    note(("popen", list(argv)))
    return subprocess.Popen(argv, env=env, **kwargs)
