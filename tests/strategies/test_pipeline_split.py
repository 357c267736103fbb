"""The pipeline's pieces that need no process group: splits, the theory, the refusals
before any process starts, cutting a model into stages, and the timer's split mark."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from trainscope.comm.pipeline import split_even, theory_bubble
from trainscope.config import from_dict
from trainscope.errors import ConfigError
from trainscope.profiling.timer import HostStageTimer
from trainscope.strategies.layout import check_layout, check_pipeline
from trainscope.strategies.pipeline_split import (
    StageModule,
    carve,
    measure_costs,
    split_by_cost,
    stage_rank,
)
from trainscope.workloads.base import pipeline_parts
from trainscope.workloads.gpt import GPT, GPTConfig


def test_even_split_covers_every_block_once_and_later_stages_take_the_extra() -> None:
    assert split_even(4, 2) == [(0, 2), (2, 4)]
    assert split_even(5, 2) == [(0, 2), (2, 5)]
    assert split_even(7, 4) == [(0, 1), (1, 3), (3, 5), (5, 7)]
    with pytest.raises(
        ConfigError, match="3 pipeline stages need at least 3 blocks; the model has 2"
    ):
        split_even(2, 3)


def test_cost_split_makes_the_slowest_stage_as_fast_as_can_be() -> None:
    assert split_by_cost([1.0] * 4, 2) == [(0, 2), (2, 4)]
    # A heavy last block goes alone.
    assert split_by_cost([1.0, 1.0, 1.0, 3.0], 2) == [(0, 3), (3, 4)]
    # The head (an end cost on the last stage) pushes blocks to the first stage.
    assert split_by_cost([1.0] * 4, 2, ends=(0.0, 2.0)) == [(0, 3), (3, 4)]
    # Exhaustive check on small cases: nothing beats it.
    import itertools

    costs = [3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0]
    best = split_by_cost(costs, 3)
    worst = max(sum(costs[a:b]) for a, b in best)
    for i, j in itertools.combinations(range(1, len(costs)), 2):
        parts = [costs[:i], costs[i:j], costs[j:]]
        assert worst <= max(map(sum, parts)) + 1e-12


def test_theory_bubble() -> None:
    assert theory_bubble("gpipe", 2, 4) == pytest.approx(1 / 5)
    assert theory_bubble("1f1b", 4, 8) == pytest.approx(3 / 11)
    assert theory_bubble("interleaved-1f1b", 2, 4) == pytest.approx(1 / 9)  # V = 2


def test_stage_ranks_loop_round_the_pipeline() -> None:
    assert [stage_rank(k, 2) for k in range(4)] == [0, 1, 0, 1]


@pytest.mark.parametrize(
    ("pp", "m", "schedule", "batch", "message"),
    [
        (1, 4, "1f1b", 16, "at least 2 stages"),
        (2, 3, "gpipe", 16, "3 microbatches do not divide the batch of 16"),
        (4, 2, "1f1b", 16, "schedule 1f1b needs at least as many microbatches as stages"),
        (2, 5, "interleaved-1f1b", 20, "5 is not a multiple of its 2 rounds"),
    ],
)
def test_layouts_that_cannot_run_are_refused(pp, m, schedule, batch, message) -> None:
    with pytest.raises(ConfigError, match=message):
        check_layout(pp, m, schedule, batch)
    check_layout(2, 2, "gpipe", 16)  # and one that can is not


def _cfg(**over) -> object:
    dist = {"strategy": "pipeline", "nproc": 2, **over.pop("dist", {})}
    return from_dict({"workload": {"name": "gpt-char"}, "dist": dist, **over})


@pytest.mark.parametrize(
    ("over", "message"),
    [
        ({"workload": {"name": "mnist"}}, "workload mnist has no blocks to split"),
        (
            {"workload": {"name": "text-cls"}, "dist": {"nproc": 4, "microbatches": 4}},
            "4 pipeline stages .* need at least 4 blocks; workload text-cls has 2",
        ),
        (
            {"workload": {"name": "gpt-char", "options": {"n_layer": 2}},
             "dist": {"nproc": 4, "microbatches": 4}},
            "4 pipeline stages .* need at least 4 blocks; workload gpt-char has 2",
        ),
        (
            {"workload": {"name": "gpt-char", "options": {"n_layer": 3}},
             "dist": {"pp_schedule": "interleaved-1f1b"}},
            r"4 pipeline stages \(2 processes x 2 under interleaved-1f1b\)",
        ),
        ({"runtime": {"precision": "fp16"}}, "does not run fp16"),
        ({"runtime": {"compile": True}}, "--compile"),
    ],
)  # fmt: skip
def test_a_pipeline_run_is_refused_from_its_config(over, message) -> None:
    with pytest.raises(ConfigError, match=message):
        check_pipeline(_cfg(**over))


def test_pipeline_settings_are_checked_with_the_config() -> None:
    with pytest.raises(
        ConfigError,
        match=r"--pp-stages 2 x 1 data-parallel replica\(s\) = 2 processes; this run has .* 3",
    ):
        from_dict({"dist": {"strategy": "pipeline", "nproc": 3, "pp_stages": 2}})
    with pytest.raises(ConfigError, match="microbatches applies to strategy pipeline, not ddp"):
        from_dict({"dist": {"strategy": "ddp", "nproc": 2, "microbatches": 2}})
    with pytest.raises(ConfigError, match="pp_schedule"):
        from_dict({"dist": {"strategy": "pipeline", "nproc": 2, "pp_schedule": "zigzag"}})
    with pytest.raises(ConfigError, match="microbatches must be at most 4096"):
        from_dict({"dist": {"strategy": "pipeline", "nproc": 2, "microbatches": 10**9}})


def _gpt(n_layer: int = 4) -> GPT:
    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=11, n_layer=n_layer, n_head=2, n_embd=8, block_size=6, dropout=0.0)
    return GPT(cfg)


def test_the_stages_in_order_compute_the_model() -> None:
    model = _gpt()
    parts = pipeline_parts(model)
    assert parts is not None and parts.in_modules == ("tok_emb", "pos_emb", "drop")
    spans = split_even(4, 3)
    stages = [StageModule(model, parts, s, k == 0, k == 2) for k, s in enumerate(spans)]
    idx = torch.randint(0, 11, (3, 6))
    x = idx
    for stage in stages:
        x = stage(x)
    torch.testing.assert_close(x, model(idx), rtol=0, atol=0)


def test_measuring_the_blocks_leaves_no_trace() -> None:
    model = _gpt()
    parts = pipeline_parts(model)
    idx = torch.randint(0, 11, (3, 6))
    torch.manual_seed(5)
    blocks, (first, last) = measure_costs(model, parts, idx, repeats=2)
    after = torch.rand(3)
    torch.manual_seed(5)
    assert torch.equal(after, torch.rand(3))  # training's random draws as without it
    assert len(blocks) == 4 and min(blocks) > 0 and first > 0 and last > 0
    assert all(p.grad is None for p in model.parameters())


def test_a_model_without_the_split_protocol_has_no_parts() -> None:
    assert pipeline_parts(nn.Sequential(nn.Linear(2, 2))) is None


class _Untied(nn.Module):
    """A GPT-like model without tied weights (carving it makes no process group)."""

    pipeline_in = ("emb",)
    pipeline_out = ("head",)

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(5, 4)
        self.blocks = nn.ModuleList(nn.Linear(4, 4) for _ in range(4))
        self.head = nn.Linear(4, 5)

    def forward_in(self, x: torch.Tensor) -> torch.Tensor:
        return self.emb(x)

    def forward_out(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(x)


@pytest.mark.parametrize("rank", [0, 1])
def test_a_rank_keeps_only_its_stages_parameters(rank: int) -> None:
    model = _Untied()
    whole = copy.deepcopy(model)
    parts = pipeline_parts(model)
    carved = carve(model, parts, split_even(4, 2), rank, 2, lambda ranks: None)
    assert carved.stage_ids == [rank] and not carved.tied.groups
    kept = {n for n, p in model.named_parameters() if p.numel()}
    if rank == 0:
        assert kept == {
            "emb.weight",
            *(f"blocks.{i}.{w}" for i in (0, 1) for w in ("weight", "bias")),
        }
    else:
        blocks = {f"blocks.{i}.{w}" for i in (2, 3) for w in ("weight", "bias")}
        assert kept == {"head.weight", "head.bias", *blocks}
    # Everything not kept holds no memory and gets no gradient; the kept are the originals.
    assert all(not p.requires_grad for n, p in model.named_parameters() if n not in kept)
    for name in kept:
        torch.testing.assert_close(
            dict(model.named_parameters())[name], dict(whole.named_parameters())[name]
        )
    assert carved.owner["emb.weight"] == 0 and carved.owner["head.weight"] == 1
    assert carved.names == list(whole.state_dict())


def test_the_split_mark_divides_the_interval_and_gives_the_rest_its_own_stage() -> None:
    ticks = iter([0.0, 1.0, 4.0])
    timer = HostStageTimer(clock=lambda: next(ticks))
    timer.start_step()
    timer.mark("h2d")
    timer.mark_split({"forward": 1.0, "backward": 1.5}, rest="pipeline_wait")
    timer.end_step()
    (times,) = timer.resolve()
    assert times == {"h2d": 1.0, "forward": 1.0, "backward": 1.5, "pipeline_wait": 0.5}
    assert sum(times.values()) == 4.0
