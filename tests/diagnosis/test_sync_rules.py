"""DDP with every gradient in one bucket: its all-reduce overlaps nothing of backward
(records written by the test)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.diagnosis.test_rules import HEALTHY, rules_fired, write_run
from tests.reports.test_stragglers import slow_data_on_rank_1, write_ranks
from trainscope.diagnosis import diagnose
from trainscope.diagnosis.facts import read_facts
from trainscope.diagnosis.sync_rules import ddp_overlap_lost

pytestmark = pytest.mark.timeout(60)

GRADS = {"tensor_bytes": [1 << 20] * 4, "unit_bytes": [4 << 20]}  # 4 MiB in all


def ddp_run(path: Path, buckets_per_step: int, inflight_ms: float, cores: int = 8) -> Path:
    comm = {"hook_buckets": 40 * buckets_per_step, "hook_inflight_s": 40 * inflight_ms / 1e3}
    cpu = {"cores": cores, "threads": 1, "processes_on_node": 2, "demand_cores": 2}
    summary = {"strategy": "ddp", "world_size": 2, "comm": comm, "gradients": GRADS, "cpu": cpu}
    return write_run(path, HEALTHY, summary=summary)


def test_one_bucket_in_flight_for_much_of_the_step_proposes_smaller_buckets(
    tmp_path: Path,
) -> None:
    (f,) = diagnose(ddp_run(tmp_path / "d", 1, inflight_ms=1.5)).findings  # 60% of 2.51 ms
    assert f.rule == "ddp-overlap-lost" and f.fix == {"--bucket-mb": "1"}  # 4 MiB / 4
    assert "all 4 gradients in one bucket" in f.problem and "60%" in f.problem
    assert f.gain_share == pytest.approx(1.5 / 2.51 / 2, rel=0.01)
    assert f.command.endswith(f"--bucket-mb 1 --out {tmp_path / 'd'}-ddp-overlap-lost")


def test_several_buckets_or_a_short_sync_are_left_alone(tmp_path: Path) -> None:
    assert rules_fired(ddp_run(tmp_path / "b", 3, inflight_ms=1.5)) == []
    assert rules_fired(ddp_run(tmp_path / "s", 1, inflight_ms=0.2)) == []  # 8% of the step
    # Every core computing (2 ranks x 1 thread on 2 cores): nothing to overlap on.
    assert rules_fired(ddp_run(tmp_path / "c", 1, inflight_ms=1.5, cores=2)) == []
    hand = write_run(tmp_path / "h", summary={"strategy": "allreduce", "comm": {}})
    assert ddp_overlap_lost(read_facts(hand)) is None


def test_waiting_for_a_straggler_is_not_taken_for_lost_overlap(tmp_path: Path) -> None:
    run = write_ranks(tmp_path / "r", slow_data_on_rank_1(strategy="ddp"), strategy="ddp")
    summary = json.loads((run / "summary.json").read_text())
    cpu = {"cores": 8, "threads": 1, "processes_on_node": 2}
    summary.update(steps=20, comm={"hook_buckets": 20, "hook_inflight_s": 0.2},
                   gradients=GRADS, cpu=cpu)  # fmt: skip
    (run / "summary.json").write_text(json.dumps(summary))
    facts = read_facts(run)
    assert facts.free_cores() == 6 and ddp_overlap_lost(facts) is None
