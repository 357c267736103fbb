"""DataLoaders built from the config's knobs."""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset

from trainscope.config import DataConfig


def make_loader(
    dataset: Dataset, cfg: DataConfig, *, train: bool, device: torch.device
) -> DataLoader:
    """A DataLoader with every speed knob of ``cfg``.

    Training loaders shuffle with a generator seeded by ``shuffle_seed`` (the order is
    reproducible and independent of the model seed); evaluation loaders keep order.
    ``pin_memory`` only makes sense when batches go to a CUDA device.
    """
    kwargs: dict[str, Any] = {
        "batch_size": cfg.batch_size,
        "num_workers": cfg.num_workers,
        "pin_memory": cfg.pin_memory and device.type == "cuda",
        "persistent_workers": cfg.persistent_workers and cfg.num_workers > 0,
    }
    if cfg.prefetch_factor is not None and cfg.num_workers > 0:
        kwargs["prefetch_factor"] = cfg.prefetch_factor
    if train:
        gen = torch.Generator().manual_seed(cfg.shuffle_seed)
        return DataLoader(dataset, shuffle=True, generator=gen, drop_last=cfg.drop_last, **kwargs)
    return DataLoader(dataset, shuffle=False, **kwargs)
