"""The built-in workloads: digits (the default), mnist and synthetic."""

from __future__ import annotations

import gzip
import importlib.util
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset, TensorDataset

from trainscope.config import WorkloadConfig
from trainscope.data.augment import RandomAffine
from trainscope.workloads.base import Workload
from trainscope.workloads.lenet import LeNet5

# Fixed split of scikit-learn's 1,797 digits: 70% train, 15% val, 15% test, stratified,
# with a seed of its own so every run (whatever its training seed) sees the same split.
DIGITS_SPLIT = (0.70, 0.15, 0.15)
DIGITS_SPLIT_SEED = 20240
MNIST_MEAN, MNIST_STD = 0.1307, 0.3081
MNIST_VAL_SIZE = 5000  # the last 5,000 of the 60,000 training images, as is customary


def load_digits_arrays() -> tuple[np.ndarray, np.ndarray]:
    """The 1,797 digits as (images float32 [N, 8, 8] in 0..16, labels int64 [N]).

    Reads the CSV that scikit-learn ships (what ``sklearn.datasets.load_digits`` parses)
    without importing scikit-learn, whose import costs about a second on a small CPU;
    falls back to ``load_digits`` if a future release moves the file.
    """
    spec = importlib.util.find_spec("sklearn")
    if spec is not None and spec.submodule_search_locations:
        path = Path(spec.submodule_search_locations[0]) / "datasets" / "data" / "digits.csv.gz"
        if path.is_file():
            with gzip.open(path) as f:
                table = np.loadtxt(f, delimiter=",", dtype=np.float32)
            return table[:, :-1].reshape(-1, 8, 8), table[:, -1].astype(np.int64)
    from sklearn.datasets import load_digits

    bunch = load_digits()
    return bunch.images.astype(np.float32), bunch.target.astype(np.int64)


def stratified_split(
    labels: np.ndarray, fractions: tuple[float, ...], seed: int
) -> list[np.ndarray]:
    """Split indices into parts of the given fractions, keeping each class's share."""
    rng = np.random.default_rng(seed)
    parts: list[list[np.ndarray]] = [[] for _ in fractions]
    for c in np.unique(labels):
        idx = rng.permutation(np.flatnonzero(labels == c))
        cuts = np.round(np.cumsum(fractions)[:-1] * len(idx)).astype(int)
        for part, chunk in zip(parts, np.split(idx, cuts)):
            part.append(chunk)
    return [np.sort(np.concatenate(p)) for p in parts]


def digits(cfg: WorkloadConfig, cache_dir: Path) -> Workload:
    """scikit-learn's bundled 8x8 handwritten digits: real data, no download."""
    images, y = load_digits_arrays()
    x = (images / 16.0)[:, None]  # pixels are 0..16
    train_idx, val_idx, test_idx = stratified_split(y, DIGITS_SPLIT, DIGITS_SPLIT_SEED)

    def subset(ix: np.ndarray) -> TensorDataset:
        return TensorDataset(torch.from_numpy(x[ix]), torch.from_numpy(y[ix]))

    return Workload(
        name="digits",
        model=LeNet5(in_channels=1, image_size=8, num_classes=10),
        train_set=subset(train_idx),
        val_set=subset(val_idx),
        test_set=subset(test_idx),
        num_classes=10,
        description="scikit-learn digits (8x8), LeNet5",
    )


class MnistImages(Dataset):
    """MNIST images as the usual per-sample pipeline sees them: uint8 -> [0,1] -> augment
    -> normalise, one image per ``__getitem__`` (what a DataLoader with workers spreads)."""

    def __init__(self, images: torch.Tensor, labels: torch.Tensor, augment: RandomAffine) -> None:
        self.images = images
        self.labels = labels
        self.augment = augment

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.images[i].unsqueeze(0).float().div_(255.0)
        x = self.augment(x)
        return (x - MNIST_MEAN) / MNIST_STD, self.labels[i]


def _normalised(images: np.ndarray) -> torch.Tensor:
    x = torch.from_numpy(images).unsqueeze(1).float().div_(255.0)
    return (x - MNIST_MEAN) / MNIST_STD


def mnist(cfg: WorkloadConfig, cache_dir: Path) -> Workload:
    """MNIST from --data-dir or the download cache; optional random-affine augmentation."""
    from trainscope.data.mnist_files import ensure_mnist, load_mnist_arrays

    root = ensure_mnist(cfg.data_dir, cache_dir / "mnist", download=cfg.download)
    train_x, train_y, test_x, test_y = load_mnist_arrays(root)
    n_val = min(MNIST_VAL_SIZE, len(train_y) // 10)
    n_train = len(train_y) - n_val
    ty = torch.from_numpy(train_y.astype(np.int64))
    if cfg.augment:
        train_set: Dataset = MnistImages(
            torch.from_numpy(train_x[:n_train]), ty[:n_train], RandomAffine()
        )
    else:
        # Without augmentation every epoch sees the same tensors: normalise them once.
        train_set = TensorDataset(_normalised(train_x[:n_train]), ty[:n_train])
    return Workload(
        name="mnist",
        model=LeNet5(in_channels=1, image_size=28, num_classes=10),
        train_set=train_set,
        val_set=TensorDataset(_normalised(train_x[n_train:]), ty[n_train:]),
        test_set=TensorDataset(_normalised(test_x), torch.from_numpy(test_y.astype(np.int64))),
        num_classes=10,
        description="MNIST 28x28, LeNet5" + (", random-affine augmentation" if cfg.augment else ""),
    )


def synthetic(cfg: WorkloadConfig, cache_dir: Path) -> Workload:
    """Random tensors of a chosen shape: for throughput work (accuracy stays at chance)."""
    c, h, w = cfg.synthetic_shape
    g = torch.Generator().manual_seed(1234)
    n = cfg.synthetic_samples

    def make(count: int) -> TensorDataset:
        x = torch.randn(count, c, h, w, generator=g)
        y = torch.randint(0, cfg.num_classes, (count,), generator=g)
        return TensorDataset(x, y)

    return Workload(
        name="synthetic",
        model=LeNet5(in_channels=c, image_size=(h, w), num_classes=cfg.num_classes),
        train_set=make(n),
        val_set=make(max(n // 4, 1)),
        test_set=make(max(n // 4, 1)),
        num_classes=cfg.num_classes,
        description=f"synthetic {c}x{h}x{w}, {cfg.num_classes} classes, LeNet5",
    )
