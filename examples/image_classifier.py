"""An image classifier in plain torch, as plain parts: no torchvision, no subclassing.

Data: scikit-learn's bundled 8x8 digits (1,797 images, nothing downloaded) upsampled to
``size`` x ``size``; or, with ``--data-dir D``, MNIST-format IDX files in ``D`` (the
training pair if present, else the ``t10k`` pair alone). Either way split 80/10/10 with a
fixed seed. Model: two conv blocks and a linear head, written out below; the blocks are
listed in ``model.blocks``, which FSDP shards one by one and ``--checkpointing`` targets.
``--augment`` gives random-affine augmentation of the training images, applied a batch at
a time on the device under ``--loader fast``.

From the repository root (the current directory is searched for ``examples`` after the
installed packages; elsewhere put the root on ``PYTHONPATH``)::

    trainscope run --workload examples.image_classifier:make --epochs 5 \\
        --optimizer adam --lr 2e-3 --batch-size 64

Options (``--set workload.options.NAME=VALUE``): ``size`` (digits upsampled to this many
pixels a side, 16), ``width`` (channels of the first conv block, 16).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.utils.data import TensorDataset

from trainscope.data.augment import RandomAffine
from trainscope.data.idx import read_idx
from trainscope.errors import ConfigError
from trainscope.workloads.builtin import ImageSet, load_digits_arrays

OPTIONS = {"size": 16, "width": 16}


class SmallCNN(nn.Module):
    """conv-BN-ReLU-pool twice, then a linear classifier; works for any input of 4+ px."""

    def __init__(self, channels: int, size: int, width: int, classes: int) -> None:
        super().__init__()

        def block(cin: int, cout: int) -> nn.Sequential:
            return nn.Sequential(
                nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU(),
                nn.MaxPool2d(2),
            )  # fmt: skip

        self.blocks = nn.ModuleList([block(channels, width), block(width, 2 * width)])
        self.head = nn.Linear(2 * width * (size // 4) ** 2, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for b in self.blocks:
            x = b(x)
        return self.head(x.flatten(1))


def images(cfg, size: int) -> tuple[torch.Tensor, torch.Tensor, str]:
    """Images (N, 1, H, W) as floats in [0, 1], integer labels (N,), and their source."""
    if cfg.data_dir is None:
        x, y = load_digits_arrays()  # (N, 8, 8) in 0..16: what load_digits gives
        x = torch.from_numpy(x / 16.0).float().unsqueeze(1)
        x = nn.functional.interpolate(x, size=(size, size), mode="bilinear")
        return x, torch.from_numpy(y), f"digits upsampled to {size}x{size}"
    root = Path(cfg.data_dir)
    for stem in ("train", "t10k"):
        found = sorted(root.glob(f"{stem}-images-idx3-ubyte*"))
        if found:
            labels = read_idx(str(found[0]).replace("images-idx3", "labels-idx1"))
            x = torch.from_numpy(read_idx(found[0])).float().div(255.0).unsqueeze(1)
            return x, torch.from_numpy(labels.astype(np.int64)), f"{found[0].name}"
    raise ConfigError(f"image_classifier: no train- or t10k-images-idx3-ubyte file in {root}")


def make(cfg) -> dict:
    """The factory: ``cfg`` is trainscope's WorkloadConfig; options in ``cfg.options``."""
    unknown = set(cfg.options) - set(OPTIONS)
    if unknown:
        raise ConfigError(f"image_classifier: unknown option(s) {', '.join(sorted(unknown))}")
    opt = {**OPTIONS, **cfg.options}
    x, y, source = images(cfg, int(opt["size"]))
    order = np.random.default_rng(0).permutation(len(y))
    train, val, test = np.split(order, [int(0.8 * len(y)), int(0.9 * len(y))])
    mean, std = x[train].mean().item(), x[train].std().item()
    if cfg.augment:  # raw pixels + a per-batch pipeline (augment, then normalise)
        train_set = ImageSet(x[train], y[train], RandomAffine(), mean=mean, std=std)
    else:  # a TensorDataset of two tensors: --loader fast takes it as is
        train_set = TensorDataset((x[train] - mean) / std, y[train])
    return {
        "model": SmallCNN(1, x.shape[-1], int(opt["width"]), classes=10),
        "train_set": train_set,
        "val_set": TensorDataset((x[val] - mean) / std, y[val]),
        "test_set": TensorDataset((x[test] - mean) / std, y[test]),
        "loss_fn": nn.functional.cross_entropy,
        # task defaults to "classification": loss, accuracy, per-class accuracy
        "description": f"{source}, SmallCNN width {opt['width']}",
    }
