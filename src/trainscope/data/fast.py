"""The fast input path for data sets that fit in memory: tensors on the device, batches by
indexing, augmentation applied to whole batches on the device.

Why it is fast: a ``DataLoader`` builds each batch from ``batch_size`` separate
``__getitem__`` calls and a collate, all in Python, then copies it to the device. When the
whole split fits in device memory, none of that is needed: one ``index_select`` per batch
gives the same samples, and a per-sample transform written for batches (like
:class:`~trainscope.data.augment.RandomAffine`) runs once per batch instead of once per image.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.data import Dataset, TensorDataset

from trainscope.data.seeds import mix_seed

# transform(raw batch on the device, generator on the device) -> model-ready batch
BatchTransform = Callable[[torch.Tensor, "torch.Generator | None"], torch.Tensor]


@dataclass
class InMemorySplit:
    """A split as whole tensors, plus the transform that turns a raw batch into model input."""

    inputs: torch.Tensor
    targets: torch.Tensor
    transform: BatchTransform | None = None


def in_memory(dataset: Dataset) -> InMemorySplit | None:
    """The split as whole tensors, or None when the data set cannot give them.

    A ``TensorDataset`` of (inputs, targets) qualifies as is; any other data set opts in
    with an ``in_memory() -> InMemorySplit`` method (see ``workloads.builtin.ImageSet``).
    """
    if isinstance(dataset, TensorDataset) and len(dataset.tensors) == 2:
        return InMemorySplit(*dataset.tensors)
    method = getattr(dataset, "in_memory", None)
    return method() if callable(method) else None


class DeviceBatches:
    """What the loaders of data held whole on the device share (:class:`FastLoader`, and
    :class:`~trainscope.data.text.WindowLoader`): the DataLoader options, a generator on
    the device, and the epoch and batch the next ``iter()`` starts at.

    ``set_epoch`` and ``skip`` (see :class:`~trainscope.data.loaders.BatchLoader`) give
    any epoch's batches from any point; without ``set_epoch`` each ``iter()`` is the next
    epoch.
    """

    def __init__(
        self,
        batch_size: int,
        device: torch.device,
        *,
        shuffle: bool,
        seed: int = 0,
        drop_last: bool = False,
        rank: int = 0,
        world_size: int = 1,
    ) -> None:
        self.batch_size = batch_size
        self.device = device
        self.shuffle = shuffle
        self.drop_last = drop_last
        # The random draws come from a generator on the device itself, seeded afresh from
        # the position (data.seeds) for every epoch and batch.
        self.seed = seed
        self._gen = torch.Generator(device=device)
        self.epoch = 0
        self._skip = 0
        self.rank, self.world_size = rank, world_size

    def set_epoch(self, epoch: int) -> None:
        """The batches of ``epoch``."""
        self.epoch = epoch

    def skip(self, batches: int) -> None:
        """The next ``iter()`` starts at batch ``batches`` of the epoch."""
        self._skip = batches


class FastLoader(DeviceBatches):
    """Iterates (inputs, targets) batches of an in-memory split held on ``device``.

    The same contract as the DataLoader it replaces: ``len()`` is the number of batches,
    each ``iter()`` is one epoch. Training order is a permutation per epoch seeded from
    (``seed``, epoch) and each batch's augmentation from (``seed``, rank, epoch, batch).
    Several ranks: each draws the same permutation (same seed) and takes every
    world_size-th entry, padded like DistributedSampler so all ranks step alike.
    ``options`` are those of :class:`DeviceBatches` (``shuffle`` required).
    """

    def __init__(
        self, split: InMemorySplit, batch_size: int, device: torch.device, **options: Any
    ) -> None:
        # One copy to the device at setup; afterwards every batch is already there.
        self.inputs = split.inputs.to(device)
        self.targets = split.targets.to(device)
        self.transform = split.transform
        super().__init__(batch_size, device, **options)

    def _count(self) -> int:
        """Samples this rank iterates per epoch."""
        n = len(self.targets)
        return -(-n // self.world_size) if self.shuffle else n

    def __len__(self) -> int:
        n = self._count()
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        epoch, skip = self.epoch, self._skip
        self.epoch, self._skip = epoch + 1, 0  # the next iter(): the next epoch, from its start
        n = len(self.targets)
        order = None
        if self.shuffle:
            self._gen.manual_seed(mix_seed(self.seed, epoch))
            order = torch.randperm(n, generator=self._gen, device=self.device)
        if order is not None and self.world_size > 1:
            total = self._count() * self.world_size
            order = torch.cat([order, order[: total - n]])[self.rank :: self.world_size]
            n = len(order)
        for b in range(skip, len(self)):
            lo, hi = b * self.batch_size, min((b + 1) * self.batch_size, n)
            if order is None:  # evaluation: contiguous slices, no copy at all
                x, y = self.inputs[lo:hi], self.targets[lo:hi]
            else:
                idx = order[lo:hi]
                x, y = self.inputs.index_select(0, idx), self.targets.index_select(0, idx)
            if self.transform is not None:
                gen = None
                if self.shuffle:
                    gen = self._gen.manual_seed(mix_seed(self.seed, 1, self.rank, epoch, b))
                x = self.transform(x, gen)
            yield x, y
