"""Training loaders give any epoch's batches from any point (``set_epoch``, ``skip``), the
same whatever the number of workers, without touching the process's random generators:
what a run resumed in the middle of an epoch needs to see exactly the batches it would
have seen (see trainscope.data.seeds)."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest
import torch
from torch.utils.data import TensorDataset

from trainscope.config import DataConfig
from trainscope.data.augment import RandomAffine
from trainscope.data.loaders import SeededSamples, make_loader
from trainscope.data.seeds import mix_seed, torch_seeded
from trainscope.data.text import CharWindows
from trainscope.workloads.builtin import ImageSet

CPU = torch.device("cpu")


def images(n: int = 44) -> ImageSet:
    g = torch.Generator().manual_seed(3)
    raw = torch.randint(0, 255, (n, 1, 8, 8), generator=g, dtype=torch.uint8)
    return ImageSet(raw, torch.arange(n) % 10, RandomAffine(), scale=255.0)


KINDS: dict[str, tuple[dict[str, Any], Any]] = {
    "torch-0": ({"num_workers": 0}, images),
    "torch-2": ({"num_workers": 2}, images),
    "torch-2-persistent": ({"num_workers": 2, "persistent_workers": True}, images),
    "fast": ({"loader": "fast"}, images),
    "windows": ({"loader": "fast"}, lambda: CharWindows(torch.arange(300) % 17, 8)),
    # A plain TensorDataset draws nothing: its samples are fetched without a seed each.
    "tensors": ({"num_workers": 0}, lambda: TensorDataset(torch.arange(44.0), torch.arange(44))),
}


def build(kind: str, rank: int = 0, world: int = 2) -> Any:
    options, data = KINDS[kind]
    cfg = DataConfig(batch_size=4, shuffle_seed=5, **options)
    return make_loader(data(), cfg, train=True, device=CPU, rank=rank, world_size=world)


def batches(loader: Any, epoch: int, skip: int = 0) -> list[tuple[torch.Tensor, torch.Tensor]]:
    loader.set_epoch(epoch)
    if skip:
        loader.skip(skip)
    return [(x.clone(), y.clone()) for x, y in loader]


def same(a: list, b: list) -> bool:
    return len(a) == len(b) and all(
        torch.equal(x1, x2) and torch.equal(y1, y2) for (x1, y1), (x2, y2) in zip(a, b)
    )


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("world", [1, 2])
def test_skip_gives_the_rest_of_the_epoch_exactly(kind: str, world: int) -> None:
    for rank in range(world):
        loader = build(kind, rank, world)
        full = batches(loader, 2)
        n = len(loader)
        assert len(full) == n
        for k in (1, n // 2, n - 1):
            assert same(batches(loader, 2, skip=k), full[k:]), (kind, rank, k)
            assert len(loader) == n  # the epoch's length, whatever the skip
        assert same(batches(loader, 2), full)  # a skip holds for one iteration only


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", KINDS)
def test_an_epoch_is_decided_by_its_number_alone(kind: str) -> None:
    loader = build(kind)
    one, two = batches(loader, 1), batches(loader, 2)
    assert not same(one, two)
    other = build(kind)
    assert same(batches(other, 2), two)  # not by the epochs iterated before
    assert same(batches(other, 1), one)


@pytest.mark.timeout(60)
def test_augmented_samples_are_the_same_with_and_without_workers() -> None:
    a, b = batches(build("torch-0", world=1), 3), batches(build("torch-2", world=1), 3)
    assert same(a, b)
    plain = [x for x, _ in batches(build("torch-0", world=1), 3)]
    assert not torch.equal(plain[0][0], plain[0][1])  # augmented: not one repeated image


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", KINDS)
def test_iterating_leaves_the_process_generators_alone(kind: str) -> None:
    loader = build(kind, world=1)
    torch.manual_seed(11)
    random.seed(11)
    np.random.seed(11)
    before = torch.get_rng_state(), random.getstate(), np.random.get_state()
    batches(loader, 1)
    after = torch.get_rng_state(), random.getstate(), np.random.get_state()
    assert torch.equal(before[0], after[0])
    assert before[1] == after[1]
    assert all(np.array_equal(p, q) for p, q in zip(before[2], after[2]))


def test_seeds_are_stable_and_position_dependent() -> None:
    assert mix_seed(1, 2) == mix_seed(1, 2)
    assert len({mix_seed(1, 2), mix_seed(2, 1), mix_seed(1, 2, 0)}) == 3
    assert 0 <= mix_seed(-5, 10**12) < 2**63
    state = torch.get_rng_state()
    with torch_seeded(7):
        a = torch.rand(3)
    with torch_seeded(7):
        b = torch.rand(3)
    assert torch.equal(a, b) and torch.equal(torch.get_rng_state(), state)


def test_only_data_sets_that_may_draw_are_seeded_per_sample() -> None:
    """Seeding a sample costs ~10 µs (a third of a default digits step): a plain
    TensorDataset, which draws nothing, is fetched by index; anything else by (index, seed)."""
    assert not isinstance(build("tensors").dataset, SeededSamples)
    assert isinstance(build("torch-0").dataset, SeededSamples)

    class Noisy(TensorDataset):  # a subclass may draw in its __getitem__: seeded
        def __getitem__(self, i: int) -> Any:
            x, y = super().__getitem__(i)
            return x + torch.randn(()), y

    cfg = DataConfig(batch_size=4, shuffle_seed=5)
    noisy = make_loader(Noisy(torch.zeros(8, 1), torch.arange(8)), cfg, train=True, device=CPU)
    assert isinstance(noisy.dataset, SeededSamples)
    noisy.set_epoch(1)
    first = [x.clone() for x, _ in noisy]
    noisy.set_epoch(1)
    assert all(torch.equal(a, b) for a, b in zip(first, [x for x, _ in noisy]))
