"""The sweep across two "nodes" on one machine: 2 x ``trainscope collectives --nnodes 2
--node-rank R``, one process each, as a user types it on two machines. Node 0 records.

A real launch: each node's ``trainscope collectives`` is forked from the test process (as
a scheduler's task would start it, tests/forked_launch.py), and what it starts, torchrun
for two nodes and its worker, are fresh processes, as on a user's two machines: the
end-to-end test of how ``trainscope collectives`` starts its processes, where the other
collectives tests fork their ranks. ``slow``: several seconds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.strategies.test_two_nodes import fork_nodes
from trainscope.runtime.dist import free_port

WAIT_S = 180


@pytest.mark.slow
@pytest.mark.timeout(WAIT_S + 60)
def test_a_sweep_across_two_nodes_of_one_process_each(tmp_path: Path) -> None:
    port = free_port()
    outs = [tmp_path / "node0-study", tmp_path / "node1-study"]
    argss = []
    for node in range(2):
        args = ["collectives", "--nproc", "1"]
        args += ["--nnodes", "2", "--node-rank", str(node), "--master-port", str(port)]
        args += ["--sizes", "1K,64K", "--ops", "all_reduce,all_gather", "--repeats", "3"]
        args += ["--warmup", "1", "--no-report", "--out", str(outs[node])]
        argss.append(args)
    logs = fork_nodes(argss, tmp_path, WAIT_S)
    data = json.loads((outs[0] / "study.json").read_text())
    assert data["status"] == "completed" and data["done"] == 4
    assert data["options"]["world_size"] == 2 and data["options"]["nnodes"] == 2
    assert all(r["wrong"] == 0 and r["world_size"] == 2 for r in data["results"])
    assert all(e["ok"] for e in data["examples"]) and len(data["machine"]["ranks"]) == 2
    assert set(data["cost_model"]["fits"]) == {"all_reduce", "all_gather"}
    assert not outs[1].exists()  # only node 0 records
    assert "all_reduce" in logs[0].read_text()  # node 0 printed the tables
