"""The estimator's split-model figures without processes: what each stage and each
tensor-parallel rank holds, and the refusals (the meter checks are in
tests/strategies/test_pipeline.py and test_tensor_parallel.py)."""

from __future__ import annotations

import json

import pytest

from trainscope.cli import main
from trainscope.errors import ConfigError
from trainscope.estimate.archs import named, param_counts
from trainscope.estimate.split import in_flight, pipeline_ranks, tp_rank

COMMON = {"batch": 8, "seq_len": 128, "precision": "fp32", "optimizer": "adam", "device": "cuda"}


def test_the_stages_hold_the_whole_model_plus_the_tied_heads_copy() -> None:
    arch = named("gpt2-small")
    ranks = pipeline_ranks(arch, stages=4, microbatches=8, schedule="1f1b", **COMMON)
    total = param_counts(arch).total
    assert sum(r.parameters for r in ranks) == total + arch.vocab * arch.hidden
    assert [r.in_flight for r in ranks] == [4, 3, 2, 1]
    assert [r.label for r in ranks] == ["stage 0", "stage 1", "stage 2", "stage 3"]
    gpipe = pipeline_ranks(arch, stages=4, microbatches=8, schedule="gpipe", **COMMON)
    assert [r.in_flight for r in gpipe] == [8] * 4
    assert gpipe[1].activations == 8 * ranks[1].activations_per_microbatch


def test_tensor_parallelism_splits_the_blocks_matmuls_only() -> None:
    arch = named("gpt2-small")
    one = tp_rank(arch, tp=1, **COMMON)
    four = tp_rank(arch, tp=4, **COMMON)
    assert one.parameters == param_counts(arch).total
    h, f = arch.hidden, arch.ffn
    split = 3 * h * h + 3 * h + h * h + h * f + f + f * h  # Q/K/V and fc with biases
    assert one.parameters - four.parameters == arch.layers * (split - split // 4)
    assert four.activations < one.activations  # attention and the MLP's hidden split


def test_what_is_not_estimated_is_said() -> None:
    assert in_flight("interleaved-1f1b", 2, 4, 0) is None
    with pytest.raises(ConfigError, match="GPT architectures"):
        tp_rank(named("bert-base"), tp=2, **COMMON)
    with pytest.raises(ConfigError, match="3 heads do not divide"):
        from trainscope.estimate.archs import custom

        tp_rank(custom(None, 2, 48, 3, 10, positions=128), tp=2, **COMMON)
    with pytest.raises(ConfigError, match="13 pipeline stages need at least 13 blocks"):
        pipeline_ranks(named("gpt2-small"), stages=13, microbatches=13, schedule="1f1b",
                       **{**COMMON, "batch": 13})  # fmt: skip


def test_the_command_prints_and_jsons_the_ranks(capsys) -> None:
    argv = ["estimate-memory", "--arch", "gpt2-small", "--pp-stages", "2", "--microbatches", "4"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "stage 0" in out and "stage 1" in out and "Activations in flight" in out
    assert main([*argv, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [r["label"] for r in data["split"]] == ["stage 0", "stage 1"]
    assert data["split"][1]["microbatches_in_flight"] == 1
    assert main(["estimate-memory", "--arch", "gpt2-small", "--pp-stages", "2",
                 "--tp-size", "2"]) != 0  # fmt: skip
    assert "give one" in capsys.readouterr().err


def test_sequence_parallelism_splits_the_norms_and_the_stream_too(capsys) -> None:
    arch = named("gpt2-small")
    tp = tp_rank(arch, tp=4, **COMMON)
    sp = tp_rank(arch, tp=4, sequence_parallel=True, **COMMON)
    assert sp.states == tp.states and sp.parameters == tp.parameters  # weights alike
    # Per block: two norms' inputs (B x T x C each) and statistics, 3/4 of them gone; the
    # Linear inputs after the norms stay whole (the gathered sequence).
    assert sp.activations < tp.activations
    assert "sequence parallel" in sp.label
    argv = ["estimate-memory", "--arch", "gpt2-small", "--tp-size", "4", "--sequence-parallel"]
    assert main(argv) == 0
    assert "sequence parallel" in capsys.readouterr().out
    assert main(["estimate-memory", "--arch", "gpt2-small", "--sequence-parallel"]) != 0
    assert "goes with --tp-size" in capsys.readouterr().err


def test_the_interleaved_order_is_torchs() -> None:
    """The estimator walks each rank's forwards and backwards in the order torch's
    ScheduleInterleaved1F1B runs them (its own per-rank plan, made without processes)."""
    from torch.distributed.pipelining.schedules import ScheduleInterleaved1F1B

    from trainscope.estimate.split import interleaved_order

    class Plan(ScheduleInterleaved1F1B):
        def __init__(self, ranks: int, microbatches: int) -> None:  # no stages, no groups
            self.pp_group_size, self._n_microbatches, self.n_local_stages = ranks, microbatches, 2
            self.number_of_rounds = max(1, microbatches // ranks)
            self.microbatches_per_round = microbatches // self.number_of_rounds

    checked = 0
    for ranks in (2, 3, 4):
        for m in (2, 3, 4, 6, 8, 12):
            plan = Plan(ranks, m)
            if m % plan.number_of_rounds:
                continue  # refused by torch (and by trainscope's layout check)
            for rank in range(ranks):
                theirs = [("F" if a.computation_type.name == "FORWARD" else "B", a.stage_index)
                          for a in plan._calculate_single_rank_operations(rank) if a]  # fmt: skip
                assert interleaved_order(rank, ranks, m) == theirs, (ranks, m, rank)
                checked += 1
    assert checked > 40


def test_interleaved_ranks_hold_two_stages_at_their_peak() -> None:
    from trainscope.estimate.split import interleaved_peak

    arch = named("gpt2-small")
    ranks = pipeline_ranks(arch, stages=2, microbatches=4, schedule="interleaved-1f1b", **COMMON)
    assert [r.label for r in ranks] == ["rank 0 (stages 0, 2)", "rank 1 (stages 1, 3)"]
    one = pipeline_ranks(arch, stages=2, microbatches=4, schedule="1f1b", **COMMON)
    assert sum(r.parameters for r in ranks) == sum(r.parameters for r in one)
    assert all(r.activations is not None and r.peak == r.activations for r in ranks)
    # Walking an order by hand: two forwards on stage 0 (10 bytes each), one on stage 2
    # (1 byte), a backward frees one of stage 2's: the peak is 21 bytes, 3 held.
    order = [("F", 0), ("F", 0), ("F", 2), ("B", 2), ("F", 2), ("B", 2), ("B", 0), ("B", 0)]
    assert interleaved_peak(order, {0: 10, 2: 1}) == (21, 3)
