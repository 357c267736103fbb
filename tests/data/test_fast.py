"""Tests for the fast in-memory input path: FastLoader, in_memory and make_loader("fast")."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader, Dataset, TensorDataset

from trainscope.config import DataConfig
from trainscope.data.augment import RandomAffine
from trainscope.data.fast import FastLoader, InMemorySplit, in_memory
from trainscope.data.loaders import make_loader
from trainscope.errors import ConfigError
from trainscope.workloads.builtin import ImageSet

CPU = torch.device("cpu")
IDENTITY = RandomAffine(0.0, 0.0, (1.0, 1.0))


def indexed_split(n: int, transform=None) -> InMemorySplit:
    """Inputs whose single value is the sample's index; targets are the index too."""
    inputs = torch.arange(n, dtype=torch.float32).view(n, 1, 1, 1).expand(n, 1, 2, 2).clone()
    return InMemorySplit(inputs, torch.arange(n), transform)


def epoch_targets(loader) -> list[int]:
    return torch.cat([y for _, y in loader]).tolist()


class Recorder:
    """A batch transform that records what it was given and marks its output."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, torch.Generator | None]] = []

    def __call__(self, x: torch.Tensor, gen: torch.Generator | None) -> torch.Tensor:
        self.calls.append((x.shape[0], gen))
        return x + 1000.0


class PlainDataset(Dataset):
    """A map-style data set with no in_memory(): the fast path cannot take it."""

    def __len__(self) -> int:
        return 8

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.zeros(1, 2, 2), torch.tensor(i)


def digits_like_imageset(n: int = 40, augment: RandomAffine | None = IDENTITY) -> ImageSet:
    """Float pixels in 0..16 (as the digits workload stores them), labels = index."""
    g = torch.Generator().manual_seed(3)
    images = torch.randint(0, 17, (n, 1, 8, 8), generator=g).float()
    return ImageSet(images, torch.arange(n), augment, scale=16.0, mean=0.25, std=0.5)


# ---------------------------------------------------------------------------- FastLoader


@pytest.mark.parametrize(
    ("n", "bs", "drop_last", "want"),
    [(10, 3, False, 4), (10, 3, True, 3), (9, 3, False, 3), (9, 3, True, 3), (2, 5, False, 1),
     (2, 5, True, 0), (10, 1, True, 10)],
)  # fmt: skip
def test_len_with_and_without_drop_last(n: int, bs: int, drop_last: bool, want: int) -> None:
    for shuffle in (False, True):
        loader = FastLoader(indexed_split(n), bs, CPU, shuffle=shuffle, drop_last=drop_last)
        assert len(loader) == want
        batches = list(loader)
        assert len(batches) == want  # len() is what one iteration yields
        if drop_last:
            assert all(len(y) == bs for _, y in batches)


def test_training_epoch_visits_every_sample_once_in_a_shuffled_order() -> None:
    loader = FastLoader(indexed_split(50), 8, CPU, shuffle=True, seed=0)
    for _ in range(3):
        seen = epoch_targets(loader)
        assert sorted(seen) == list(range(50))
        assert seen != list(range(50))  # shuffled (one chance in 50! of a false failure)
    # Inputs travel with their targets.
    for x, y in loader:
        assert torch.equal(x[:, 0, 0, 0], y.float())
        assert torch.equal(x[:, 0, 1, 1], y.float())


def test_drop_last_training_epoch_has_distinct_samples() -> None:
    loader = FastLoader(indexed_split(50), 8, CPU, shuffle=True, seed=0, drop_last=True)
    seen = epoch_targets(loader)
    assert len(seen) == 48 and len(set(seen)) == 48


def test_evaluation_keeps_order() -> None:
    loader = FastLoader(indexed_split(11), 4, CPU, shuffle=False)
    batches = list(loader)
    assert [len(y) for _, y in batches] == [4, 4, 3]
    assert epoch_targets(loader) == list(range(11))
    assert epoch_targets(loader) == list(range(11))  # every epoch the same
    assert torch.equal(batches[1][0], indexed_split(11).inputs[4:8])


def test_same_seed_same_order_and_epochs_differ() -> None:
    a = FastLoader(indexed_split(40), 8, CPU, shuffle=True, seed=5)
    b = FastLoader(indexed_split(40), 8, CPU, shuffle=True, seed=5)
    c = FastLoader(indexed_split(40), 8, CPU, shuffle=True, seed=6)
    a1, a2 = epoch_targets(a), epoch_targets(a)
    b1, b2 = epoch_targets(b), epoch_targets(b)
    assert (a1, a2) == (b1, b2)  # reproducible for a seed, epoch after epoch
    assert a1 != a2  # a fresh permutation per epoch
    assert epoch_targets(c) != a1  # another seed, another order


def test_batches_are_on_the_requested_device() -> None:
    split = indexed_split(10)
    loader = FastLoader(split, 4, CPU, shuffle=True)
    for x, y in loader:
        assert x.device == CPU and y.device == CPU
        assert x.dtype == torch.float32 and y.dtype == torch.int64


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_batches_and_augmentation_stay_on_cuda() -> None:
    cuda = torch.device("cuda")
    ds = digits_like_imageset(augment=RandomAffine())
    loader = FastLoader(ds.in_memory(), 16, cuda, shuffle=True, seed=1)
    assert loader.inputs.device.type == "cuda"
    for x, y in loader:
        assert x.device.type == "cuda" and y.device.type == "cuda"
        assert x.shape[1:] == (1, 8, 8)
    a = FastLoader(ds.in_memory(), 16, cuda, shuffle=True, seed=1)
    b = FastLoader(ds.in_memory(), 16, cuda, shuffle=True, seed=1)
    for (x1, y1), (x2, y2) in zip(a, b):  # the device generators are seeded too
        assert torch.equal(y1, y2) and torch.equal(x1, x2)


def test_transform_is_applied_per_batch_with_a_generator_only_for_training() -> None:
    rec = Recorder()
    train = FastLoader(indexed_split(10, rec), 4, CPU, shuffle=True, seed=0)
    for x, y in train:
        assert torch.equal(x[:, 0, 0, 0], y.float() + 1000.0)  # the transform's output
    assert [n for n, _ in rec.calls] == [4, 4, 2]  # once per batch, not per sample
    assert all(isinstance(g, torch.Generator) for _, g in rec.calls)
    assert len({id(g) for _, g in rec.calls}) == 1  # one generator for the whole run

    rec_eval = Recorder()
    evaluation = FastLoader(indexed_split(10, rec_eval), 4, CPU, shuffle=False)
    for x, y in evaluation:
        assert torch.equal(x[:, 0, 0, 0], y.float() + 1000.0)
    assert [n for n, _ in rec_eval.calls] == [4, 4, 2]
    assert all(g is None for _, g in rec_eval.calls)  # evaluation is deterministic


def test_augmentation_is_reproducible_for_a_seed() -> None:
    ds = digits_like_imageset(augment=RandomAffine())

    def epochs(seed: int) -> list[torch.Tensor]:
        loader = FastLoader(ds.in_memory(), 16, CPU, shuffle=True, seed=seed)
        return [x for _ in range(2) for x, _ in loader]

    a, b, c = epochs(0), epochs(0), epochs(1)
    assert all(torch.equal(p, q) for p, q in zip(a, b))
    assert not all(torch.allclose(p, q) for p, q in zip(a, c))


@pytest.mark.parametrize("shuffle", [False, True], ids=["eval", "train"])
def test_iterating_does_not_modify_the_split(shuffle: bool) -> None:
    # Evaluation batches are views of the stored tensor: an in-place transform would
    # corrupt the data set itself.
    ds = digits_like_imageset(augment=RandomAffine())
    before = ds.images.clone()
    loader = FastLoader(ds.in_memory(), 8, CPU, shuffle=shuffle)
    for _ in range(2):
        for _ in loader:
            pass
    assert torch.equal(ds.images, before)


# ------------------------------------------------------------------ in_memory / make_loader


def test_in_memory_of_tensor_datasets() -> None:
    x, y = torch.randn(6, 1, 2, 2), torch.arange(6)
    split = in_memory(TensorDataset(x, y))
    assert split is not None and split.inputs is x and split.targets is y
    assert split.transform is None
    assert in_memory(TensorDataset(x, y, y)) is None  # not an (inputs, targets) pair
    assert in_memory(PlainDataset()) is None


def test_in_memory_of_an_imageset_uses_its_pipeline() -> None:
    ds = digits_like_imageset()
    split = in_memory(ds)
    assert split is not None
    assert split.inputs is ds.images and split.targets is ds.labels
    assert split.transform == ds.prepare


def test_make_loader_fast_on_a_tensor_dataset() -> None:
    n = 37
    ds = TensorDataset(torch.arange(n, dtype=torch.float32).view(n, 1), torch.arange(n))
    cfg = DataConfig(batch_size=8, loader="fast", shuffle_seed=4, drop_last=True)
    train = make_loader(ds, cfg, train=True, device=CPU)
    assert isinstance(train, FastLoader)
    assert len(train) == 4  # drop_last applies to training
    seen = epoch_targets(train)
    assert len(set(seen)) == 32 and seen != sorted(seen)
    # The config's shuffle seed decides the order.
    again = make_loader(ds, cfg, train=True, device=CPU)
    assert epoch_targets(again) == seen

    evaluation = make_loader(ds, cfg, train=False, device=CPU)
    assert len(evaluation) == 5  # ...and never to evaluation
    assert epoch_targets(evaluation) == list(range(n))
    # The same batches a DataLoader gives for evaluation.
    ref = DataLoader(ds, batch_size=8, shuffle=False)
    for (x1, y1), (x2, y2) in zip(evaluation, ref, strict=True):
        assert torch.equal(x1, x2) and torch.equal(y1, y2)


def test_make_loader_fast_on_an_imageset() -> None:
    ds = digits_like_imageset(n=40, augment=RandomAffine())
    cfg = DataConfig(batch_size=16, loader="fast")
    loader = make_loader(ds, cfg, train=True, device=CPU)
    assert isinstance(loader, FastLoader) and len(loader) == 3
    batches = list(loader)
    assert sorted(torch.cat([y for _, y in batches]).tolist()) == list(range(40))
    for x, _ in batches:
        assert x.dtype == torch.float32 and x.shape[1:] == (1, 8, 8)


@pytest.mark.parametrize(
    "dataset",
    [PlainDataset(), TensorDataset(torch.zeros(4, 1), torch.zeros(4), torch.zeros(4))],
    ids=["custom-dataset", "three-tensors"],
)
def test_make_loader_fast_refuses_data_not_in_memory(dataset: Dataset) -> None:
    cfg = DataConfig(loader="fast")
    with pytest.raises(ConfigError, match=r"loader fast.*--loader torch") as exc:
        make_loader(dataset, cfg, train=True, device=CPU)
    assert type(dataset).__name__ in str(exc.value)
    assert "\n" not in str(exc.value)


def test_make_loader_torch_still_builds_a_dataloader() -> None:
    ds = TensorDataset(torch.zeros(10, 1), torch.arange(10))
    loader = make_loader(ds, DataConfig(batch_size=4), train=False, device=CPU)
    assert isinstance(loader, DataLoader) and loader.num_workers == 0
    assert epoch_targets(loader) == list(range(10))


def test_make_loader_num_workers_override() -> None:
    ds = TensorDataset(torch.zeros(10, 1), torch.arange(10))
    cfg = DataConfig(batch_size=4, num_workers="auto", persistent_workers=True)
    with pytest.raises(ValueError, match="resolved"):
        make_loader(ds, cfg, train=True, device=CPU)  # "auto" is never a worker count
    zero = make_loader(ds, cfg, train=True, device=CPU, num_workers=0)
    assert zero.num_workers == 0 and zero.persistent_workers is False
    two = make_loader(ds, cfg, train=True, device=CPU, num_workers=2)
    assert two.num_workers == 2 and two.persistent_workers is True
    plain = DataConfig(batch_size=4, num_workers=3)
    assert make_loader(ds, plain, train=False, device=CPU, num_workers=1).num_workers == 1


# --------------------------------------------------- fast path == per-sample ImageSet values


@pytest.mark.parametrize("shuffle", [False, True], ids=["eval", "train"])
def test_fast_path_matches_per_sample_pipeline(shuffle: bool) -> None:
    """With an identity augmentation, a batch of the fast path holds exactly the values
    ``__getitem__`` gives for the same indices (labels are the indices here)."""
    ds = digits_like_imageset(n=40, augment=IDENTITY)
    loader = FastLoader(ds.in_memory(), 16, CPU, shuffle=shuffle, seed=2)
    n_seen = 0
    for x, y in loader:
        want = torch.stack([ds[int(i)][0] for i in y])
        torch.testing.assert_close(x, want, atol=1e-5, rtol=1e-5)
        # And that is the normalised image: (pixels / 16 - mean) / std.
        plain = (ds.images[y] / 16.0 - 0.25) / 0.5
        torch.testing.assert_close(x, plain, atol=1e-5, rtol=1e-5)
        n_seen += len(y)
    assert n_seen == 40


def test_fast_path_matches_per_sample_pipeline_for_uint8_pixels() -> None:
    g = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (12, 1, 28, 28), generator=g, dtype=torch.uint8)
    ds = ImageSet(images, torch.arange(12), IDENTITY, scale=255.0, mean=0.1307, std=0.3081)
    for x, y in FastLoader(ds.in_memory(), 5, CPU, shuffle=True):
        want = torch.stack([ds[int(i)][0] for i in y])
        torch.testing.assert_close(x, want, atol=1e-5, rtol=1e-5)
    assert ds.images.dtype == torch.uint8  # the raw pixels stay as they were
