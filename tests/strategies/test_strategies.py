"""The Strategy objects and the per-rank record helpers, in one process.

Collectives are exercised in a world of one (``init_distributed`` outside torchrun makes
a gloo group of a single rank on 127.0.0.1): the code paths of a real sync run, and a
world of one must leave every gradient as it was. Only the last tests start processes.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from subprocess import CompletedProcess

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, load_model
from torch import nn

from trainscope.cli import main
from trainscope.errors import ConfigError
from trainscope.registry import STRATEGIES, multiprocess_names, strategy_names
from trainscope.runtime.dist import DistInfo, destroy_distributed, init_distributed
from trainscope.strategies import make_strategy
from trainscope.strategies.base import Strategy, grads_for_sync, trainable_params
from trainscope.strategies.dp import DataParallelStrategy
from trainscope.train.ranks import (
    make_loss_reducer,
    save_weights,
    stage_spread,
    tied_duplicates,
)
from trainscope.workloads.lenet import LeNet5

CPU = torch.device("cpu")
HAND_WRITTEN = ("gather-scatter", "allreduce")
# A stage of their own for communication: the hand-written syncs, and the pipeline (the
# gradient sum of parameters two stages share).
COMM_STAGE = (*HAND_WRITTEN, "pipeline")


def small_model(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return LeNet5(1, (12, 12), 10)


def backward_once(model: nn.Module, seed: int = 1) -> None:
    g = torch.Generator().manual_seed(seed)
    x, y = torch.randn(8, 1, 12, 12, generator=g), torch.randint(0, 10, (8,), generator=g)
    nn.functional.cross_entropy(model(x), y).backward()


# ------------------------------------------------------------------ names and batch split


@pytest.mark.parametrize("name", strategy_names())
def test_make_strategy_knows_every_configurable_name(name: str) -> None:
    s = make_strategy(name, DistInfo(), CPU)
    assert isinstance(s, Strategy)
    assert s.name == name
    assert type(s).__bases__ == (Strategy,)  # one level deep, as the design asks
    assert s.comm_stage is (name in COMM_STAGE)


SPLITTERS = [n for n in strategy_names() if STRATEGIES[n].splits_batch and n != "dp"]


@pytest.mark.parametrize("name", SPLITTERS)
@pytest.mark.parametrize(("world", "batch", "local"), [(1, 33, 33), (2, 32, 16), (4, 64, 16)])
def test_local_batch_size_splits_the_global_batch(
    name: str, world: int, batch: int, local: int
) -> None:
    assert make_strategy(name, DistInfo(world_size=world), CPU).local_batch_size(batch) == local


@pytest.mark.parametrize("name", [n for n in multiprocess_names() if n in SPLITTERS])
@pytest.mark.parametrize(("world", "batch"), [(2, 33), (4, 30), (3, 1)])
def test_uneven_split_is_a_config_error(name: str, world: int, batch: int) -> None:
    s = make_strategy(name, DistInfo(world_size=world), CPU)
    with pytest.raises(ConfigError, match=rf"global batch size {batch} .* {world} processes"):
        s.local_batch_size(batch)


def test_a_pipeline_gives_every_stage_the_whole_batch() -> None:
    s = make_strategy("pipeline", DistInfo(world_size=2), CPU)
    assert s.splits_batch_across_ranks is False and s.data_shard() == (0, 1)
    assert s.local_batch_size(32) == 32  # cut into microbatches over time, not over ranks
    with pytest.raises(ConfigError, match="4 microbatches do not divide the batch of 30"):
        s.local_batch_size(30)


def test_dp_does_not_split_the_batch() -> None:
    # One process loads the whole batch; DataParallel itself splits it over the devices.
    s = make_strategy("dp", DistInfo(world_size=2), CPU)
    assert s.splits_batch_across_ranks is False
    assert s.local_batch_size(33) == 33


# ---------------------------------------------------------------------- DataParallel


def test_data_parallel_on_cpu_is_a_pass_through() -> None:
    s = make_strategy("dp", DistInfo(), CPU)
    assert isinstance(s, DataParallelStrategy)
    assert s.device_ids == [] and s.replicas == 1
    model = small_model()
    wrapped = s.wrap(model)
    assert isinstance(wrapped, nn.DataParallel)
    assert s.unwrap(wrapped) is model
    assert s.unwrap(model) is model  # unwrapping a plain module is harmless
    x = torch.randn(4, 1, 12, 12)
    assert torch.equal(wrapped(x), model(x))
    state = s.full_state_dict(wrapped)
    assert sorted(state) == sorted(model.state_dict())  # no "module." prefix
    assert all(v.device.type == "cpu" for v in state.values())


def test_describe_fields() -> None:
    for name in strategy_names():
        d = make_strategy(name, DistInfo(), CPU).describe()
        assert {"strategy", "world_size", "backend", "comm_stage", "comm_note"} <= d.keys()
        assert d["strategy"] == name and d["world_size"] == 1 and d["backend"] is None
        assert d["comm_stage"] is (name in COMM_STAGE)
        assert isinstance(d["comm_note"], str) and d["comm_note"]
    dp = make_strategy("dp", DistInfo(), CPU).describe()
    assert dp["replicas"] == 1 and "one device" in dp["note"]
    assert make_strategy("fsdp", DistInfo(), CPU).describe()["sharded_blocks"] == 0
    info = DistInfo(rank=1, local_rank=1, world_size=2, local_world_size=2, backend="gloo")
    d = make_strategy("allreduce", info, CPU).describe()
    assert d["world_size"] == 2 and d["backend"] == "gloo"


def test_hand_buckets_follow_the_rule_the_predictions_use() -> None:
    from trainscope.comm.predict import buckets
    from trainscope.strategies.allreduce import bucket_groups

    sizes = [3, 700, 5, 9000, 12, 40000, 7]  # elements, float32
    grads = [torch.zeros(n) for n in sizes]
    for cap in (100, 4096, 50_000, 1 << 30):
        groups = bucket_groups(grads, cap)
        assert [sum(4 * g.numel() for g in grp) for grp in groups] == buckets(
            [4 * n for n in reversed(sizes)], [cap]
        )
        assert [g for grp in groups for g in grp] == list(reversed(grads))  # each once
    mixed = [torch.zeros(4), torch.zeros(4, dtype=torch.float64), torch.zeros(4)]
    assert len(bucket_groups(mixed, 1 << 30)) == 3  # one dtype per flat buffer


def test_bucket_mb_is_for_ddp_and_the_hand_written_allreduce() -> None:
    from trainscope.config import DistConfig
    from trainscope.errors import ConfigError

    assert DistConfig(strategy="allreduce", bucket_mb=25).bucket_mb == 25
    assert DistConfig(strategy="ddp", bucket_mb=25).bucket_mb == 25
    for other in ("single", "dp", "fsdp", "gather-scatter"):
        with pytest.raises(ConfigError, match=f"applies to strategy ddp or allreduce, not {other}"):
            DistConfig(strategy=other, bucket_mb=25)
    for name in ("allreduce", "ddp"):
        for bad in (0, -1, float("nan"), "x"):
            with pytest.raises(ConfigError, match="bucket_mb"):
                DistConfig(strategy=name, bucket_mb=bad)
    d = make_strategy("allreduce", DistInfo(), CPU, {"dist.bucket_mb": 0.5})
    model = nn.Sequential(nn.Linear(300, 300), nn.Linear(300, 10))
    d.wrap(model)
    assert d.describe()["bucket_mb"] == 0.5 and d.describe()["buckets"] == 1
    ddp = make_strategy("ddp", DistInfo(), CPU, {"dist.bucket_mb": 0.5}).describe()
    assert ddp["bucket_mb"] == 0.5 and "buckets of <= 0.5 MiB" in ddp["comm_note"]
    assert "bucket_mb" not in make_strategy("ddp", DistInfo(), CPU).describe()


def test_comm_stats() -> None:
    assert make_strategy("single", DistInfo(), CPU).comm_stats() == {}
    stats = make_strategy("ddp", DistInfo(), CPU).comm_stats()
    assert stats["hook_buckets"] == 0 and stats["hook_inflight_s"] == 0.0
    assert make_strategy("ddp", DistInfo(), torch.device("cuda", 0)).comm_stats() == {}


def test_grads_for_sync_fills_missing_gradients_with_zeros() -> None:
    model = nn.Sequential(nn.Linear(3, 2), nn.Linear(2, 2))
    model[1].bias.requires_grad_(False)
    model(torch.randn(4, 3)).sum().backward()
    model[0].weight.grad = None  # as if that branch had not been used this step
    grads = grads_for_sync(model)
    params = trainable_params(model)
    assert len(grads) == len(params) == 3
    assert all(g is p.grad for g, p in zip(grads, params))
    assert torch.equal(model[0].weight.grad, torch.zeros(2, 3))


# -------------------------------------------------------------- a world of one, in-process


@pytest.fixture
def world_of_one(monkeypatch: pytest.MonkeyPatch) -> Iterator[DistInfo]:
    """A real gloo process group of one rank, destroyed afterwards whatever happens."""
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(var, raising=False)
    info = init_distributed("gloo", "cpu", 30)
    try:
        yield info
    finally:
        destroy_distributed(info)
    assert not torch.distributed.is_initialized()


@pytest.mark.timeout(120)
def test_init_outside_torchrun_makes_a_world_of_one(world_of_one: DistInfo) -> None:
    assert world_of_one == DistInfo(backend="gloo")
    assert world_of_one.distributed and world_of_one.is_main
    assert torch.distributed.get_world_size() == 1
    assert make_loss_reducer(world_of_one) is None  # nothing to average over


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", HAND_WRITTEN)
def test_hand_written_sync_in_a_world_of_one_keeps_gradients(
    name: str, world_of_one: DistInfo
) -> None:
    s = make_strategy(name, world_of_one, CPU)
    model = small_model()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    wrapped = s.wrap(model)  # broadcast from rank 0 to itself: nothing changes
    assert wrapped is model and s.unwrap(wrapped) is model
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())
    backward_once(model)
    missing = model.blocks[2][-1].bias
    missing.grad = None  # an unused parameter this step
    want = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    s.sync_gradients(model)
    for n, p in model.named_parameters():
        if n in want:
            assert torch.equal(p.grad, want[n]), n  # the mean over one rank is the gradient
    assert torch.equal(missing.grad, torch.zeros_like(missing))


@pytest.mark.timeout(120)
def test_ddp_in_a_world_of_one_matches_the_plain_module(world_of_one: DistInfo) -> None:
    s = make_strategy("ddp", world_of_one, CPU)
    plain = small_model()
    model = copy.deepcopy(plain)
    wrapped = s.wrap(model)
    assert isinstance(wrapped, nn.parallel.DistributedDataParallel)
    assert s.unwrap(wrapped) is model
    backward_once(wrapped)
    backward_once(plain)
    for (n, p), q in zip(model.named_parameters(), plain.parameters()):
        assert torch.equal(p.grad, q.grad), n
    s.sync_gradients(wrapped)  # DDP synced inside backward: the hook is a no-op
    assert all(torch.equal(p.grad, q.grad) for p, q in zip(model.parameters(), plain.parameters()))
    stats = s.comm_stats()
    assert stats["hook_buckets"] >= 1 and stats["hook_bytes"] > 0
    assert sorted(s.full_state_dict(wrapped)) == sorted(plain.state_dict())


@pytest.mark.timeout(120)
def test_ddp_bucket_mb_sets_its_bucket_cap(world_of_one: DistInfo) -> None:
    """torch 2.13's DDP puts every gradient in one bucket for the first step and rebuilds
    its buckets after it: LeNet5's 117 KB stay one default bucket (1 MiB first), and
    become three of <= 20 KiB (cut by the rule the predictions use, tests/comm)."""
    per_step = {}
    for bucket_mb in (None, 0.02):
        s = make_strategy("ddp", world_of_one, CPU, {"dist.bucket_mb": bucket_mb})
        wrapped, counts = s.wrap(small_model()), []
        for seed in (1, 2):
            before = s.comm_stats()["hook_buckets"]
            backward_once(wrapped, seed)
            counts.append(s.comm_stats()["hook_buckets"] - before)
        per_step[bucket_mb] = counts
    assert per_step == {None: [1, 1], 0.02: [1, 3]}


@pytest.mark.timeout(120)
def test_fsdp_in_a_world_of_one_gives_back_full_tensors(world_of_one: DistInfo) -> None:
    s = make_strategy("fsdp", world_of_one, CPU)
    model = small_model()
    want = {k: v.clone() for k, v in model.state_dict().items()}
    wrapped = s.wrap(model)
    assert s.describe()["sharded_blocks"] == len(model.blocks) == 3
    full = s.full_state_dict(wrapped)
    assert sorted(full) == sorted(want)
    for k, v in full.items():
        assert type(v) is torch.Tensor and v.device.type == "cpu", k
        assert torch.equal(v, want[k]), k


# ------------------------------------------------------------------- per-rank record helpers


def test_stage_spread() -> None:
    ranks = [
        {"rank": 0, "stages_s": {"forward": 1.0, "comm": 0.5}},
        {"rank": 1, "stages_s": {"forward": 3.0}},  # no comm stage on this rank: 0 s
        {"rank": 2, "stages_s": None},  # a rank without figures is left out
    ]
    spread = stage_spread(ranks)
    assert list(spread) == ["comm", "forward"]
    assert spread["forward"] == {"min": 1.0, "mean": 2.0, "max": 3.0, "max_rank": 1}
    assert spread["comm"] == {"min": 0.0, "mean": 0.25, "max": 0.5, "max_rank": 0}
    assert stage_spread([]) == {}


def test_make_loss_reducer() -> None:
    assert make_loss_reducer(DistInfo()) is None
    assert make_loss_reducer(DistInfo(backend="gloo")) is None  # a world of one
    assert callable(make_loss_reducer(DistInfo(world_size=2, backend="gloo")))


class TiedLM(nn.Module):
    """An embedding and an output head sharing one weight (as GPT-2 does)."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(11, 4)
        self.mid = nn.Linear(4, 4)
        self.head = nn.Linear(4, 11, bias=False)
        self.head.weight = self.emb.weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.mid(self.emb(x)))


