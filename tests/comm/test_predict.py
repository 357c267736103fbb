"""Predicted communication per strategy: bytes, collectives, times by hand, DDP's buckets
as DDP itself assigns them, and the orderings the model must explain."""

from __future__ import annotations

import pytest
import torch

from trainscope.comm import cost_model as model
from trainscope.comm.predict import MIB, GradTensors, buckets, predict
from trainscope.errors import ConfigError

ALPHA, GBPS = 10e-6, 1.0  # 10 µs, 1 GB/s


def by_name(preds: list) -> dict:
    return {p.strategy: p for p in preds}


def test_hand_computed_predictions_on_two_ranks() -> None:
    grads = GradTensors("toy", (1_000_000, 3_000_000), units=(1_000_000, 3_000_000))
    got = by_name(predict(grads, 2, model.given(ALPHA, GBPS, 2), backward_s=None))
    # gather + scatter per tensor; on 2 ranks each is one message of the tensor
    assert got["gather-scatter"].comm_s == pytest.approx(4 * ALPHA + 2 * 4e6 * 1e-9)
    assert got["gather-scatter"].bytes_sent == 4e6 and got["gather-scatter"].collectives == 4
    # ring all_reduce on 2 ranks: 2 latencies and the whole tensor (2(n-1)/n = 1) per tensor
    assert got["allreduce"].comm_s == pytest.approx(2 * 2 * ALPHA + 4e6 * 1e-9)
    assert got["allreduce"].collectives == 2 and got["allreduce"].bytes_sent == 4e6
    # one 25 MiB bucket holds both: one all_reduce
    assert got["allreduce-bucketed"].collectives == 1
    assert got["allreduce-bucketed"].comm_s == pytest.approx(2 * ALPHA + 4e6 * 1e-9)
    # DDP: the 1 MiB first bucket closes on the (reversed) 3 MB tensor, then the 1 MB one
    assert got["ddp"].buckets == [3_000_000, 1_000_000]
    assert got["ddp"].exposed_s is None
    # FSDP: per unit two all_gathers and a reduce_scatter, 1.5x DDP's bytes
    fsdp = got["fsdp"]
    assert fsdp.collectives == 6 and fsdp.bytes_sent == pytest.approx(1.5 * 4e6)
    assert fsdp.comm_s == pytest.approx(2 * 3 * ALPHA + 3 * 0.5 * 4e6 * 1e-9)


def test_ddp_overlap_hides_all_but_the_tail() -> None:
    grads = GradTensors("toy", (4 * MIB,) * 8)  # 8 buckets of 4 MiB each with a 1 MiB cap
    fits = model.given(ALPHA, GBPS, 2)
    long_backward = by_name(predict(grads, 2, fits, ddp_bucket_mb=1, backward_s=10.0))["ddp"]
    last = fits["all_reduce"].time("all_reduce", 4 * MIB, 2)
    assert long_backward.exposed_s == pytest.approx(last)  # only the last bucket shows
    no_backward = by_name(predict(grads, 2, fits, ddp_bucket_mb=1, backward_s=0.0))["ddp"]
    assert no_backward.exposed_s == pytest.approx(no_backward.comm_s)  # nothing to hide behind


def test_latency_bound_small_tensors_make_per_tensor_allreduce_the_slowest() -> None:
    """The CPU/gloo finding the model must explain: LeNet's 10 small tensors; with a high
    latency per collective and a fast link, one all_reduce per tensor (2(n-1) latencies
    each) costs more than gather + scatter (n-1 each on 2 ranks: the same 2 messages) and
    much more than one bucket."""
    grads = GradTensors(
        "lenet", tuple(4 * n for n in (150, 6, 2400, 16, 48000, 120, 10080, 84, 840, 10))
    )
    fits = model.given(500e-6, 5.0, 2)
    got = by_name(predict(grads, 2, fits))
    assert got["allreduce-bucketed"].comm_s < got["allreduce"].comm_s
    assert got["allreduce"].comm_s == pytest.approx(got["gather-scatter"].comm_s, rel=0.05)
    # with an all_reduce that costs more per call than a gather (as gloo's did here), the
    # per-tensor all_reduce falls behind gather-scatter
    fits["all_reduce"] = model.Fit("all_reduce", 900e-6, 2e-10, 2, 0, 0.0, "ring", "given")
    got = by_name(predict(grads, 2, fits))
    assert got["allreduce"].comm_s > got["gather-scatter"].comm_s


def test_bandwidth_bound_big_model_orders_gather_scatter_last() -> None:
    grads = GradTensors("big", (100 * MIB,) * 4)
    got = by_name(predict(grads, 8, model.given(5e-6, 100.0, 8)))
    assert got["gather-scatter"].comm_s > 3 * got["allreduce"].comm_s  # (n-1)x vs 2(n-1)/n
    assert got["gather-scatter"].bytes_sent == pytest.approx(7 * 400 * MIB)


@pytest.mark.parametrize("sizes", [[4, 8, 1 << 20, 12, 3 << 20, 1 << 22, 100], [1 << 25] * 3])
def test_buckets_match_what_ddp_itself_assigns(sizes: list[int]) -> None:
    """Our bucket rule against torch's own assignment (reverse order, 1 MiB then 25 MiB)."""
    params = [torch.empty(s // 4) for s in sizes]
    caps = [1 * MIB, 25 * MIB]
    got = buckets(list(reversed(sizes)), caps)
    indices, _ = torch.distributed._compute_bucket_assignment_by_size(
        list(reversed(params)), caps, [False] * len(params)
    )
    want = [sum(sizes[::-1][i] for i in bucket) for bucket in indices]
    assert got == want


def test_a_ddp_bucket_cap_given_makes_the_first_bucket_that_cap_too() -> None:
    """torch 2.13: the 1 MiB first bucket only at DDP's default bucket_cap_mb."""
    sizes = (600_000,) * 6  # bytes
    fits = model.given(ALPHA, GBPS, 2)
    default = by_name(predict(GradTensors("x", sizes), 2, fits))["ddp"]
    assert default.buckets == [1_200_000, 2_400_000]  # 1 MiB first (closes at 2 tensors)
    given = by_name(predict(GradTensors("x", sizes), 2, fits, ddp_bucket_mb=25))["ddp"]
    assert given.buckets == [3_600_000]  # one 25 MiB cap for every bucket
    params = [torch.empty(s // 4) for s in sizes]
    indices, _ = torch.distributed._compute_bucket_assignment_by_size(
        list(reversed(params)), [25 * MIB], [False] * len(params)
    )
    assert len(indices) == len(given.buckets)
    assert "<= 25 MiB" in given.how and "1 MiB first" in default.how


def test_nothing_to_predict_is_one_clear_error() -> None:
    fits = model.given(ALPHA, GBPS, 2)
    with pytest.raises(ConfigError, match="at least 2 ranks"):
        predict(GradTensors("x", (4,)), 1, fits)
    with pytest.raises(ConfigError, match="no trainable"):
        predict(GradTensors("x", ()), 2, fits)
    with pytest.raises(ConfigError, match="no fit for broadcast .it stands in for gather"):
        predict(
            GradTensors("x", (4,)),
            2,
            {"all_reduce": fits["all_reduce"]},
            strategies=["gather-scatter"],
        )
    with pytest.raises(ConfigError, match="no fit for all_gather"):
        predict(GradTensors("x", (4,)), 2, {"all_reduce": fits["all_reduce"]}, strategies=["fsdp"])
    with pytest.raises(ValueError):
        buckets([1, 2], [0])
