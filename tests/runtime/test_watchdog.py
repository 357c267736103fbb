"""The stall watchdog: the verdict rule on a fake store and clock, a real TCPStore in one
process, and two gloo processes where rank 1 stops before an all_reduce rank 0 waits in."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pytest

from trainscope.runtime.dist import free_port
from trainscope.runtime.watchdog import (
    Progress,
    StalledRank,
    StallVerdict,
    StallWatchdog,
    decode,
    encode,
)


class FakeStore:
    """An in-memory store. ``get`` of a missing key raises where a real store would block,
    so a watchdog that waits on a missing key fails the test instead of hanging it."""

    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}
        self.fail = False

    def set(self, key: str, value: str | bytes) -> None:
        if self.fail:
            raise RuntimeError("store gone")
        self.data[key] = value.encode() if isinstance(value, str) else value

    def get(self, key: str) -> bytes:
        if self.fail or key not in self.data:
            raise RuntimeError(f"would block on missing key {key}")
        return self.data[key]

    def check(self, keys: list[str]) -> bool:
        if self.fail:
            raise RuntimeError("store gone")
        return all(k in self.data for k in keys)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make_world(
    n: int, timeout_s: float = 60.0
) -> tuple[FakeStore, FakeClock, list[Progress], list[StallWatchdog]]:
    """n ranks sharing one fake store and clock; the watchdogs are polled by hand."""
    store, clock = FakeStore(), FakeClock()
    progress = [Progress() for _ in range(n)]
    dogs = [
        StallWatchdog(store, r, n, progress[r], timeout_s, on_stall=lambda v: None, clock=clock)
        for r in range(n)
    ]
    return store, clock, progress, dogs


def poll_all(dogs: list[StallWatchdog]) -> list[StallVerdict | None]:
    return [d.poll() for d in dogs]


def settle(dogs: list[StallWatchdog]) -> None:
    """Two rounds: every rank publishes, then every rank reads what the others published."""
    poll_all(dogs)
    poll_all(dogs)


def step_through(p: Progress, step: int, stages: tuple[str, ...]) -> None:
    for stage in stages:
        p.advance(step, stage)


STAGES = ("data_wait", "forward", "backward", "comm", "optimizer")


def test_progress_counts_calls_and_keeps_the_last_position() -> None:
    p = Progress()
    assert p.position == (0, 0, "")
    step_through(p, 0, STAGES)
    p.advance(1, "data_wait")
    assert (p.counter, p.step, p.stage) == (6, 1, "data_wait")


def test_encode_decode_round_trip() -> None:
    p = Progress()
    p.advance(7, "eval|extra")
    assert decode(encode(p.position).encode()) == p.position
    assert decode(b"garbage") is None


def test_equally_slow_ranks_are_not_a_stall() -> None:
    _, clock, progress, dogs = make_world(3)
    for p in progress:
        step_through(p, 0, STAGES)
        p.advance(1, "forward")  # one very long forward pass, on every rank
    settle(dogs)
    clock.now += 600
    assert poll_all(dogs) == [None, None, None]


def test_rank_behind_and_idle_past_the_timeout_is_named() -> None:
    _, clock, progress, dogs = make_world(3)
    for r, p in enumerate(progress):
        step_through(p, 5, STAGES)
        p.advance(6, "data_wait")
        if r != 1:  # ranks 0 and 2 got their batch and wait in backward's all-reduce
            step_through(p, 6, ("h2d", "forward", "backward"))
    settle(dogs)
    clock.now += 59
    assert poll_all(dogs) == [None, None, None]  # not yet: the timeout is 60 s
    clock.now += 2
    verdicts = poll_all(dogs)
    for v in verdicts:  # every rank reaches the same verdict on its own
        assert v is not None
        assert [(s.rank, s.step, s.stage) for s in v.stalled] == [(1, 6, "data_wait")]
        assert v.stalled[0].idle_s == pytest.approx(61)
        assert v.message() == (
            "rank 1 made no progress for 61 s (last: step 6, data_wait) while the other ranks"
            " waited; stall timeout 60 s (--stall-timeout)"
        )


def test_rank_behind_but_advancing_is_not_a_stall() -> None:
    _, clock, progress, dogs = make_world(2)
    step_through(progress[0], 0, STAGES)
    for t in range(10):  # rank 1 is slow, one stage behind rank 0, but moving
        progress[1].advance(0, STAGES[t % len(STAGES)])
        clock.now += 30
        assert poll_all(dogs) == [None, None]


def test_waiters_are_not_blamed_while_the_leader_still_advances() -> None:
    # Rank 0 works through something alone (its counter grows) while rank 1 waits: the
    # one behind is idle, but the job is not stuck.
    _, clock, progress, dogs = make_world(2)
    for _ in range(10):
        progress[0].advance(3, "evaluation")
        clock.now += 30
        assert poll_all(dogs) == [None, None]


def test_a_rank_that_never_published_is_named_once_the_others_wait() -> None:
    store, clock, progress, dogs = make_world(2)
    step_through(progress[0], 0, STAGES)
    assert dogs[0].poll() is None  # rank 1's key is missing: no blocking get, no verdict
    assert dogs[0].key(1) not in store.data
    clock.now += 60
    v = dogs[0].poll()
    assert v is not None and [s.rank for s in v.stalled] == [1]
    assert "(last: no progress reported)" in v.message()


def test_several_stalled_ranks_make_one_line() -> None:
    stalled = [StalledRank(r, 4, "data\nwait", 70.0 + r) for r in (3, 1, 2)]
    msg = StallVerdict(stalled, timeout_s=60).message(setting="dist.stall_timeout_s")
    assert "\n" not in msg
    assert msg.startswith("ranks 1, 2, 3 made no progress for 71 s or more (last: rank 1 step 4")
    assert msg.endswith("stall timeout 60 s (dist.stall_timeout_s)")
    many = StallVerdict([StalledRank(r, 1, "forward", 61.0) for r in range(1, 20)], 60)
    assert "\n" not in many.message() and "and 11 more" in many.message()


def test_thread_reports_once_and_stops_quietly_when_the_store_goes() -> None:
    store, clock, progress, dogs = make_world(2, timeout_s=1.0)
    calls: list[StallVerdict] = []
    dog = StallWatchdog(store, 0, 2, progress[0], 1.0, on_stall=calls.append, poll_s=0.01)
    step_through(progress[0], 0, STAGES)
    with dog:
        assert dog.wait_for_verdict(30) is not None  # rank 1 never publishes: behind, idle
    assert len(calls) == 1 and calls[0].stalled[0].rank == 1

    store.fail = True  # rank 0 exited, taking the store with it
    quiet = StallWatchdog(store, 1, 2, progress[1], 1.0, on_stall=calls.append, poll_s=0.01)
    quiet.start()
    assert quiet.wait_for_verdict(30) is None  # the thread ended without a verdict
    assert not quiet.running
    quiet.stop()
    quiet.stop()  # idempotent
    assert len(calls) == 1


@pytest.mark.timeout(60)
def test_real_tcp_store_in_one_process() -> None:
    """TCPStore + PrefixStore (what a process group's default store is): keys missing at
    first, two watchdogs in threads, then the server goes away."""
    import torch.distributed as dist

    port = free_port()
    server = dist.TCPStore(
        "127.0.0.1", port, 2, True, timeout=timedelta(seconds=30), wait_for_workers=False
    )
    progress = [Progress(), Progress()]
    verdicts: dict[int, StallVerdict] = {}
    done = threading.Event()

    def on_stall(rank: int) -> Callable[[StallVerdict], None]:
        def record(v: StallVerdict) -> None:
            verdicts[rank] = v
            if len(verdicts) == 2:
                done.set()

        return record

    dogs = []
    for r in range(2):
        client = dist.TCPStore("127.0.0.1", port, 2, False, timeout=timedelta(seconds=30))
        store = dist.PrefixStore("default_pg/", client)
        dogs.append(StallWatchdog(store, r, 2, progress[r], 1.0, on_stall(r), poll_s=0.05))
    assert dogs[0].poll() is None  # rank 1's key is not there yet: returns at once
    step_through(progress[0], 2, STAGES)
    progress[1].advance(2, "data_wait")
    for d in dogs:
        d.start()
    assert done.wait(30), verdicts
    for v in verdicts.values():
        assert [(s.rank, s.step, s.stage) for s in v.stalled] == [(1, 2, "data_wait")]
        assert v.stalled[0].idle_s >= 1.0

    # A watchdog whose store server has gone stops without a verdict or an exception.
    # (Its long timeout: only the store's end can stop it within the test.)
    quiet = StallWatchdog(dogs[1].store, 1, 2, Progress(), 600.0, on_stall(1), poll_s=0.05)
    quiet.start()
    assert quiet.running
    del server
    assert quiet.wait_for_verdict(30) is None
    assert not quiet.running
    quiet.stop()


WORKER = r"""
import json, os, sys, time
from datetime import timedelta

import torch
import torch.distributed as dist

from trainscope.runtime.watchdog import Progress, StallWatchdog

rank, world, port, out = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
# A long process-group timeout: the watchdog, not gloo, must be what ends the wait.
dist.init_process_group(
    "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
    timeout=timedelta(seconds=60),
)
store = dist.distributed_c10d._get_default_store()
progress = Progress()


def on_stall(verdict):
    path = os.path.join(out, f"verdict-{rank}.json")
    data = {
        "stalled": [[s.rank, s.step, s.stage, s.idle_s] for s in verdict.stalled],
        "message": verdict.message(),
    }
    with open(path + ".tmp", "w") as f:
        json.dump(data, f)
    os.replace(path + ".tmp", path)
    # Rank 0 hosts the store and either rank's exit breaks the other's collective: wait
    # (bounded) until every rank has its verdict, so the test sees each rank's own.
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and not all(
        os.path.exists(os.path.join(out, f"verdict-{r}.json")) for r in range(world)
    ):
        time.sleep(0.05)
    os._exit(3)


t = torch.ones(4)
with StallWatchdog(store, rank, world, progress, timeout_s=3, poll_s=0.2, on_stall=on_stall):
    for step in range(6):
        progress.advance(step, "data_wait")
        if rank == 1 and step == 3:
            time.sleep(120)  # alive, not progressing: stuck "in its data loader"
        progress.advance(step, "forward")
        progress.advance(step, "comm")
        dist.all_reduce(t)
        progress.advance(step, "optimizer")
dist.destroy_process_group()
"""


@pytest.mark.timeout(90)
def test_two_processes_name_the_stalled_rank(tmp_path: Path) -> None:
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    port, world = free_port(), 2
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    procs: list[subprocess.Popen[bytes]] = []
    logs = [tmp_path / f"rank{r}.log" for r in range(world)]
    try:
        for r in range(world):
            with logs[r].open("wb") as f:
                argv = [sys.executable, str(script), str(r), str(world), str(port), str(tmp_path)]
                procs.append(subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, env=env))
        # Ends well before rank 1's 120 s sleep and the 60 s process-group timeout.
        deadline = time.monotonic() + 75
        codes = [p.wait(timeout=max(deadline - time.monotonic(), 1)) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    output = "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}" for p in logs)
    assert codes == [3, 3], output  # 3: each process ended through its own on_stall
    for r in range(world):
        verdict = json.loads((tmp_path / f"verdict-{r}.json").read_text())
        [(rank, step, stage, idle_s)] = verdict["stalled"]
        assert (rank, step, stage) == (1, 3, "data_wait"), (r, verdict)
        assert idle_s >= 3.0  # the rule waited for the timeout before judging
        assert "\n" not in verdict["message"]
        assert verdict["message"].startswith("rank 1 made no progress for ")
