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
from trainscope.data.fast import InMemorySplit
from trainscope.errors import DataError
from trainscope.workloads.base import Workload
from trainscope.workloads.lenet import LeNet5

# Fixed split of scikit-learn's 1,797 digits: 70% train, 15% val, 15% test, stratified,
# with a seed of its own so every run (whatever its training seed) sees the same split.
DIGITS_SPLIT = (0.70, 0.15, 0.15)
DIGITS_SPLIT_SEED = 20240
# Pixel mean and std of that training split after scaling to [0, 1] (0.3056, 0.3761), as
# MNIST_MEAN/STD are of MNIST's: standardised inputs keep SGD's first steps well scaled
# (a test checks them against the split).
DIGITS_MEAN, DIGITS_STD = 0.3056, 0.3761
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


class ImageSet(Dataset):
    """Training images behind a per-sample pipeline: raw pixels -> [0, 1] -> random affine
    -> normalise, one image per ``__getitem__`` (what a DataLoader with workers spreads).

    The same pipeline is offered whole-batch through :meth:`in_memory`, so the fast input
    path (``--loader fast``) augments a batch at a time on the device with the same code.
    """

    def __init__(
        self,
        images: torch.Tensor,
        labels: torch.Tensor,
        augment: RandomAffine | None,
        *,
        scale: float = 1.0,
        mean: float = 0.0,
        std: float = 1.0,
    ) -> None:
        self.images = images  # raw pixels (N, C, H, W), any dtype
        self.labels = labels
        self.augment = augment
        self.scale, self.mean, self.std = scale, mean, std

    def __len__(self) -> int:
        return len(self.labels)

    def prepare(self, x: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        """Raw pixels of one image (C, H, W) or a batch (N, C, H, W) -> model input."""
        # Not in place: for float pixels .float() is the stored tensor itself.
        x = x.float() / self.scale if self.scale != 1.0 else x.float()
        if self.augment is not None:
            x = self.augment(x, generator)
        return (x - self.mean) / self.std

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.prepare(self.images[i]), self.labels[i]

    def in_memory(self) -> InMemorySplit:
        """Raw tensors plus :meth:`prepare` as a batch transform (the fast input path)."""
        return InMemorySplit(self.images, self.labels, self.prepare)


def _train_split(
    images: torch.Tensor, labels: torch.Tensor, augment: bool, scale: float, mean: float, std: float
) -> Dataset:
    if augment:
        return ImageSet(images, labels, RandomAffine(), scale=scale, mean=mean, std=std)
    # Without augmentation every epoch sees the same tensors: normalise them once.
    return TensorDataset((images.float() / scale - mean) / std, labels)


def _augment_note(cfg: WorkloadConfig) -> str:
    return ", random-affine augmentation" if cfg.augment else ""


def digits(cfg: WorkloadConfig, cache_dir: Path) -> Workload:
    """scikit-learn's bundled 8x8 handwritten digits: real data, no download."""
    images, y = load_digits_arrays()
    x = torch.from_numpy(images[:, None])  # pixels are 0..16
    labels = torch.from_numpy(y)
    train_idx, val_idx, test_idx = stratified_split(y, DIGITS_SPLIT, DIGITS_SPLIT_SEED)

    def subset(ix: np.ndarray) -> TensorDataset:
        return TensorDataset((x[ix] / 16.0 - DIGITS_MEAN) / DIGITS_STD, labels[ix])

    return Workload(
        name="digits",
        model=LeNet5(in_channels=1, image_size=8, num_classes=10),
        train_set=_train_split(
            x[train_idx], labels[train_idx], cfg.augment, 16.0, DIGITS_MEAN, DIGITS_STD
        ),
        val_set=subset(val_idx),
        test_set=subset(test_idx),
        num_classes=10,
        description="scikit-learn digits (8x8), LeNet5" + _augment_note(cfg),
    )


def _normalised(images: np.ndarray) -> torch.Tensor:
    x = torch.from_numpy(images).unsqueeze(1).float().div_(255.0)
    return (x - MNIST_MEAN) / MNIST_STD


def mnist(cfg: WorkloadConfig, cache_dir: Path) -> Workload:
    """MNIST from --data-dir or the download cache; optional random-affine augmentation."""
    from trainscope.data.mnist_files import ensure_mnist, load_mnist_arrays

    root = ensure_mnist(cfg.data_dir, cache_dir / "mnist", download=cfg.download)
    train_x, train_y, test_x, test_y = load_mnist_arrays(root)
    # Real MNIST is 28x28, but MNIST-format files of another size work as well: the model
    # is sized from the images (LeNet5 needs at least 4x4 of them).
    h, w = train_x.shape[1:]
    if min(h, w) < 4:
        raise DataError(f"the MNIST files in {root} hold {h}x{w} images; LeNet5 needs at least 4x4")
    n_val = min(MNIST_VAL_SIZE, len(train_y) // 10)
    n_train = len(train_y) - n_val
    ty = torch.from_numpy(train_y.astype(np.int64))
    raw = torch.from_numpy(train_x[:n_train]).unsqueeze(1)  # uint8 (N, 1, H, W)
    return Workload(
        name="mnist",
        model=LeNet5(in_channels=1, image_size=(h, w), num_classes=10),
        train_set=_train_split(raw, ty[:n_train], cfg.augment, 255.0, MNIST_MEAN, MNIST_STD),
        val_set=TensorDataset(_normalised(train_x[n_train:]), ty[n_train:]),
        test_set=TensorDataset(_normalised(test_x), torch.from_numpy(test_y.astype(np.int64))),
        num_classes=10,
        description=f"MNIST {h}x{w}, LeNet5" + _augment_note(cfg),
    )


def synthetic(cfg: WorkloadConfig, cache_dir: Path) -> Workload:
    """Random tensors of a chosen shape: for throughput work (accuracy stays at chance)."""
    c, h, w = cfg.synthetic_shape
    g = torch.Generator().manual_seed(1234)
    n = cfg.synthetic_samples

    def make(count: int) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.randn(count, c, h, w, generator=g)
        y = torch.randint(0, cfg.num_classes, (count,), generator=g)
        return x, y

    return Workload(
        name="synthetic",
        model=LeNet5(in_channels=c, image_size=(h, w), num_classes=cfg.num_classes),
        train_set=_train_split(*make(n), cfg.augment, 1.0, 0.0, 1.0),
        val_set=TensorDataset(*make(max(n // 4, 1))),
        test_set=TensorDataset(*make(max(n // 4, 1))),
        num_classes=cfg.num_classes,
        description=f"synthetic {c}x{h}x{w}, {cfg.num_classes} classes, LeNet5"
        + _augment_note(cfg),
    )
