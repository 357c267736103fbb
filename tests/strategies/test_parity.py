"""Parity: every parallel strategy trains exactly what one process trains on the same batch.

The issue's "Must show": two CPU processes on gloo over loopback (127.0.0.1), nothing
downloaded (the synthetic workload), k = 4 optimizer steps with the same seed and global
batch. The parameters of ddp, fsdp, gather-scatter and allreduce then equal those of
single-process training within a stated tolerance, and the two hand-written syncs give
identical losses step for step. Each configuration runs once per module (the runs are
the slow part); the tests compare the records they leave.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file

from tests.forked_launch import forked_launches
from trainscope.cli import main
from trainscope.config import from_dict
from trainscope.runtime.device import seed_everything
from trainscope.workloads import build_workload

STEPS = 4
GLOBAL_BATCH = 32
WORLD = 2
LAUNCHED = ("ddp", "fsdp", "gather-scatter", "allreduce")
HAND_WRITTEN = ("gather-scatter", "allreduce")  # sync in sync_gradients, timed as "comm"

# fp32 parameters after 4 SGD steps (lr 0.1, momentum 0.9) are O(0.1..1). Every rank sees
# the same global batch split in two, so the only difference from one process is the order
# of the sums in the gradient mean: mean(g over 32) vs (mean(g over 16) + mean(g over 16))
# / 2, a few float32 ulps (measured: 1.5e-8). 1e-6 leaves a wide margin for that rounding
# and still catches any real error (a missed sync or a wrong divisor is off by ~1e-2).
ATOL = 1e-6
# Per-step losses: the mean of the per-rank means vs one mean over 32 samples (~2.3 each).
LOSS_ATOL = 1e-5

# The parity run: a LeNet5 on 12x12 synthetic images, CPU, a hung collective fails in 60 s.
COMMON = [
    "run",
    "--workload", "synthetic",
    "--synthetic-samples", "256",
    "--synthetic-shape", "1", "12", "12",
    "--epochs", "1",
    "--max-steps-per-epoch", str(STEPS),
    "--batch-size", str(GLOBAL_BATCH),
    "--lr", "0.1",
    "--seed", "0",
    "--log-every", "1",
    "--device", "cpu",
    "--set", "dist.timeout_s=60",
    "-q",
    "--no-progress",
]  # fmt: skip

# A launched run starts torchrun and two workers that import torch: tens of seconds on a
# loaded 2-core machine.
LAUNCH_TIMEOUT = 300


def run_cli(out: Path, *args: str) -> dict[str, Any]:
    """Run ``trainscope run`` in-process (for --nproc > 1 its ranks are forked from this
    process: tests/forked_launch.py) and return the summary it left in ``out``."""
    with forked_launches():  # the ranks' training is tested here, not how they start
        code = main([*COMMON, *args, "--out", str(out)])
    summary_path = out / "summary.json"
    assert code == 0, f"trainscope {' '.join(args)} exited {code}"
    summary = json.loads(summary_path.read_text())
    assert summary["status"] == "completed", summary.get("error")
    return summary


def step_lines(path: Path) -> list[dict[str, Any]]:
    """The ``step`` events of a metrics.jsonl."""
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [e for e in lines if e.get("event") == "step"]


def weights(run_dir: Path) -> dict[str, torch.Tensor]:
    """The saved parameters of a run."""
    return load_file(str(run_dir / "model.safetensors"))


def assert_weights_close(
    got: dict[str, torch.Tensor], want: dict[str, torch.Tensor], atol: float = ATOL
) -> None:
    """Same names, shapes and dtype (fp32), every value within ``atol``."""
    assert sorted(got) == sorted(want)
    for name in want:
        assert got[name].dtype == want[name].dtype == torch.float32, name
        torch.testing.assert_close(got[name], want[name], rtol=0.0, atol=atol, msg=name)


@pytest.fixture(scope="module")
def single(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The baseline: one process, one device, the whole global batch each step."""
    out = tmp_path_factory.mktemp("parity") / "single"
    summary = run_cli(out)
    assert summary["world_size"] == 1 and summary["strategy"] == "single"
    return out


