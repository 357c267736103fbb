"""strategy tp on 2 and 4 gloo CPU processes: parity with one process, what a rank
keeps, the collectives of a step against the count the split implies; and the refusals.

The same 4-block character GPT as the pipeline's tests (tests/strategies/test_pipeline.py),
k = 4 AdamW steps with every step clipped by the global norm. Tensor parallelism changes
the order of sums inside the split matmuls (each rank sums its share of the inner
dimension, then the all-reduce adds the shares): measured, weights within 2e-8 of one
process's and losses within 1e-6; a missed all-reduce or a head on the wrong rank is off
by far more (the losses differ in the first step).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.strategies.test_parity import step_lines, weights
from tests.strategies.test_pipeline import DATA, LAUNCH_TIMEOUT, STEPS, pipe_run
from trainscope.config import from_dict
from trainscope.errors import ConfigError
from trainscope.strategies.layout import check_tp
from trainscope.strategies.tensor_parallel import check_heads, fused_qkv_order

ATOL = 1e-6
LOSS_ATOL = 1e-5


def test_the_fused_qkv_order_gives_each_rank_its_heads_q_k_and_v() -> None:
    # width 4, 2 ranks: rows 0-3 are Q, 4-7 K, 8-11 V; rank 0 takes heads' rows 0-1.
    order = fused_qkv_order(12, 2).tolist()
    assert order == [0, 1, 4, 5, 8, 9, 2, 3, 6, 7, 10, 11]
    assert sorted(order) == list(range(12))


def test_heads_must_divide() -> None:
    with pytest.raises(ConfigError, match="3 heads do not divide by 2"):
        check_heads(3, 2)
    check_heads(4, 2)


@pytest.mark.parametrize(
    ("workload", "nproc", "message"),
    [
        ({"name": "gpt-char", "options": {"n_head": 3, "n_embd": 48}}, 2,
         "workload gpt-char's 3 heads do not divide by 2 processes"),
        ({"name": "mnist"}, 2, "workload mnist has no blocks to split"),
        # BERT-tiny has 2 heads: 4 processes cannot each hold a whole one.
        ({"name": "text-cls"}, 4, "workload text-cls's 2 heads do not divide by 4 processes"),
        ({"name": "gpt-char"}, 1, "at least 2 processes"),
    ],
)  # fmt: skip
def test_a_tp_run_is_refused_from_its_config(workload, nproc, message) -> None:
    cfg = from_dict({"workload": workload, "dist": {"strategy": "tp", "nproc": nproc}})
    with pytest.raises(ConfigError, match=message):
        check_tp(cfg)


def test_a_grid_must_fill_the_processes() -> None:
    with pytest.raises(ConfigError, match="--dp-size 3 does not divide the 4 processes"):
        from_dict({"dist": {"strategy": "tp", "nproc": 4, "dp_size": 3}})
    with pytest.raises(ConfigError, match="dp_size applies to strategy pipeline or tp, not ddp"):
        from_dict({"dist": {"strategy": "ddp", "nproc": 4, "dp_size": 2}})
    cfg = from_dict({"workload": {"name": "gpt-char", "options": {"n_head": 4}},
                     "data": {"batch_size": 8},
                     "dist": {"strategy": "tp", "nproc": 4, "dp_size": 4}})  # fmt: skip
    with pytest.raises(ConfigError, match="at least 2 processes; got 1"):
        check_tp(cfg)  # 4 replicas of one process: no tensor parallelism left
    cfg = from_dict({"workload": {"name": "gpt-char", "options": {"n_head": 4}},
                     "data": {"batch_size": 6},
                     "dist": {"strategy": "tp", "nproc": 4, "dp_size": 2}})  # fmt: skip
    check_tp(cfg)  # 2 x 2, batch 6: 3 per replica
    with pytest.raises(ConfigError, match="batch size 7 does not split evenly across the 2"):
        check_tp(from_dict({**cfg.to_dict(), "data": {"batch_size": 7}}))


def test_tp_size_must_match_the_processes() -> None:
    with pytest.raises(
        ConfigError, match=r"--tp-size 2 x 1 data-parallel replica\(s\) = 2 processes"
    ):
        from_dict({"dist": {"strategy": "tp", "nproc": 4, "tp_size": 2}})


# The same module-scoped runner as the pipeline's tests (one run per set of flags).
tp_run = pipe_run


def _summary(run: Path, rank: int = 0) -> dict[str, Any]:
    path = run / ("summary.json" if rank == 0 else f"ranks/rank{rank}/summary.json")
    return json.loads(path.read_text())


@pytest.mark.slow
@pytest.mark.timeout(3 * LAUNCH_TIMEOUT)
@pytest.mark.parametrize("layout", [("--nproc", "2"), ("--nproc", "4"),
                                    ("--nproc", "4", "--dp-size", "2")], ids=str)  # fmt: skip
def test_tp_trains_what_one_process_trains(layout: tuple[str, ...], tp_run) -> None:
    # 4 heads here (the pipeline's model has 2): they split over 2 and over 4 processes;
    # the last layout is 2 replicas (each on half the batch) of 2-way tensor parallelism.
    single = tp_run("--n-head", "4")
    run = tp_run("--n-head", "4", "--strategy", "tp", *layout)
    got, want = weights(run), weights(single)
    assert sorted(got) == sorted(want)  # whole tensors, Q/K/V rows in the model's order
    for name in want:
        torch.testing.assert_close(got[name], want[name], rtol=0.0, atol=ATOL, msg=name)
    losses = [e["loss"] for e in step_lines(run / "metrics.jsonl")]
    base = [e["loss"] for e in step_lines(single / "metrics.jsonl")]
    assert len(losses) == len(base) == STEPS
    assert losses == pytest.approx(base, abs=LOSS_ATOL)
    assert abs(base[-1] - base[0]) > 100 * LOSS_ATOL
    val = _summary(run)["epochs"][0]["val_loss"]
    assert val == pytest.approx(_summary(single)["epochs"][0]["val_loss"], abs=1e-5)


@pytest.mark.slow
@pytest.mark.timeout(3 * LAUNCH_TIMEOUT)
def test_a_step_all_reduces_four_times_per_block_and_each_rank_holds_half_the_blocks(
    tp_run,
) -> None:
    single = _summary(tp_run("--n-head", "4"))
    run = tp_run("--n-head", "4", "--strategy", "tp", "--nproc", "2")
    summary = _summary(run)
    assert summary["parallel"]["tensor_parallel"]["blocks"] == 4
    ops = summary["comm"]["collectives"]["ops"]
    # Forward: after the attention's and the MLP's row-split projections; backward: the
    # input gradients of the two column-split layers. 4 per block, 4 blocks.
    assert ops["all_reduce"]["calls"] == 4 * 4
    batch, block, width = 16, 16, 32
    assert ops["all_reduce"]["bytes"] == 16 * batch * block * width * 4
    # Parameters: the blocks' split in two, the rest (embeddings, norms, head) whole.
    full = single["memory"]["parameters_bytes"]
    for rank in (0, 1):
        mine = _summary(run, rank)["memory"]["parameters_bytes"]
        assert full / 2 < mine < 0.75 * full


@pytest.mark.slow
@pytest.mark.timeout(3 * LAUNCH_TIMEOUT)
def test_the_estimator_predicts_a_ranks_memory(tp_run) -> None:
    """estimate-memory --tp-size against the meter: model states and saved activations
    per rank, both counted in bytes, equal."""
    from tests.strategies.test_pipeline import _arch
    from trainscope.estimate.split import tp_rank

    run = tp_run("--n-head", "4", "--strategy", "tp", "--nproc", "2")
    e = tp_rank(_arch(n_head=4), tp=2, batch=16, seq_len=16, precision="fp32",
                optimizer="adamw", device="cpu")  # fmt: skip
    for rank in (0, 1):
        m = _summary(run, rank)["memory"]
        states = m["parameters_bytes"] + m["gradients_bytes"] + m["optimizer_states_bytes"]
        assert states == e.states.total
        assert m["activations_bytes"] == e.activations


@pytest.mark.slow
@pytest.mark.timeout(3 * LAUNCH_TIMEOUT)
def test_tp_resumes_bit_exact(tmp_path: Path) -> None:
    from tests.strategies.test_pipeline import resumed_equals_uninterrupted

    if not (DATA / "input.txt").is_file():
        pytest.skip("shared Tiny Shakespeare not present")
    resumed_equals_uninterrupted(tmp_path, "--n-head", "4", "--strategy", "tp", "--nproc", "2")
