"""Rank sharding of the training loaders: what makes the parallel strategies comparable.

Rank r of w takes every w-th sample of the one permutation all ranks draw (same seed), so
at every step the ranks' batches of size B/w, interleaved, are exactly the batch of size B
one process takes from that permutation. Both paths are checked: the DataLoader with its
DistributedSampler, and the fast in-memory FastLoader.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from trainscope.config import DataConfig
from trainscope.data.fast import FastLoader
from trainscope.data.loaders import make_loader

CPU = torch.device("cpu")
LOADERS = ("torch", "fast")


def indexed(n: int) -> TensorDataset:
    """Inputs and targets both carry the sample's index."""
    return TensorDataset(torch.arange(n, dtype=torch.float32).view(n, 1), torch.arange(n))


def loader(
    kind: str, n: int, batch: int, rank: int = 0, world: int = 1, *, drop_last: bool = False
) -> Any:
    cfg = DataConfig(batch_size=batch * world, loader=kind, shuffle_seed=7, drop_last=drop_last)
    return make_loader(
        indexed(n), cfg, train=True, device=CPU, batch_size=batch, rank=rank, world_size=world
    )


def epoch(loader: Any, number: int = 1) -> list[list[int]]:
    """The target indices of every batch of one epoch (set_epoch as the training loop does)."""
    sampler = getattr(loader, "sampler", None)
    if hasattr(sampler, "set_epoch"):
        sampler.set_epoch(number)
    out = []
    for x, y in loader:
        assert torch.equal(x.view(-1).long(), y)  # inputs and targets stay paired
        out.append(y.tolist())
    return out


def interleave(*batches: list[int]) -> list[int]:
    """Rank 0's first, rank 1's first, rank 0's second...: the one-process order."""
    n = max(len(b) for b in batches)
    return [b[i] for i in range(n) for b in batches if i < len(b)]


def test_make_loader_types() -> None:
    torch_loader = loader("torch", 16, 4, 1, 2)
    assert isinstance(torch_loader, DataLoader)
    assert isinstance(torch_loader.sampler, DistributedSampler)
    assert (torch_loader.sampler.rank, torch_loader.sampler.num_replicas) == (1, 2)
    fast = loader("fast", 16, 4, 1, 2)
    assert isinstance(fast, FastLoader) and (fast.rank, fast.world_size) == (1, 2)


@pytest.mark.parametrize("kind", LOADERS)
@pytest.mark.parametrize(("world", "n", "local"), [(2, 64, 8), (2, 40, 4), (4, 64, 4)])
def test_ranks_together_take_the_one_process_batch(
    kind: str, world: int, n: int, local: int
) -> None:
    one = epoch(loader(kind, n, local * world))
    ranks = [epoch(loader(kind, n, local, r, world)) for r in range(world)]
    assert all(len(r) == len(one) for r in ranks)
    for step, batch in enumerate(one):
        assert interleave(*(r[step] for r in ranks)) == batch, step
    seen = sorted(i for r in ranks for b in r for i in b)
    assert seen == list(range(n))  # disjoint shards covering the data once
    assert one[0] != sorted(one[0])  # and it is shuffled


@pytest.mark.parametrize("kind", LOADERS)
def test_odd_sample_count_gives_every_rank_the_same_steps(kind: str) -> None:
    n, local, world = 37, 4, 2
    one = epoch(loader(kind, n, local * world))
    ranks = [loader(kind, n, local, r, world) for r in range(world)]
    batches = [epoch(r) for r in ranks]
    # ceil(37 / 2) = 19 samples per rank (one padded), ceil(19 / 4) = 5 steps each.
    assert [len(r) for r in ranks] == [len(b) for b in batches] == [5, 5]
    assert [len(b) for b in batches[0]] == [len(b) for b in batches[1]] == [4, 4, 4, 4, 3]
    for step in range(4):
        assert interleave(batches[0][step], batches[1][step]) == one[step]
    # The last step: the one-process tail, plus the sample that pads rank 1's shard (the
    # first of the permutation, as DistributedSampler pads).
    last = interleave(batches[0][-1], batches[1][-1])
    assert last[:-1] == one[-1] and last[-1] == one[0][0]
    assert sorted({i for b in batches for s in b for i in s}) == list(range(n))


@pytest.mark.parametrize("kind", LOADERS)
def test_odd_sample_count_with_drop_last(kind: str) -> None:
    ranks = [loader(kind, 37, 4, r, 2, drop_last=True) for r in range(2)]
    batches = [epoch(r) for r in ranks]
    assert len(ranks[0]) == len(ranks[1]) == len(batches[0]) == len(batches[1]) == 4
    assert all(len(b) == 4 for r in batches for b in r)


@pytest.mark.parametrize("kind", LOADERS)
def test_every_epoch_a_new_order_the_same_on_every_rank(kind: str) -> None:
    n, local, world = 48, 4, 2
    one = loader(kind, n, local * world)
    ranks = [loader(kind, n, local, r, world) for r in range(world)]
    orders = []
    for number in (1, 2, 3):
        single = epoch(one, number)
        shards = [epoch(r, number) for r in ranks]
        for step, batch in enumerate(single):
            assert interleave(*(s[step] for s in shards)) == batch, (number, step)
        orders.append(single)
    assert orders[0] != orders[1] != orders[2] != orders[0]


def test_set_epoch_decides_the_torch_order() -> None:
    """The order is a function of (seed, epoch) alone: reproducible, and new per epoch."""
    a, b = loader("torch", 32, 4, 0, 2), loader("torch", 32, 4, 0, 2)
    assert epoch(a, 1) == epoch(b, 1)
    assert epoch(a, 2) != epoch(a, 1)
    assert epoch(a, 1) == epoch(b, 1)  # going back to epoch 1 gives epoch 1's order


def test_fast_loader_order_is_reproducible_from_the_seed() -> None:
    a, b = loader("fast", 32, 4, 1, 2), loader("fast", 32, 4, 1, 2)
    assert [epoch(a) for _ in range(3)] == [epoch(b) for _ in range(3)]


@pytest.mark.parametrize("kind", LOADERS)
def test_evaluation_loaders_are_not_sharded(kind: str) -> None:
    cfg = DataConfig(batch_size=8, loader=kind)
    for rank in (0, 1):
        ev = make_loader(indexed(21), cfg, train=False, device=CPU, rank=rank, world_size=2)
        assert [i for b in epoch(ev) for i in b] == list(range(21))


class OwnFastPath(TensorDataset):
    """A data set with its own fast loader, which records what it was asked for."""

    calls: list[dict[str, Any]] = []

    def fast_loader(self, batch_size: int, device: torch.device, **kwargs: Any) -> list[Any]:
        self.calls.append({"batch_size": batch_size, **kwargs})
        return []


def test_own_fast_path_gets_the_rank_for_training_only() -> None:
    ds = OwnFastPath(torch.zeros(4, 1), torch.zeros(4))
    ds.calls = []
    cfg = DataConfig(batch_size=8, loader="fast", shuffle_seed=3)
    make_loader(ds, cfg, train=True, device=CPU, batch_size=4, rank=1, world_size=2)
    make_loader(ds, cfg, train=False, device=CPU, rank=1, world_size=2)
    train, ev = ds.calls
    assert train == {"batch_size": 4, "shuffle": True, "seed": 3, "drop_last": False,
                     "rank": 1, "world_size": 2}  # fmt: skip
    assert ev == {"batch_size": 8, "shuffle": False, "seed": 3, "drop_last": False}
