"""Two "nodes" on one machine: 2 x ``trainscope run --nnodes 2 --node-rank R``, 1 process each.

Each command is what a user types on one machine of a cluster; here both run on 127.0.0.1
with a static rendezvous (node 0 hosts the store at ``--master-port``). Together they form
one world of two ranks that trains exactly what one process trains on the global batch.

A real launch where it counts: torchrun's own agent code does the static rendezvous at
node 0's store and starts each node's worker, a fresh interpreter, as on a user's machines
(tests/forked_launch.py does not stand in for launches of several nodes). What only
parses, writes and waits is forked from the test process instead of started afresh: each
node's ``trainscope run`` command (``fork_trainscope``) and the torchrun agent its
launcher starts (:func:`forked_agents`, the agent's ``main`` on the launcher's own
command line and environment). That saves four of the six interpreter start-ups (~3 s of
torch import each). ``slow``: two workers start, several seconds.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import types
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import scaled
from tests.forked_launch import ForkedProcess, fork_trainscope
from tests.strategies.test_parity import COMMON, assert_weights_close, run_cli, weights
from trainscope.launch import launcher
from trainscope.runtime.dist import free_port

NODES = 2
# Both nodes start torchrun, whose agent and worker import torch: the whole job must end
# well within this (a quiet 2-core machine: under 10 s).
WAIT_S = 120


def tail(path: Path, n: int = 3000) -> str:
    text = path.read_text(errors="replace") if path.exists() else ""
    return text[-n:]


def stop(procs: list[subprocess.Popen[bytes]]) -> None:
    """End what is still running. SIGTERM first, to each node's process group (trainscope
    and its torchrun): torchrun's handler then stops its workers, which it started in
    sessions of their own; SIGKILL whatever is left after a grace period."""
    running = [p for p in procs if p.poll() is None]
    for p in running:
        os.killpg(p.pid, signal.SIGTERM)
    for p in running:
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


def _node_env() -> dict[str, str]:
    """The test process's environment without a rank of its own (a node is not a rank)."""
    return {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}


def run_nodes(argvs: list[list[str]], logs_dir: Path, wait_s: float) -> list[Path]:
    """Start one command per node, each in a session of its own (so ``stop`` can end its
    torchrun and workers too), wait for all to exit 0 within ``wait_s``; their logs."""
    env = _node_env()
    procs: list[subprocess.Popen[bytes]] = []
    logs = [logs_dir / f"node{node}.log" for node in range(len(argvs))]
    try:
        for argv, log in zip(argvs, logs):
            with log.open("wb") as f:
                procs.append(
                    subprocess.Popen(
                        argv, stdout=f, stderr=subprocess.STDOUT, env=env, start_new_session=True
                    )
                )
        deadline = time.monotonic() + wait_s
        codes = [p.wait(timeout=max(deadline - time.monotonic(), 1)) for p in procs]
        assert codes == [0] * len(argvs), "\n".join(f"--- {p.name}\n{tail(p)}" for p in logs)
    finally:
        stop(procs)
    return logs


def _agent_popen(argv: Sequence[str], *, env: dict[str, str], **kwargs: Any) -> Any:
    """``subprocess.Popen`` for the launcher: its torchrun agent is forked (in a session of
    its own, as ``start_new_session`` asks) and runs ``trainscope.launch.agent.main`` on
    the same arguments; anything else goes to ``subprocess.Popen``."""
    if len(argv) < 3 or list(argv[1:3]) != ["-c", launcher.AGENT_CODE]:
        return subprocess.Popen(argv, env=env, **kwargs)

    def agent() -> None:  # a fresh interpreter's signals, the launcher's environment
        code = 1
        try:
            os.setsid()
            os.environ.clear()
            os.environ.update(env)
            signal.signal(signal.SIGINT, signal.default_int_handler)
            for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGALRM):
                signal.signal(sig, signal.SIG_DFL)
            from trainscope.launch.agent import main

            code = main(list(argv[3:]))
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)

    return ForkedProcess(agent)


@contextmanager
def forked_agents() -> Iterator[None]:
    """Within this block (and in processes forked within it), the launcher forks its
    torchrun agent instead of starting it afresh (:func:`_agent_popen`)."""
    shim = types.SimpleNamespace(**{**vars(subprocess), "Popen": _agent_popen})
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(launcher, "subprocess", shim)
        yield


def fork_nodes(argss: list[list[str]], logs_dir: Path, wait_s: float) -> list[Path]:
    """``trainscope ARGS`` for each node, forked from this process with its output in a
    log of its own, its torchrun agent forked too (:func:`forked_agents`); wait for all
    to exit 0 within ``wait_s``; their logs. The workers torchrun starts are fresh
    interpreters, as under :func:`run_nodes`."""
    procs: list[ForkedProcess] = []
    logs = [logs_dir / f"node{node}.log" for node in range(len(argss))]
    try:
        with forked_agents():  # the patch goes with each fork; this process launches none
            for args, log in zip(argss, logs):
                procs.append(_fork_into(log, args))
        deadline = time.monotonic() + wait_s
        codes = [p.wait(timeout=max(deadline - time.monotonic(), 1)) for p in procs]
        assert codes == [0] * len(argss), "\n".join(f"--- {p.name}\n{tail(p)}" for p in logs)
    finally:
        # SIGTERM: each node's launcher passes it to its torchrun and waits for it.
        running = [p for p in procs if p.poll() is None]
        for p in running:
            p.send_signal(signal.SIGTERM)
        for p in running:
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                p.send_signal(signal.SIGKILL)  # its torchrun dies with it (die_with_parent)
                p.wait()
    return logs


def _fork_into(log: Path, args: list[str]) -> ForkedProcess:
    """:func:`fork_trainscope` with the child's stdout and stderr going to ``log``."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    try:
        with log.open("wb") as f:
            os.dup2(f.fileno(), 1)
            os.dup2(f.fileno(), 2)
            return fork_trainscope(args, _node_env())
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        os.close(saved[0])
        os.close(saved[1])


@pytest.mark.slow
@pytest.mark.timeout(WAIT_S + 60)
def test_two_nodes_of_one_process_each(tmp_path: Path) -> None:
    single = tmp_path / "single"
    run_cli(single)
    out, port = tmp_path / "nodes", free_port()
    argss = []
    for node in range(NODES):
        args = [*COMMON, "--strategy", "allreduce", "--nnodes", str(NODES)]
        args += ["--node-rank", str(node), "--master-addr", "127.0.0.1"]
        args += ["--master-port", str(port), "--out", str(out)]
        argss.append(args)
    fork_nodes(argss, tmp_path, scaled(WAIT_S))

    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "completed"
    assert summary["world_size"] == NODES and summary["strategy"] == "allreduce"
    assert len(summary["ranks"]) == NODES
    assert [r["rank"] for r in summary["ranks"]] == [0, 1]
    assert all(r["local_rank"] == 0 for r in summary["ranks"])  # one process per node
    assert (out / "ranks" / "rank1" / "summary.json").is_file()
    assert_weights_close(weights(out), weights(single))
