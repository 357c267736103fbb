"""strategy tp on 2 and 4 gloo CPU processes: parity with one process, what a rank
keeps, the collectives of a step against the count the split implies; and the refusals.

The same 4-block character GPT as the pipeline's tests (tests/strategies/test_pipeline.py),
k = 4 AdamW steps with every step clipped by the global norm. Tensor parallelism changes
the order of sums inside the split matmuls (each rank sums its share of the inner
dimension, then the all-reduce adds the shares): measured, weights within 2e-8 of one
process's and losses within 1e-6; a missed all-reduce or a head on the wrong rank is off
by far more (the losses differ in the first step).

The runs fork their ranks from the test process (tests/forked_launch.py, through
``pipe_run``), and so do the two ranks of the clipping-norm test: what the ranks compute
is tested here, not how they start.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.strategies.test_parity import step_lines, weights
from tests.strategies.test_pipeline import LAUNCH_TIMEOUT, STEPS, pipe_run
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


@pytest.mark.parametrize(
    ("workload", "message"),
    [
        ({"name": "text-cls"}, "--sequence-parallel does not split workload text-cls yet"),
        ({"name": "gpt-char", "options": {"block_size": 15}},
         "cuts workload gpt-char's sequences of 15 tokens into 2 equal shares"),
    ],
)  # fmt: skip
def test_sequence_parallelism_is_refused_where_it_cannot_cut(workload, message) -> None:
    dist = {"strategy": "tp", "nproc": 2, "sequence_parallel": True}
    with pytest.raises(ConfigError, match=message):
        check_tp(from_dict({"workload": workload, "dist": dist}))
    with pytest.raises(ConfigError, match="sequence_parallel applies to strategy tp, not ddp"):
        from_dict({"dist": {"strategy": "ddp", "nproc": 2, "sequence_parallel": True}})


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
@pytest.mark.timeout(LAUNCH_TIMEOUT)
@pytest.mark.parametrize("layout", [("--nproc", "2"), ("--nproc", "4"),
                                    ("--nproc", "4", "--dp-size", "2"),
                                    ("--nproc", "2", "--sequence-parallel"),
                                    ("--nproc", "4", "--sequence-parallel")], ids=str)  # fmt: skip
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
@pytest.mark.timeout(LAUNCH_TIMEOUT)
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
@pytest.mark.timeout(LAUNCH_TIMEOUT)
def test_the_estimator_predicts_a_ranks_memory(tp_run) -> None:
    """estimate-memory --tp-size against the meter: model states and saved activations
    per rank, both counted in bytes, equal."""
    import dataclasses

    from tests.strategies.test_pipeline import _arch
    from trainscope.estimate.split import tp_rank

    # With dropout too: its masks (and the CPU's math attention kernel) are saved tensors
    # of their own, which the split divides or not.
    for sp, dropout in ((False, 0.0), (True, 0.0), (False, 0.1), (True, 0.1)):
        flags = ("--sequence-parallel",) if sp else ()
        flags += ("--dropout", str(dropout)) if dropout else ()
        run = tp_run("--n-head", "4", "--strategy", "tp", "--nproc", "2", *flags)
        arch = dataclasses.replace(_arch(n_head=4), dropout=dropout, attn_dropout=dropout)
        e = tp_rank(arch, tp=2, batch=16, seq_len=16, precision="fp32",
                    optimizer="adamw", device="cpu", sequence_parallel=sp)  # fmt: skip
        for rank in (0, 1):
            m = _summary(run, rank)["memory"]
            states = m["parameters_bytes"] + m["gradients_bytes"] + m["optimizer_states_bytes"]
            assert states == e.states.total
            assert m["activations_bytes"] == e.activations, (sp, dropout, rank)


@pytest.mark.slow
@pytest.mark.timeout(LAUNCH_TIMEOUT)
def test_tp_resumes_bit_exact(tmp_path: Path) -> None:
    from tests.strategies.test_pipeline import resumed_equals_uninterrupted

    resumed_equals_uninterrupted(tmp_path, "--n-head", "4", "--strategy", "tp", "--nproc", "2")


@pytest.mark.slow
@pytest.mark.timeout(LAUNCH_TIMEOUT)
def test_sequence_parallelism_gathers_and_scatters_what_the_split_implies(tp_run) -> None:
    from trainscope.comm.tensor_parallel import predict_from_summary

    plain = _summary(tp_run("--n-head", "4", "--strategy", "tp", "--nproc", "2"))
    run = tp_run("--n-head", "4", "--strategy", "tp", "--nproc", "2", "--sequence-parallel")
    summary = _summary(run)
    tp = summary["parallel"]["tensor_parallel"]
    assert tp["sequence_parallel"] is True
    assert tp["partial_gradient_bytes"] == [32 * 4] * 9  # ln_1, ln_2 x 4 blocks, ln_f
    ops = summary["comm"]["collectives"]["ops"]
    n = 16 * 16 * 32 * 4  # batch x context x width, fp32
    # Forward: gather before attention and MLP, reduce-scatter after their projections,
    # gather before the head; backward: the gradients of those, and all-reduces of the
    # column-split layers' input gradients; after it, the norms' partial gradients.
    assert ops["all_gather_into_tensor"] == {**ops["all_gather_into_tensor"],
                                             "calls": 18, "bytes": 18 * n // 2}  # fmt: skip
    assert (
        ops["reduce_scatter_tensor"]["calls"] == 8
        and ops["reduce_scatter_tensor"]["bytes"] == 8 * n
    )
    assert ops["all_reduce"]["calls"] == 8 + 9
    assert ops["all_reduce"]["bytes"] == 8 * n + 9 * 32 * 4
    predicted = predict_from_summary(summary).by_op()
    assert predicted["all_gather"] == (18, 18 * n // 2) and predicted["all_reduce"] == (
        17,
        ops["all_reduce"]["bytes"],
    )
    # What it saves: the norms', dropouts' and residual stream's activations are halved.
    for rank in (0, 1):
        saved = _summary(run, rank)["memory"]["activations"]["saved_by_autograd_bytes"]
        whole = _summary(tp_run("--n-head", "4", "--strategy", "tp", "--nproc", "2"), rank)
        assert saved < whole["memory"]["activations"]["saved_by_autograd_bytes"]
    assert plain["parallel"]["tensor_parallel"]["partial_gradient_bytes"] == []


def _grad_norms(rank: int, port: int, out: str) -> None:
    """One rank: the global gradient norm of one backward of the GPT under tp with and
    without sequence parallelism, and of the whole model in this process."""
    import os

    import torch.distributed as dist

    from trainscope.runtime.dist import DistInfo
    from trainscope.strategies.tensor_parallel import TensorParallelStrategy
    from trainscope.workloads.gpt import GPT, GPTConfig

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    cfg = GPTConfig(vocab_size=65, n_layer=2, n_head=2, n_embd=32, block_size=16, dropout=0.0,
                    bias=True)  # fmt: skip
    idx = torch.randint(0, 65, (4, 16), generator=torch.Generator().manual_seed(1))
    norms = {}
    for name, sp in (("whole", None), ("tp", False), ("tp-sp", True)):
        torch.manual_seed(0)
        model = GPT(cfg)
        strategy = TensorParallelStrategy(DistInfo(rank=rank, world_size=2), torch.device("cpu"),
                                          sequence_parallel=sp)  # fmt: skip
        if sp is not None:
            model = strategy.wrap(model)
        model(idx).float().pow(2).mean().backward()
        if sp is None:
            norms[name] = float(torch.sqrt(sum(p.grad.pow(2).sum() for p in model.parameters())))
            continue
        strategy.sync_gradients(model)
        norms[name] = float(strategy.grad_norm(list(model.parameters())))
    Path(out, f"rank{rank}.json").write_text(json.dumps(norms))
    dist.barrier()  # no rank tears its groups down while the other still uses them
    dist.destroy_process_group()


@pytest.mark.timeout(LAUNCH_TIMEOUT)
def test_the_clipping_norm_counts_a_norms_partial_gradients_whole(tmp_path: Path) -> None:
    """Under sequence parallelism a norm's gradient comes out of backward as each rank's
    partial sum; the strategy sums it before the norm (and the optimizer) read it."""
    import torch.multiprocessing as mp

    from trainscope.runtime.dist import free_port

    # Forked, not spawned: the two ranks need torch and trainscope, which this process has
    # imported already (a spawned one takes ~3 s to import them again).
    mp.start_processes(_grad_norms, args=(free_port(), str(tmp_path)), nprocs=2,
                       start_method="fork")  # fmt: skip
    for rank in (0, 1):
        norms = json.loads((tmp_path / f"rank{rank}.json").read_text())
        assert norms["tp"] == pytest.approx(norms["whole"], rel=1e-6)
        assert norms["tp-sp"] == pytest.approx(norms["whole"], rel=1e-6)
