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
