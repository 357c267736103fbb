"""The straggler analysis (every rank's step times read back, the waiting at the gradient
synchronisation, a straggler named only beyond noise) and the doctor's ``straggler`` rule
built on it. Records are written by hand (no torch, no launch); the run report's section
on them is tested in tests/reports/test_stragglers.py, whose record writers are used here.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.reports.test_stragglers import MS, make_steps, slow_data_on_rank_1, write_ranks
from trainscope.diagnosis.facts import read_facts
from trainscope.diagnosis.straggler_rule import straggler
from trainscope.diagnosis.stragglers import (
    NO_STRAGGLER,
    analyze_stragglers,
    clearly_above,
    load_rank_steps,
    sync_stage,
)
from trainscope.records.run_dir import load_run
from trainscope.util.spread import spread

pytestmark = pytest.mark.timeout(60)

# ---------------------------------------------------------------------------------------
# The analysis
# ---------------------------------------------------------------------------------------


def test_clearly_above_needs_disjoint_spreads_and_a_difference_that_matters() -> None:
    low = spread([1.0, 1.1, 1.2, 1.3, 1.4])
    high = spread([2.0, 2.1, 2.2, 2.3, 2.4])
    assert clearly_above(high, [low], floor_s=0.5)
    assert not clearly_above(low, [high], floor_s=0.0)  # below, not above
    assert not clearly_above(high, [low], floor_s=1.5)  # real, but under the floor
    overlapping = spread([1.0, 1.5, 2.1, 2.2, 3.0])
    assert not clearly_above(high, [overlapping], floor_s=0.0)
    assert not clearly_above(spread([5.0]), [spread([1.0])], floor_s=0.0)  # n=1: no spread
    assert not clearly_above(high, [], floor_s=0.0)


def test_sync_stage_follows_the_strategy() -> None:
    stages = ["data_wait", "forward", "backward", "optimizer"]
    assert sync_stage("allreduce", [*stages, "comm"]).stages == ("comm",)
    assert sync_stage("gather-scatter", [*stages, "comm"]).stages == ("comm",)
    ddp = sync_stage("ddp", stages)
    assert ddp.stages == ("backward",) and "inside backward under DDP" in ddp.where
    fsdp = sync_stage("fsdp", stages)
    assert fsdp.stages == ("forward", "backward") and "FSDP" in fsdp.where
    assert sync_stage("ddp", ["data_wait", "h2d"]) is None  # --data-only
    assert sync_stage(None, stages) is None


def test_the_analysis_names_the_rank_and_the_stage(tmp_path: Path) -> None:
    a = analyze_stragglers(slow_data_on_rank_1(), "allreduce")
    assert (a.straggler, a.slow_stage) == (1, "data_wait")
    assert a.sync is not None and a.sync.stages == ("comm",)
    assert a.waiting[1].total_s == 0.0 or a.waiting[1].total_s < a.waiting[0].total_s / 10
    assert len(a.steps) == 20


def test_a_consistent_but_negligible_difference_is_not_a_straggler() -> None:
    # Rank 1's data wait is always 0.05 ms longer: beyond noise, but far below 2% of a step.
    per_rank = {
        0: make_steps(20, seed=0, noise=0.0),
        1: make_steps(20, seed=1, data_wait=0.55 * MS, noise=0.0),
    }
    assert analyze_stragglers(per_rank, "allreduce").findings == [NO_STRAGGLER]


def test_a_slower_rank_nobody_waits_for_is_not_called_a_straggler() -> None:
    # Rank 1 is slow to load, but the communication times say nobody waited for it (as
    # with an asynchronous stage no collective depends on): reported as slower, no more.
    per_rank = {0: make_steps(20, seed=0), 1: make_steps(20, seed=1, data_wait=10 * MS)}
    a = analyze_stragglers(per_rank, "allreduce")
    assert a.straggler is None
    assert len(a.findings) == 1
    assert a.findings[0].startswith("rank 1 is slower: its data wait is ")
    assert "not claimed as a straggler" in a.findings[0]


def test_waiting_without_a_slow_stage_still_names_the_rank_waited_for() -> None:
    per_rank = {0: make_steps(20, seed=0, comm=14 * MS), 1: make_steps(20, seed=1)}
    a = analyze_stragglers(per_rank, "allreduce")
    assert a.straggler == 1 and a.slow_stage is None
    assert a.findings[0].startswith("rank 1 is the straggler: the other rank waits ")
    assert "no single stage of its own is clearly slower" in a.findings[0]


def test_only_steps_every_rank_recorded_are_compared() -> None:
    per_rank = slow_data_on_rank_1(n=20)
    per_rank[1] = per_rank[1][:15]  # a rank that ended early
    a = analyze_stragglers(per_rank, "allreduce")
    assert a.steps == list(range(1, 16))
    assert a.straggler == 1


def test_too_few_steps_claim_nothing() -> None:
    a = analyze_stragglers(slow_data_on_rank_1(n=1), "allreduce")
    assert a.straggler is None
    assert a.findings == ["too few steps recorded by every rank (1) to tell a straggler from noise"]


def test_a_half_written_line_is_skipped(tmp_path: Path) -> None:
    run = write_ranks(tmp_path / "r", slow_data_on_rank_1())
    with open(run / "ranks" / "rank1" / "metrics.jsonl", "a") as f:
        f.write('{"event": "step", "step": 21, "stag')
    assert len(load_rank_steps(load_run(run)).steps[1]) == 20


def test_findings_are_plain_text() -> None:
    # Stage names from the record stay as they are: escaping is the renderer's job.
    per_rank = slow_data_on_rank_1()
    for lines in per_rank.values():
        for line in lines or []:
            line["stages"]["*x* <b>"] = line["stages"].pop("data_wait")
    a = analyze_stragglers(per_rank, "allreduce")
    assert a.findings[0].startswith("rank 1 is the straggler: its *x* <b> is ")


# ---------------------------------------------------------------------------------------
# The doctor's rule
# ---------------------------------------------------------------------------------------


def test_the_rule_names_a_rank_slow_in_its_data(tmp_path: Path) -> None:
    run = write_ranks(tmp_path / "r", slow_data_on_rank_1())
    found = straggler(read_facts(run))
    assert found is not None
    assert found.rule == "straggler"
    assert found.problem.startswith("Rank 1 is the straggler: its data is slow (data wait ")
    assert "the other rank waits for it in communication (the comm stage)" in found.problem
    assert found.fix == {"--num-workers": "auto"}
    assert found.evidence[0].startswith("rank 1 data wait per step ")
    assert found.evidence[1].startswith("rank 0 (the fastest other) data wait per step ")
    assert found.evidence[2].startswith("rank 0 waiting per step ")
    assert all("n=20" in e for e in found.evidence)
    # Rank 0 waits about 12 ms of its ~20 ms step for rank 1.
    assert found.gain_share is not None and 0.4 < found.gain_share < 0.75
    assert found.severity == "major"
    assert "more DataLoader workers" in found.gain
    assert found.notes == ["rank 1 ran on host node-a, as did the others"]


def test_the_rule_is_silent_on_equal_ranks_with_noise(tmp_path: Path) -> None:
    per_rank = {r: make_steps(30, seed=r, noise=1 * MS) for r in range(4)}
    assert straggler(read_facts(write_ranks(tmp_path / "r", per_rank))) is None


def test_the_rule_is_silent_on_a_one_rank_run(tmp_path: Path) -> None:
    run = write_ranks(tmp_path / "r", {0: make_steps(10, seed=0)}, strategy="single")
    assert straggler(read_facts(run)) is None


def test_a_rank_slow_in_forward_is_compute_slow_and_no_flag_fixes_it(tmp_path: Path) -> None:
    per_rank = {
        0: make_steps(20, seed=0, comm=14 * MS),
        1: make_steps(20, seed=1, forward=15 * MS),
    }
    run = write_ranks(tmp_path / "r", per_rank)
    found = straggler(read_facts(run))
    assert found is not None
    assert found.problem.startswith("Rank 1 is the straggler: its compute is slow (forward ")
    assert found.fix == {}
    assert "no flag fixes a slow machine" in found.gain
    assert "move rank 1 off the slow host" in found.gain


def test_a_rank_waited_for_without_a_slow_stage_is_host_slow(tmp_path: Path) -> None:
    per_rank = {0: make_steps(20, seed=0, comm=14 * MS), 1: make_steps(20, seed=1)}
    found = straggler(read_facts(write_ranks(tmp_path / "r", per_rank)))
    assert found is not None
    assert found.problem.startswith("Rank 1 is the straggler: its host is slow")
    assert found.fix == {}
    assert found.evidence[0].startswith("rank 1 comm per step ")


def test_a_slower_rank_nobody_waits_for_is_reported_as_slower(tmp_path: Path) -> None:
    per_rank = {0: make_steps(20, seed=0), 1: make_steps(20, seed=1, data_wait=10 * MS)}
    found = straggler(read_facts(write_ranks(tmp_path / "r", per_rank)))
    assert found is not None
    assert found.problem.startswith("Rank 1 is slower than the others: its data is slow")
    assert "do not measurably wait for it" in found.problem
    assert found.severity == "minor" and found.gain.startswith("little for the step time")


def test_the_rule_names_the_host_of_the_rank(tmp_path: Path) -> None:
    run = write_ranks(tmp_path / "r", slow_data_on_rank_1())
    summary = json.loads((run / "summary.json").read_text())
    summary["ranks"][1]["host"] = "node-b"
    (run / "summary.json").write_text(json.dumps(summary))
    found = straggler(read_facts(run))
    assert found is not None and found.notes == ["rank 1 ran on host node-b; the others on node-a"]


def test_a_missing_rank_file_gives_no_traceback(tmp_path: Path) -> None:
    run = write_ranks(tmp_path / "r", {0: make_steps(10, seed=0), 1: None})
    assert straggler(read_facts(run)) is None
    # With a third rank missing, the two that remain are compared, and the note says so.
    per_rank = slow_data_on_rank_1()
    per_rank[2] = None
    found = straggler(read_facts(write_ranks(tmp_path / "r3", per_rank)))
    assert found is not None and found.problem.startswith("Rank 1 is the straggler")
    assert any("rank(s) 2 left no step records" in note for note in found.notes)


def test_a_damaged_rank_file_gives_no_traceback(tmp_path: Path) -> None:
    run = write_ranks(tmp_path / "r", slow_data_on_rank_1())
    (run / "ranks" / "rank1" / "metrics.jsonl").write_bytes(
        b'{"event": "step", "step": "x", "stages": [1]}\n\xff\xfe\n{"event": "step", "step": 3,'
        b' "stages": {"data_wait": "slow", "forward": NaN}}\n'
    )
    assert straggler(read_facts(run)) is None


def test_the_doctor_blames_the_straggler_not_the_sync(tmp_path: Path) -> None:
    # Rank 0's comm stage is mostly waiting for rank 1: the sync itself is the straggler's
    # own comm time, far below the per-tensor-sync threshold.
    from trainscope.diagnosis import diagnose

    run = write_ranks(tmp_path / "r", slow_data_on_rank_1())
    rules = [f.rule for f in diagnose(run).findings]
    assert rules[0] == "straggler" and "per-tensor-sync" not in rules
