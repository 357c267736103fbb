"""Batch iterators built from the config's knobs: a DataLoader, or the fast in-memory path."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator, Sized
from typing import Any, Protocol

import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler, TensorDataset

from trainscope.config import DataConfig
from trainscope.data.fast import FastLoader, in_memory
from trainscope.data.seeds import mix_seed, torch_seeded
from trainscope.errors import ConfigError, DataError


class BatchLoader(Iterable[tuple[Any, torch.Tensor]], Sized, Protocol):
    """What the training loop needs of a loader: ``len()`` batches, one epoch per ``iter()``.

    A batch is ``(inputs, targets)``: inputs a tensor or a mapping of tensors (see
    :func:`trainscope.workloads.base.move_to`), targets a tensor whose first dimension is
    the number of samples. Training loaders made here also have ``set_epoch(e)`` (the
    epoch's order and random draws depend on the seed and ``e`` alone) and ``skip(k)``
    (the next ``iter()`` starts at batch ``k`` of the epoch, fetching none before it):
    what a run resumed in the middle of an epoch needs to see the same batches.
    """


class EpochSampler(DistributedSampler):
    """A ``DistributedSampler`` (same shards, same order) that can start ``skip`` samples
    into this rank's epoch, and hands each index to the data set with its own seed,
    ``mix_seed(seed, epoch, index)``: the sample's random draws then depend on nothing
    else (not on the worker that fetches it, nor on the samples fetched before)."""

    def __init__(self, dataset: Dataset, *, seeded: bool = True, **kwargs: Any) -> None:
        super().__init__(dataset, **kwargs)
        self._skip = 0
        self._seeded = seeded

    def skip(self, samples: int) -> None:
        """The next iteration starts ``samples`` into this rank's order."""
        self._skip = samples

    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]
        skip, self._skip = self._skip, 0
        order = itertools.islice(super().__iter__(), skip, None)
        if not self._seeded:  # a data set that draws nothing needs no seed per sample
            yield from order
            return
        for index in order:
            yield (index, mix_seed(self.seed, self.epoch, index))


class SeededSamples(Dataset):
    """A data set fetched by ``(index, seed)``: the sample's random draws from torch's
    generator come from ``seed`` (see :func:`trainscope.data.seeds.torch_seeded`)."""

    def __init__(self, dataset: Dataset) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)  # type: ignore[arg-type]

    def __getitem__(self, key: tuple[int, int]) -> Any:
        index, seed = key
        with torch_seeded(seed):
            return self.dataset[index]

    def __getattr__(self, name: str) -> Any:
        # Not "dataset" (unset while a worker unpickles this: no recursion), and no dunder
        # such as __getitems__, which would hand the inner data set (index, seed) keys.
        if name == "dataset" or name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.dataset, name)


def draws_nothing(dataset: Dataset) -> bool:
    """Whether fetching a sample of ``dataset`` draws no random number: a plain
    ``TensorDataset`` only indexes its tensors. Seeding each of its samples (about 10 µs a
    sample, a third of a default digits step) would change nothing; any other data set
    may draw (an augmentation) and is seeded."""
    return type(dataset) is TensorDataset


class TrainLoader(DataLoader):
    """The training ``DataLoader``: its sampler is an :class:`EpochSampler`."""

    def set_epoch(self, epoch: int) -> None:
        """The order (and every sample's seed) of ``epoch``."""
        self.sampler.set_epoch(epoch)  # type: ignore[attr-defined]

    def skip(self, batches: int) -> None:
        """The next epoch's iteration starts at batch ``batches``."""
        self.sampler.skip(batches * self.batch_size)  # type: ignore[attr-defined]


