"""Runs the collectives lab in real gloo worlds of 2 and 3 CPU processes (test helper).

Each world is started once (:func:`run_world`): every process joins a gloo group on
127.0.0.1, runs the semantic examples, the identities and a tiny bandwidth sweep, and writes
what it got to ``rank<r>.json``; the tests then read those files. Everything runs in one
start. The processes are forked from the test process (``fork``, not ``spawn``): they have
torch and trainscope imported already, where a fresh interpreter pays a few seconds for
them on a busy 2-core machine; what is tested is what the collectives compute, not how the
processes started (``trainscope collectives`` is launched for real in test_two_nodes.py).
"""

from __future__ import annotations

import json
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from tests.conftest import scaled

# The sweep of the distributed tests: two sizes, two repeats (positive times and a correct
# result are what is checked; the numbers themselves mean nothing on a shared CPU).
SIZES = (1024, 64 * 1024)
WARMUP, REPEATS = 1, 2
# Long enough for a loaded machine, short enough that a hang fails the test, not the suite
# (forked ranks start in well under a second: the deadline is for the work and a hang).
GROUP_TIMEOUT_S = 45
WORLD_DEADLINE_S = 60


def _worker(rank: int, world: int, port: int, out_dir: str) -> None:
    """One rank: everything the tests check, written to ``out_dir/rank<rank>.json``."""
    import torch
    import torch.distributed as dist

    from trainscope.collectives import bandwidth, semantics

    torch.set_num_threads(1)  # two cores shared by up to three ranks and other agents
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world,
        timeout=timedelta(seconds=GROUP_TIMEOUT_S),
    )
    try:
        last = world - 1  # a root other than 0, so that src/dst are really honoured
        result: dict[str, Any] = {
            "rank": rank,
            "examples": semantics.run_examples(),
            "rooted_last": [semantics.run_example(op, root=last) for op in semantics.ROOTED],
            "identities": semantics.check_identities(chunk=64),
            "identities_last": semantics.check_identities(chunk=64, root=last, seed=1),
            "sweep": bandwidth.sweep(list(SIZES), warmup=WARMUP, repeats=REPEATS),
        }
        dist.barrier()
    finally:
        dist.destroy_process_group()
    path = Path(out_dir) / f"rank{rank}.json"
    path.with_suffix(".tmp").write_text(json.dumps(result))
    path.with_suffix(".tmp").replace(path)


def run_world(world: int, out_dir: Path) -> list[dict[str, Any]]:
    """Start ``world`` processes, wait for them (bounded), return each rank's results."""
    import torch.distributed as dist
    import torch.multiprocessing as mp

    from trainscope.runtime.dist import free_port

    # A forked rank must not inherit a process group of this process (a test's world of one).
    assert not (dist.is_available() and dist.is_initialized()), "a process group is open here"
    ctx = mp.start_processes(
        _worker,
        args=(world, free_port(), str(out_dir)),
        nprocs=world,
        join=False,
        start_method="fork",
    )
    deadline = time.monotonic() + scaled(WORLD_DEADLINE_S)
    try:
        # join() raises, with the child's traceback, as soon as one rank fails.
        while not ctx.join(timeout=1):
            if time.monotonic() > deadline:
                raise TimeoutError(f"world of {world} still running after {WORLD_DEADLINE_S} s")
    finally:
        for p in ctx.processes:
            if p.is_alive():
                p.kill()
                p.join()
    return [json.loads((out_dir / f"rank{r}.json").read_text()) for r in range(world)]