@pytest.fixture(scope="module")
def strategy_run(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Path]:
    """``get(strategy, nproc)``: the run directory of that configuration, run once per module."""
    root = tmp_path_factory.mktemp("parity-strategies")
    done: dict[tuple[str, int], Path] = {}

    def get(strategy: str, nproc: int = WORLD, *flags: str) -> Path:
        key = (strategy, nproc, *flags)
        if key not in done:
            out = root / f"{strategy}-{nproc}{'-'.join(('', *flags)).replace('-', '_')}"
            extra = ["--nproc", str(nproc)] if nproc > 1 else []
            run_cli(out, "--strategy", strategy, *extra, *flags)
            done[key] = out
        return done[key]

    return get


# ------------------------------------------------------------------- two processes, gloo


@pytest.mark.timeout(LAUNCH_TIMEOUT)
@pytest.mark.parametrize("strategy", LAUNCHED)
def test_parameters_equal_single_process(
    strategy: str, single: Path, strategy_run: Callable[..., Path]
) -> None:
    out = strategy_run(strategy)
    assert_weights_close(weights(out), weights(single))


def test_training_moves_weights_far_beyond_the_tolerance(single: Path) -> None:
    """The comparison has teeth: 4 steps change the weights by orders of magnitude more
    than ATOL, so a strategy that skipped or botched the sync could not pass."""
    seed_everything(0)
    cfg = from_dict({"workload": {"name": "synthetic", "synthetic_samples": 256,
                                  "synthetic_shape": [1, 12, 12]}})  # fmt: skip
    initial = build_workload(cfg.workload, single.parent / "cache").model.state_dict()
    trained = weights(single)
    assert sorted(initial) == sorted(trained)
    moved = max((trained[k] - initial[k]).abs().max().item() for k in trained)
    assert moved > 1000 * ATOL


