"""Tensor parallelism's communication predicted from a record: 4 all-reduces per block."""

from __future__ import annotations

import pytest

from trainscope.comm.cost_model import given
from trainscope.comm.tensor_parallel import predict_from_summary, predict_tp


def test_four_all_reduces_of_the_activations_per_block() -> None:
    fit = given(1e-5, 1.0, 2)["all_reduce"]  # 10 µs, 1 GB/s
    p = predict_tp(blocks=4, batch=16, seq_len=16, width=32, tp=2, fit=fit)
    assert p.calls == 16 and p.bytes_per_call == 16 * 16 * 32 * 4
    # Ring all-reduce on 2 ranks: 2 messages, 1 x the bytes through the link, per call.
    assert p.seconds == pytest.approx(16 * (2e-5 + 32768 / 1e9))
    assert predict_tp(4, 16, 16, 32, 2).seconds is None  # no fit: counts only


def test_the_prediction_reads_what_a_tp_record_says() -> None:
    summary = {
        "parallel": {"tensor_parallel": {"blocks": 4, "tp_size": 2}},
        "local_batch_size": 16,
        "workload_info": {"block_size": 16, "n_embd": 32},
    }
    assert predict_from_summary(summary).calls == 16
    assert predict_from_summary({**summary, "workload_info": {"n_embd": 32}}) is None
    assert predict_from_summary({**summary, "local_batch_size": True}) is None
    assert predict_from_summary({"parallel": {"strategy": "ddp"}}) is None


def test_sequence_parallelism_trades_all_reduces_for_gathers_and_scatters() -> None:
    fits = given(1e-5, 1.0, 2)
    n = 16 * 16 * 32 * 4  # one batch x sequence x width fp32 tensor
    p = predict_tp(4, 16, 16, 32, 2, fits, sequence_parallel=True, norm_bytes=(128,) * 9)
    # What the probe counts: an all-gather's input is half of its output on 2 ranks.
    assert p.by_op() == {
        "all_gather": (4 * 4 + 2, 18 * n // 2),
        "reduce_scatter": (2 * 4, 8 * n),
        "all_reduce": (2 * 4 + 9, 8 * n + 9 * 128),
    }
    assert p.calls == 18 + 8 + 8  # the activations' collectives; the norms' are small
    assert p.seconds == pytest.approx(sum(c.seconds for c in p.ops))
    # Ring all-gather / reduce-scatter on 2 ranks: 1 message, half the bytes per call.
    gather = next(c for c in p.ops if c.op == "all_gather")
    assert gather.seconds == pytest.approx(18 * (1e-5 + n / 2 / 1e9))
    # Without a fit for every op, no total: never a sum that leaves some out.
    only = {"all_reduce": fits["all_reduce"]}
    assert predict_tp(4, 16, 16, 32, 2, only, sequence_parallel=True).seconds is None


def test_a_sequence_parallel_record_is_predicted_as_such() -> None:
    summary = {
        "parallel": {"tensor_parallel": {"blocks": 2, "tp_size": 2, "sequence_parallel": True,
                                         "partial_gradient_bytes": [128] * 5}},
        "local_batch_size": 8,
        "workload_info": {"block_size": 16, "n_embd": 32},
    }  # fmt: skip
    ops = predict_from_summary(summary).by_op()
    assert ops["all_gather"][0] == 10 and ops["all_reduce"] == (4 + 5, 4 * 8 * 16 * 32 * 4 + 640)
