"""A plain PyTorch training loop over a DataLoader: a small CNN learns MNIST digits.

Nothing here knows about trainscope: it is the kind of script a user already has.
Data: the MNIST test set's IDX files (``t10k-images-idx3-ubyte.gz`` and its labels),
read with numpy and split 8,000 / 2,000 with a fixed seed; without them (no ``--data``
folder holding them), scikit-learn's bundled 8x8 digits, so it always runs offline.
One epoch of Adam by default, then the held-out accuracy. About 10 s on a 2-core CPU.

Run it as a plain script, then measured, unchanged::

    python examples/profile/plain_dataloader.py
    trainscope profile --out runs/plain -- examples/profile/plain_dataloader.py
    trainscope report runs/plain && trainscope doctor runs/plain
"""

from __future__ import annotations

import argparse
import gzip
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

# The shared data folder beside the checkout (examples/profile/ -> ../../../shared/data).
DEFAULT_MNIST = Path(__file__).resolve().parents[3] / "shared" / "data" / "mnist"


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--data", type=Path, default=DEFAULT_MNIST, help="folder with MNIST's t10k IDX files"
    )
    p.add_argument("--epochs", type=int, default=1, help="passes over the training split")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--workers", type=int, default=0, help="DataLoader worker processes")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args()


def read_idx_gz(path: Path) -> np.ndarray:
    """An IDX file (gzip): a big-endian header of magic and sizes, then uint8 values."""
    with gzip.open(path, "rb") as f:
        data = f.read()
    ndim = data[3]  # the magic's last byte is the number of dimensions
    shape = np.frombuffer(data, dtype=">i4", count=ndim, offset=4)
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(shape)


def load_images(folder: Path) -> tuple[torch.Tensor, torch.Tensor, str]:
    """Images as float (N, 1, H, W) in [0, 1], labels as int64, and the data set's name."""
    images_file = folder / "t10k-images-idx3-ubyte.gz"
    labels_file = folder / "t10k-labels-idx1-ubyte.gz"
    if images_file.is_file() and labels_file.is_file():
        images, labels, name = read_idx_gz(images_file), read_idx_gz(labels_file), "mnist"
        scale = 255.0
    else:  # no MNIST here: scikit-learn's digits ship with it, nothing is downloaded
        from sklearn.datasets import load_digits

        digits = load_digits()
        images, labels, name = digits.images, digits.target, "digits"
        scale = 16.0
        print(f"no MNIST files in {folder}: using scikit-learn's 8x8 digits")
    x = torch.from_numpy(images.astype(np.float32) / scale).unsqueeze(1)
    return x, torch.from_numpy(labels.astype(np.int64)), name


class SmallCNN(nn.Module):
    """Two conv-ReLU-pool blocks and a linear head; any image of 8 px a side or more."""

    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(4),
        )  # fmt: skip
        self.head = nn.Linear(32 * 4 * 4, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).flatten(1))


@torch.no_grad()
def accuracy(model: nn.Module, loader: DataLoader) -> float:
    """The share of held-out images classified right (eval mode, no gradients)."""
    model.eval()
    right = total = 0
    for x, y in loader:
        right += int((model(x).argmax(dim=1) == y).sum())
        total += len(y)
    model.train()
    return right / total


def main() -> None:
    args = parse_args()
    torch.manual_seed(args.seed)
    x, y, name = load_images(args.data)
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(args.seed))
    n_train = int(0.8 * len(x))  # MNIST's 10,000 test images: 8,000 / 2,000
    train_idx, test_idx = order[:n_train], order[n_train:]
    train = DataLoader(TensorDataset(x[train_idx], y[train_idx]), batch_size=args.batch_size,
                       shuffle=True, num_workers=args.workers)  # fmt: skip
    test = DataLoader(TensorDataset(x[test_idx], y[test_idx]), batch_size=256)

    model = SmallCNN()
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    loss_fn = nn.CrossEntropyLoss()
    print(f"{name}: {n_train} training / {len(test_idx)} held-out images, "
          f"{sum(p.numel() for p in model.parameters()):,} parameters")  # fmt: skip
    t0 = time.perf_counter()
    for epoch in range(args.epochs):
        for step, (xb, yb) in enumerate(train):
            loss = loss_fn(model(xb), yb)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if step % 50 == 0:
                print(f"epoch {epoch} step {step}: loss {loss.item():.4f}")
        print(f"epoch {epoch}: held-out accuracy {accuracy(model, test):.4f}")
    print(f"done in {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