def make_loader(
    dataset: Dataset,
    cfg: DataConfig,
    *,
    train: bool,
    device: torch.device,
    num_workers: int | None = None,
    collate_fn: Callable[[list[Any]], Any] | None = None,
    batch_size: int | None = None,
    rank: int = 0,
    world_size: int = 1,
) -> BatchLoader:
    """A DataLoader with every speed knob of ``cfg``, or a :class:`FastLoader` for ``fast``.

    Training loaders shuffle reproducibly from ``shuffle_seed`` (independent of the model
    seed), through a ``DistributedSampler`` even in one process: rank ``r`` of ``w`` gets
    every w-th sample of one permutation, so the ranks' batches of a step together are
    exactly the batch one process would take from the same permutation (what makes the
    strategies comparable and their parity testable). The loop calls ``set_epoch`` for a
    new order each epoch. ``batch_size`` (default ``cfg.batch_size``) is this rank's share.
    Evaluation loaders keep order and see the whole split on every rank.
    ``pin_memory`` only makes sense when batches go to a CUDA device. ``num_workers``
    overrides the config's value (which may still read "auto" before it is resolved).
    A data set with its own fast path (a ``fast_loader(batch_size, device, *, shuffle,
    seed, drop_last, rank, world_size)`` method, e.g. a text corpus sampled as windows)
    provides it; ``rank``/``world_size`` ask for this process's share of every batch.
    A training loader that would yield no batch at all (``drop_last`` with a batch larger
    than this process's samples) raises DataError: the run would train on nothing.
    """
    bs = cfg.batch_size if batch_size is None else batch_size
    loader: BatchLoader
    if cfg.loader == "fast":
        loader = _fast_loader(dataset, cfg, bs, device, train=train, rank=rank, world=world_size)
    else:
        workers = cfg.num_workers if num_workers is None else num_workers
        if not isinstance(workers, int):
            raise ValueError("num_workers='auto' must be resolved before building a loader")
        kwargs: dict[str, Any] = {
            "batch_size": bs,
            "num_workers": workers,
            "pin_memory": cfg.pin_memory and device.type == "cuda",
            "persistent_workers": cfg.persistent_workers and workers > 0,
            "collate_fn": collate_fn,
        }
        if cfg.prefetch_factor is not None and workers > 0:
            kwargs["prefetch_factor"] = cfg.prefetch_factor
        # Its own generator: starting an iterator draws the workers' base seed from it,
        # never from the global one the model's dropout draws from.
        kwargs["generator"] = torch.Generator().manual_seed(cfg.shuffle_seed)
        if not train:
            return DataLoader(dataset, shuffle=False, **kwargs)
        seeded = not draws_nothing(dataset)
        sampler = EpochSampler(
            dataset,
            num_replicas=world_size,
            rank=rank,
            shuffle=True,
            seed=cfg.shuffle_seed,
            drop_last=cfg.drop_last,
            seeded=seeded,
        )
        source = SeededSamples(dataset) if seeded else dataset
        loader = TrainLoader(source, sampler=sampler, drop_last=cfg.drop_last, **kwargs)
    if train and cfg.drop_last and len(loader) == 0:
        # A batch larger than the data is one batch of all of it, as in PyTorch; with
        # drop_last that batch is dropped and nothing is left.
        per = " per process" if world_size > 1 else ""
        n = len(dataset) // world_size  # type: ignore[arg-type]
        raise DataError(
            f"batch size {bs} is larger than the {n} training samples{per}, and drop_last "
            f"leaves no batch to train on: lower the batch size or turn drop_last off"
        )
    return loader


def _fast_loader(
    dataset: Dataset,
    cfg: DataConfig,
    bs: int,
    device: torch.device,
    *,
    train: bool,
    rank: int,
    world: int,
) -> BatchLoader:
    """The fast path: the data set's own (a text corpus), or batches indexed in memory."""
    shard = {"rank": rank, "world_size": world} if train else {}
    own = getattr(dataset, "fast_loader", None)
    if callable(own):
        return own(
            bs, device, shuffle=train, seed=cfg.shuffle_seed, drop_last=cfg.drop_last and train,
            **shard,
        )  # fmt: skip
    split = in_memory(dataset)
    if split is None:
        raise ConfigError(
            f"loader fast needs a data set held in memory as tensors; "
            f"{type(dataset).__name__} is not one (use --loader torch)"
        )
    return FastLoader(
        split, bs, device, shuffle=train, seed=cfg.shuffle_seed,
        drop_last=cfg.drop_last and train, **shard,
    )  # fmt: skip