@pytest.mark.timeout(LAUNCH_TIMEOUT)
@pytest.mark.parametrize("strategy", LAUNCHED)
def test_global_losses_equal_single_process(
    strategy: str, single: Path, strategy_run: Callable[..., Path]
) -> None:
    """The logged global loss of each step is the one-process loss of the same batch."""
    out = strategy_run(strategy)
    want = step_lines(single / "metrics.jsonl")
    got = step_lines(out / "metrics.jsonl")
    assert [s["step"] for s in got] == [s["step"] for s in want] == list(range(1, STEPS + 1))
    assert [s["loss"] for s in got] == pytest.approx([s["loss"] for s in want], abs=LOSS_ATOL)
    assert all(s["batch_size"] == GLOBAL_BATCH // WORLD for s in got)
    assert all("rank_loss" not in s for s in want)


@pytest.mark.timeout(LAUNCH_TIMEOUT)
@pytest.mark.parametrize("strategy", LAUNCHED)
def test_record_of_a_two_process_run(strategy: str, strategy_run: Callable[..., Path]) -> None:
    out = strategy_run(strategy)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["world_size"] == WORLD and summary["strategy"] == strategy
    assert summary["local_batch_size"] == GLOBAL_BATCH // WORLD
    assert summary["lr"] == 0.1  # no --scale-lr
    assert summary["parallel"]["world_size"] == WORLD
    assert summary["parallel"]["backend"] == "gloo"
    assert summary["parallel"]["comm_stage"] is (strategy in HAND_WRITTEN)
    assert [r["rank"] for r in summary["ranks"]] == [0, 1]
    # A "comm" stage only where the strategy syncs by hand after backward.
    assert ("comm" in summary["stages_s"]) is (strategy in HAND_WRITTEN)
    for name, spread in summary["stage_spread"].items():
        assert spread["min"] <= spread["mean"] <= spread["max"], name
        assert spread["max_rank"] in (0, 1), name
    assert set(summary["stage_spread"]) == set(summary["stages_s"])
    if strategy == "ddp":  # the CPU comm hook measured every bucket's all-reduce
        assert summary["comm"]["hook_buckets"] >= STEPS
        assert summary["comm"]["hook_inflight_s"] > 0
    rank1 = out / "ranks" / "rank1"
    for name in ("metrics.jsonl", "summary.json", "system.jsonl"):
        assert (rank1 / name).is_file(), name
    assert json.loads((rank1 / "summary.json").read_text())["rank"] == 1
    assert not (rank1 / "model.safetensors").exists()  # rank 0 alone saves the weights


@pytest.mark.timeout(LAUNCH_TIMEOUT)
@pytest.mark.parametrize("strategy", LAUNCHED)
def test_every_rank_logs_the_same_global_loss(
    strategy: str, strategy_run: Callable[..., Path]
) -> None:
    out = strategy_run(strategy)
    rank0 = step_lines(out / "metrics.jsonl")
    rank1 = step_lines(out / "ranks" / "rank1" / "metrics.jsonl")
    assert len(rank0) == len(rank1) == STEPS
    assert [s["loss"] for s in rank0] == [s["loss"] for s in rank1]  # one all_reduce result
    for a, b in zip(rank0, rank1):
        assert a["loss"] == pytest.approx((a["rank_loss"] + b["rank_loss"]) / 2, rel=1e-6)
        assert a["rank_loss"] != b["rank_loss"]  # the ranks really trained on different halves


@pytest.mark.timeout(2 * LAUNCH_TIMEOUT)
def test_gather_scatter_and_allreduce_are_identical(strategy_run: Callable[..., Path]) -> None:
    """Both sum the two ranks' gradients and divide by 2: with two ranks the sums are the
    same float operation, so the runs agree bit for bit, step for step."""
    gs, ar = strategy_run("gather-scatter"), strategy_run("allreduce")
    for metrics in (Path("metrics.jsonl"), Path("ranks/rank1/metrics.jsonl")):
        a, b = step_lines(gs / metrics), step_lines(ar / metrics)
        assert len(a) == len(b) == STEPS
        assert [s["loss"] for s in a] == [s["loss"] for s in b], metrics
        assert [s["rank_loss"] for s in a] == [s["rank_loss"] for s in b], metrics
    w_gs, w_ar = weights(gs), weights(ar)
    assert sorted(w_gs) == sorted(w_ar)
    assert all(torch.equal(w_gs[k], w_ar[k]) for k in w_gs)


@pytest.mark.timeout(2 * LAUNCH_TIMEOUT)
def test_bucketed_allreduce_equals_per_tensor_allreduce_bit_for_bit(
    strategy_run: Callable[..., Path],
) -> None:
    """Flattening the gradients into buckets changes which call sums them, not the sums:
    each element is still rank 0's value plus rank 1's, divided by 2."""
    per_tensor = strategy_run("allreduce")
    bucketed = strategy_run("allreduce", WORLD, "--bucket-mb", "0.02")  # 20 KiB: 3 buckets
    summary = json.loads((bucketed / "summary.json").read_text())
    assert summary["parallel"]["bucket_mb"] == 0.02 and summary["parallel"]["buckets"] == 3
    assert "buckets" in summary["parallel"]["comm_note"]
    assert sum(summary["gradients"]["tensor_bytes"]) == 4 * summary["num_parameters"]
    a, b = step_lines(per_tensor / "metrics.jsonl"), step_lines(bucketed / "metrics.jsonl")
    assert [s["loss"] for s in a] == [s["loss"] for s in b]
    w_a, w_b = weights(per_tensor), weights(bucketed)
    assert all(torch.equal(w_a[k], w_b[k]) for k in w_a)


@pytest.mark.timeout(2 * LAUNCH_TIMEOUT)
def test_ddp_bucket_mb_changes_its_buckets_not_its_sums(strategy_run: Callable[..., Path]) -> None:
    """``--bucket-mb`` is DDP's bucket_cap_mb: after its first step (every gradient in one
    bucket, as torch builds them) DDP cuts LeNet5's 117 KB into 3 buckets of <= 20 KiB,
    where its default (1 MiB first) keeps one. Each element is still (rank 0's + rank 1's)
    / 2, so the training is bit-identical to DDP's default buckets."""
    default = strategy_run("ddp")
    bucketed = strategy_run("ddp", WORLD, "--bucket-mb", "0.02")
    summaries = [json.loads((d / "summary.json").read_text()) for d in (default, bucketed)]
    assert [s["comm"]["hook_buckets"] for s in summaries] == [STEPS, 1 + 3 * (STEPS - 1)]
    assert "bucket_mb" not in summaries[0]["parallel"]
    assert summaries[1]["parallel"]["bucket_mb"] == 0.02
    a, b = step_lines(default / "metrics.jsonl"), step_lines(bucketed / "metrics.jsonl")
    assert [s["loss"] for s in a] == [s["loss"] for s in b]
    w_a, w_b = weights(default), weights(bucketed)
    assert all(torch.equal(w_a[k], w_b[k]) for k in w_a)


# ------------------------------------------------------------------------- one process


@pytest.mark.timeout(LAUNCH_TIMEOUT)
@pytest.mark.parametrize("strategy", ["dp", "ddp"])
def test_one_process_strategies_equal_single_exactly(
    strategy: str, single: Path, strategy_run: Callable[..., Path]
) -> None:
    """dp on the CPU calls the module as is; ddp in a world of one all-reduces over one
    rank and divides by 1. Same process, same kernels, same order: bit-identical."""
    out = strategy_run(strategy, 1)
    got, want = weights(out), weights(single)
    assert sorted(got) == sorted(want)
    assert all(torch.equal(got[k], want[k]) for k in want)
    assert [s["loss"] for s in step_lines(out / "metrics.jsonl")] == [
        s["loss"] for s in step_lines(single / "metrics.jsonl")
    ]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["world_size"] == 1 and "ranks" not in summary
    assert not (out / "ranks").exists()


@pytest.mark.timeout(LAUNCH_TIMEOUT)
def test_dp_on_one_device_is_a_pass_through(strategy_run: Callable[..., Path]) -> None:
    parallel = json.loads((strategy_run("dp", 1) / "summary.json").read_text())["parallel"]
    assert parallel["strategy"] == "dp"
    assert parallel["replicas"] == 1
    assert "one device" in parallel["note"] and "as is" in parallel["note"]
    assert parallel["backend"] is None  # no process group for DataParallel


@pytest.mark.timeout(LAUNCH_TIMEOUT)
def test_ddp_in_a_world_of_one_has_a_process_group(strategy_run: Callable[..., Path]) -> None:
    summary = json.loads((strategy_run("ddp", 1) / "summary.json").read_text())
    assert summary["parallel"]["backend"] == "gloo" and summary["world_size"] == 1
    assert "comm" not in summary["stages_s"]
    assert summary["comm"]["hook_buckets"] >= STEPS


@pytest.mark.timeout(LAUNCH_TIMEOUT)
def test_memory_per_rank_shows_fsdp_sharding(single: Path, strategy_run) -> None:
    """The meter counts each rank's own tensors: DDP replicates the model states on every
    rank, FSDP splits them (each rank about half, padding aside); each rank saves the
    activations of its half of the batch."""
    full = json.loads((single / "summary.json").read_text())["memory"]
    for strategy in ("ddp", "fsdp"):
        ranks = json.loads((strategy_run(strategy) / "summary.json").read_text())["ranks"]
        mems = [r["memory"] for r in ranks]
        assert len(mems) == WORLD
        for m in mems:
            assert m["activations_bytes"] < full["activations_bytes"]
            if strategy == "ddp":
                assert m["parameters_bytes"] == full["parameters_bytes"]
                assert m["model_states_bytes"] == full["model_states_bytes"]
            else:
                assert m["sharded"] is True
                assert m["parameters_bytes"] < 0.6 * full["parameters_bytes"]
        if strategy == "fsdp":  # the shards cover the model (dim-0 padding adds a little)
            total = sum(m["parameters_bytes"] for m in mems)
            assert full["parameters_bytes"] <= total < 1.05 * full["parameters_bytes"]