def test_tied_duplicates() -> None:
    assert tied_duplicates(TiedLM()) == {"head.weight"}
    assert tied_duplicates(small_model()) == set()
    shared = nn.Linear(2, 2)
    twice = nn.ModuleDict({"a": shared, "b": shared})  # one module under two names
    assert tied_duplicates(twice) == {"b.weight", "b.bias"}


def test_save_weights_round_trip_with_tied_weights(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = TiedLM()
    state = model.state_dict()
    assert {"emb.weight", "head.weight"} <= state.keys()  # state dicts keep both names
    path = tmp_path / "model.safetensors"
    size = save_weights(path, state, tied_duplicates(model))
    assert size == path.stat().st_size > 0
    on_disk = load_file(str(path))
    assert sorted(on_disk) == ["emb.weight", "mid.bias", "mid.weight"]  # stored once
    with safe_open(str(path), framework="pt") as f:
        assert f.metadata() == {"format": "pt", "writer": "trainscope"}

    torch.manual_seed(1)
    fresh = TiedLM()
    assert not torch.equal(fresh.emb.weight, model.emb.weight)
    load_model(fresh, str(path))  # strict: safetensors restores the tie itself
    assert fresh.head.weight is fresh.emb.weight
    for k, v in model.state_dict().items():
        assert torch.equal(fresh.state_dict()[k], v), k
    x = torch.tensor([[1, 2, 3]])
    assert torch.equal(fresh(x), model(x))


def test_save_weights_makes_tensors_contiguous(tmp_path: Path) -> None:
    path = tmp_path / "w.safetensors"
    t = torch.arange(6.0).view(2, 3).t()  # a non-contiguous view
    save_weights(path, {"t": t}, set())
    assert torch.equal(load_file(str(path))["t"], t)


# ------------------------------------------------------------ the uneven batch, end to end

UNEVEN = [
    "run", "--workload", "synthetic", "--synthetic-samples", "64",
    "--synthetic-shape", "1", "12", "12", "--epochs", "1", "--max-steps-per-epoch", "1",
    "--device", "cpu", "--strategy", "ddp", "--nproc", "2", "--batch-size", "33",
    "--set", "dist.timeout_s=60", "-q", "--no-progress",
]  # fmt: skip
UNEVEN_MESSAGE = "the global batch size 33 does not split evenly across 2 processes"


@pytest.mark.timeout(300)
def test_uneven_batch_through_the_cli_fails(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """The launcher refuses the batch with the one-line error before making any file."""
    out = tmp_path / "uneven"
    code = main([*UNEVEN, "--out", str(out)])
    _, err = capfd.readouterr()
    assert code != 0
    assert f"trainscope: error: {UNEVEN_MESSAGE}: choose a multiple of 2" in err
    assert not out.exists()


def test_uneven_batch_is_refused_before_any_process_starts(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    started: list[list[str]] = []

    def fake_run(argv: list[str], **kwargs: object) -> CompletedProcess[bytes]:
        started.append(argv)
        return CompletedProcess(argv, 1)

    monkeypatch.setattr("trainscope.launch.launcher.subprocess.run", fake_run)
    out = tmp_path / "uneven"
    code = main([*UNEVEN, "--out", str(out)])
    _, err = capfd.readouterr()
    assert started == []
    assert code == 2  # a ConfigError, like every other invalid setting
    assert err.splitlines() == [f"trainscope: error: {UNEVEN_MESSAGE}: choose a multiple of 2"]
    assert not out.exists()


def test_a_pipeline_drops_a_short_last_batch_and_says_so() -> None:
    """A schedule cuts every batch into M equal microbatches: 67 samples in batches of 8
    leave 3, which the training loader drops (and the record says); others change nothing."""
    from trainscope.config import DataConfig

    s = make_strategy("pipeline", DistInfo(world_size=2), CPU, {"dist.microbatches": 4})
    s.local_batch_size(8)
    data, note = s.training_data(DataConfig(batch_size=8), 67)
    assert data.drop_last and note is not None and "last batch of 3 samples" in note
    data, note = s.training_data(DataConfig(batch_size=8), 64)
    assert data.drop_last and note is None  # nothing to drop: nothing said
    plain = DataConfig(batch_size=8)
    ddp = make_strategy("ddp", DistInfo(world_size=2), CPU)
    assert ddp.training_data(plain, 67) == (plain, None)
