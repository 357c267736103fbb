"""Two "nodes" on one machine: 2 x ``trainscope run --nnodes 2 --node-rank R``, 1 process each.

Each command is what a user types on one machine of a cluster; here both run on 127.0.0.1
with a static rendezvous (node 0 hosts the store at ``--master-port``). Together they form
one world of two ranks that trains exactly what one process trains on the global batch.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.strategies.test_parity import COMMON, assert_weights_close, run_cli, weights
from trainscope.runtime.dist import free_port

NODES = 2
# Both nodes import torch and start torchrun; the whole job must end well within this.
WAIT_S = 240


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


def run_nodes(argvs: list[list[str]], logs_dir: Path, wait_s: float) -> list[Path]:
    """Start one command per node, each in a session of its own (so ``stop`` can end its
    torchrun and workers too), wait for all to exit 0 within ``wait_s``; their logs."""
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
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


@pytest.mark.timeout(WAIT_S + 120)
def test_two_nodes_of_one_process_each(tmp_path: Path) -> None:
    single = tmp_path / "single"
    run_cli(single)
    out, port = tmp_path / "nodes", free_port()
    argvs = []
    for node in range(NODES):
        argv = [sys.executable, "-m", "trainscope.cli", *COMMON]
        argv += ["--strategy", "allreduce", "--nnodes", str(NODES), "--node-rank", str(node)]
        argv += ["--master-addr", "127.0.0.1", "--master-port", str(port), "--out", str(out)]
        argvs.append(argv)
    run_nodes(argvs, tmp_path, WAIT_S)

    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "completed"
    assert summary["world_size"] == NODES and summary["strategy"] == "allreduce"
    assert len(summary["ranks"]) == NODES
    assert [r["rank"] for r in summary["ranks"]] == [0, 1]
    assert all(r["local_rank"] == 0 for r in summary["ranks"])  # one process per node
    assert (out / "ranks" / "rank1" / "summary.json").is_file()
    assert_weights_close(weights(out), weights(single))
