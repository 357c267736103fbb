"""Tests for the built-in workloads, LeNet5, user factories and random-affine augmentation."""

from __future__ import annotations

import math
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn
from torch.utils.data import TensorDataset

from trainscope.config import WorkloadConfig
from trainscope.data.augment import RandomAffine
from trainscope.data.idx import read_idx, write_idx
from trainscope.errors import ConfigError, DataError
from trainscope.workloads import build_workload, load_factory
from trainscope.workloads.base import Workload
from trainscope.workloads.builtin import (
    DIGITS_MEAN,
    DIGITS_SPLIT,
    DIGITS_SPLIT_SEED,
    DIGITS_STD,
    MNIST_MEAN,
    MNIST_STD,
    ImageSet,
    digits,
    load_digits_arrays,
    mnist,
    stratified_split,
    synthetic,
)
from trainscope.workloads.lenet import LeNet5

N_DIGITS = 1797

# ------------------------------------------------------------------------------- digits


@pytest.fixture(scope="module")
def digits_workload() -> Workload:
    return digits(WorkloadConfig(), Path("unused-cache"))


def test_digits_arrays() -> None:
    images, labels = load_digits_arrays()
    assert images.shape == (N_DIGITS, 8, 8) and images.dtype == np.float32
    assert labels.shape == (N_DIGITS,) and labels.dtype == np.int64
    assert images.min() == 0 and images.max() == 16
    assert sorted(np.unique(labels).tolist()) == list(range(10))


def test_digits_split_sizes_and_content(digits_workload: Workload) -> None:
    wl = digits_workload
    sets = [wl.train_set, wl.val_set, wl.test_set]
    sizes = [len(s) for s in sets]
    assert sum(sizes) == N_DIGITS
    for size, frac in zip(sizes, DIGITS_SPLIT):
        assert abs(size - frac * N_DIGITS) <= 10  # stratified rounding per class
    for s in sets:
        assert isinstance(s, TensorDataset)
        x, y = s.tensors
        assert x.shape[1:] == (1, 8, 8) and x.dtype == torch.float32
        # scaled from 0..16 to [0, 1], then standardised by the training split's statistics
        lo, hi = -DIGITS_MEAN / DIGITS_STD, (1 - DIGITS_MEAN) / DIGITS_STD
        assert lo - 1e-6 <= float(x.min()) and float(x.max()) <= hi + 1e-6
        assert y.dtype == torch.int64
        assert torch.unique(y).tolist() == list(range(10))  # every class in every split
    assert wl.num_classes == 10 and wl.class_names == [str(i) for i in range(10)]
    assert isinstance(wl.model, LeNet5)
    assert wl.model(wl.train_set.tensors[0][:4]).shape == (4, 10)


def test_digits_split_is_disjoint_and_matches_indices(digits_workload: Workload) -> None:
    images, labels = load_digits_arrays()
    parts = stratified_split(labels, DIGITS_SPLIT, DIGITS_SPLIT_SEED)
    joined = np.concatenate(parts)
    assert len(joined) == N_DIGITS and len(np.unique(joined)) == N_DIGITS  # disjoint, complete
    for part, ds in zip(
        parts, [digits_workload.train_set, digits_workload.val_set, digits_workload.test_set]
    ):
        x, y = ds.tensors
        np.testing.assert_array_equal(y.numpy(), labels[part])
        want = (images[part] / 16.0 - DIGITS_MEAN) / DIGITS_STD
        np.testing.assert_allclose(x.numpy()[:, 0], want, rtol=1e-5, atol=1e-6)


def test_digits_are_standardised_by_the_training_splits_own_statistics(
    digits_workload: Workload,
) -> None:
    x = digits_workload.train_set.tensors[0]
    assert abs(float(x.mean())) < 1e-3 and abs(float(x.std()) - 1.0) < 1e-3


def test_digits_split_is_the_same_across_calls_and_seeds(digits_workload: Workload) -> None:
    torch.manual_seed(123)
    np.random.seed(123)  # the split has its own seed: global seeds must not matter
    again = digits(WorkloadConfig(), Path("unused-cache"))
    for a, b in zip(
        [digits_workload.train_set, digits_workload.val_set, digits_workload.test_set],
        [again.train_set, again.val_set, again.test_set],
    ):
        assert torch.equal(a.tensors[0], b.tensors[0])
        assert torch.equal(a.tensors[1], b.tensors[1])


def test_stratified_split_keeps_class_shares() -> None:
    labels = np.array([0] * 100 + [1] * 20 + [2] * 40)
    train, val, test = stratified_split(labels, (0.5, 0.25, 0.25), seed=1)
    for part, want in ((train, (50, 10, 20)), (val, (25, 5, 10)), (test, (25, 5, 10))):
        assert tuple(np.bincount(labels[part], minlength=3)) == want
    assert len(np.intersect1d(train, val)) == len(np.intersect1d(train, test)) == 0


# ------------------------------------------------------------------------------- LeNet5


@pytest.mark.parametrize(
    ("channels", "size"), [(1, 8), (1, 28), (1, 32), (3, 32), (3, 8), (1, 4), (1, 20)]
)
def test_lenet_output_shape(channels: int, size: int) -> None:
    model = LeNet5(in_channels=channels, image_size=size, num_classes=7)
    out = model(torch.randn(3, channels, size, size))
    assert out.shape == (3, 7)
    assert len(model.blocks) == 3
    # One name per parameter: state dicts carry no aliased tensors.
    assert all(k.startswith("blocks.") for k in model.state_dict())


def test_lenet_classic_mnist_shape() -> None:
    # 5x5 kernels on 28x28: 16 x 4 x 4 = 400 features into the 120-unit layer.
    model = LeNet5(in_channels=1, image_size=28, num_classes=10)
    assert model.blocks[2][1].in_features == 400
    assert model.blocks[0][0].kernel_size == (5, 5)
    assert LeNet5(image_size=8).blocks[0][0].kernel_size == (3, 3)


@pytest.mark.parametrize("size", [1, 2, 3])
def test_lenet_too_small_image(size: int) -> None:
    with pytest.raises(ConfigError, match=f"image size {size}x{size} is too small for LeNet5"):
        LeNet5(in_channels=1, image_size=size)


@pytest.mark.parametrize(
    ("size", "classes"), [((100_000, 100_000), 10), ((28, 28), 10**13)], ids=["area", "classes"]
)
def test_lenet_of_absurd_size_is_refused_by_its_memory_not_called_too_small(
    size: tuple[int, int], classes: int
) -> None:
    # The head grows with the image area (and the class count): such a model cannot be
    # built in memory, and the message says so instead of calling the image too small.
    with pytest.raises(ConfigError, match=r"gives LeNet5 .* parameters .* GiB\), more than") as e:
        LeNet5(in_channels=1, image_size=size, num_classes=classes)
    assert "too small" not in str(e.value) and "\n" not in str(e.value)


# ---------------------------------------------------------------------------- synthetic


def test_synthetic_shapes() -> None:
    cfg = WorkloadConfig(
        name="synthetic", synthetic_samples=40, synthetic_shape=(3, 16, 16), num_classes=5
    )
    wl = synthetic(cfg, Path("unused-cache"))
    assert (len(wl.train_set), len(wl.val_set), len(wl.test_set)) == (40, 10, 10)
    x, y = wl.train_set.tensors
    assert x.shape == (40, 3, 16, 16) and x.dtype == torch.float32
    assert y.dtype == torch.int64 and 0 <= int(y.min()) and int(y.max()) < 5
    assert wl.num_classes == 5 and len(wl.class_names) == 5
    assert wl.model(x[:6]).shape == (6, 5)
    # Three different draws, not one tensor reused for every split.
    assert not torch.equal(wl.val_set.tensors[0], wl.test_set.tensors[0])


def test_synthetic_tiny_sample_count_keeps_eval_sets() -> None:
    wl = synthetic(WorkloadConfig(name="synthetic", synthetic_samples=2), Path("unused"))
    assert (len(wl.train_set), len(wl.val_set), len(wl.test_set)) == (2, 1, 1)


def test_synthetic_is_deterministic_whatever_the_global_seed() -> None:
    cfg = WorkloadConfig(name="synthetic", synthetic_samples=16, synthetic_shape=(1, 8, 8))
    torch.manual_seed(1)
    a = synthetic(cfg, Path("unused"))
    torch.manual_seed(2)
    b = synthetic(cfg, Path("unused"))
    for sa, sb in ((a.train_set, b.train_set), (a.test_set, b.test_set)):
        assert torch.equal(sa.tensors[0], sb.tensors[0])
        assert torch.equal(sa.tensors[1], sb.tensors[1])


def test_synthetic_non_square_images() -> None:
    cfg = WorkloadConfig(name="synthetic", synthetic_samples=8, synthetic_shape=(1, 28, 40))
    wl = synthetic(cfg, Path("unused"))
    assert wl.model(wl.train_set.tensors[0][:2]).shape == (2, 10)


# -------------------------------------------------------------------------------- mnist


def _mnist_cfg(data_dir: Path, augment: bool = False) -> WorkloadConfig:
    return WorkloadConfig(name="mnist", data_dir=str(data_dir), download=False, augment=augment)


def test_mnist_from_local_dir(mnist_dir: Path, tmp_path: Path) -> None:
    wl = mnist(_mnist_cfg(mnist_dir), tmp_path / "cache")
    # 200 training images: the last tenth (20) is the validation set.
    assert (len(wl.train_set), len(wl.val_set), len(wl.test_set)) == (180, 20, 50)
    train_x = read_idx(mnist_dir / "train-images-idx3-ubyte.gz")
    train_y = read_idx(mnist_dir / "train-labels-idx1-ubyte.gz")
    test_y = read_idx(mnist_dir / "t10k-labels-idx1-ubyte.gz")
    x, y = wl.train_set[5]
    assert x.shape == (1, 28, 28) and x.dtype == torch.float32
    want = (train_x[5].astype(np.float32) / 255.0 - MNIST_MEAN) / MNIST_STD
    np.testing.assert_allclose(x[0].numpy(), want, rtol=1e-5, atol=1e-5)
    assert int(y) == int(train_y[5])
    assert wl.val_set.tensors[1].tolist() == train_y[180:].tolist()
    assert wl.test_set.tensors[1].tolist() == test_y.tolist()
    assert wl.model(wl.test_set.tensors[0][:3]).shape == (3, 10)
    assert not (tmp_path / "cache").exists()  # --data-dir given: the cache is never touched


def test_mnist_augmented_train_items(mnist_dir: Path, tmp_path: Path) -> None:
    plain = mnist(_mnist_cfg(mnist_dir), tmp_path / "cache")
    aug = mnist(_mnist_cfg(mnist_dir, augment=True), tmp_path / "cache")
    assert isinstance(aug.train_set, ImageSet) and len(aug.train_set) == 180
    assert "augmentation" in aug.description and "augmentation" not in plain.description
    x1, y1 = aug.train_set[3]
    x2, y2 = aug.train_set[3]
    assert x1.shape == (1, 28, 28) and x1.dtype == torch.float32
    assert int(y1) == int(y2) == int(plain.train_set[3][1])
    assert not torch.allclose(x1, x2)  # a fresh random transform per call
    # Evaluation data is never augmented.
    assert torch.equal(aug.val_set.tensors[0], plain.val_set.tensors[0])
    assert torch.equal(aug.test_set.tensors[0], plain.test_set.tensors[0])


def test_mnist_augment_with_identity_transform_matches_plain(mnist_dir: Path, tmp_path: Path):
    plain = mnist(_mnist_cfg(mnist_dir), tmp_path / "cache")
    aug = mnist(_mnist_cfg(mnist_dir, augment=True), tmp_path / "cache")
    ts = aug.train_set
    identity = ImageSet(
        ts.images,
        ts.labels,
        RandomAffine(0.0, 0.0, (1.0, 1.0)),
        scale=255.0,
        mean=ts.mean,
        std=ts.std,
    )
    torch.testing.assert_close(identity[7][0], plain.train_set[7][0], atol=1e-4, rtol=1e-4)


def test_mnist_format_files_of_another_image_size_train(tmp_path: Path) -> None:
    from tests.conftest import write_mnist_dir

    root = write_mnist_dir(tmp_path / "mnist8", n_train=60, n_test=20, size=8)
    wl = mnist(_mnist_cfg(root), tmp_path / "cache")
    x, _ = next(iter(torch.utils.data.DataLoader(wl.train_set, batch_size=4)))
    assert x.shape == (4, 1, 8, 8) and wl.model(x).shape == (4, 10)  # sized from the files
    assert "MNIST 8x8" in wl.description
    tiny = write_mnist_dir(tmp_path / "mnist3", n_train=20, n_test=10, size=3)
    with pytest.raises(DataError, match=r"hold 3x3 images; LeNet5 needs at least 4x4"):
        mnist(_mnist_cfg(tiny), tmp_path / "cache")


def test_mnist_offline_without_data_dir(tmp_path: Path) -> None:
    cfg = WorkloadConfig(name="mnist", download=False)
    with pytest.raises(DataError, match="downloading is off"):
        mnist(cfg, tmp_path / "cache")


def test_mnist_on_real_shared_test_set(shared_data: Path, tmp_path: Path) -> None:
    src = shared_data / "mnist"
    if not (src / "t10k-images-idx3-ubyte.gz").is_file():
        pytest.skip("shared MNIST test set not present")
    images = read_idx(src / "t10k-images-idx3-ubyte.gz")
    labels = read_idx(src / "t10k-labels-idx1-ubyte.gz")
    root = tmp_path / "mnist"
    root.mkdir()
    # Uncompressed copies are accepted too (and are fast to write).
    write_idx(root / "train-images-idx3-ubyte", images[:8000])
    write_idx(root / "train-labels-idx1-ubyte", labels[:8000])
    write_idx(root / "t10k-images-idx3-ubyte", images[8000:])
    write_idx(root / "t10k-labels-idx1-ubyte", labels[8000:])
    wl = mnist(_mnist_cfg(root), tmp_path / "cache")
    assert (len(wl.train_set), len(wl.val_set), len(wl.test_set)) == (7200, 800, 2000)
    x = wl.train_set.tensors[0]
    # MNIST's own mean/std: real digits normalise to about zero mean and unit std.
    assert abs(float(x.mean())) < 0.05 and abs(float(x.std()) - 1.0) < 0.05


# ------------------------------------------------------------------------ user factories

USER_MODULE = """
import torch
from torch import nn
from torch.utils.data import TensorDataset

from trainscope.workloads.base import Workload

NOT_CALLABLE = 3


def make(cfg):
    width = cfg.options.get("width", 4)
    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(12, 3, generator=g), torch.randint(0, 2, (12,), generator=g))
    return Workload(
        name="tiny",
        model=nn.Sequential(nn.Linear(3, width), nn.ReLU(), nn.Linear(width, 2)),
        train_set=data,
        val_set=None,
        test_set=None,
        num_classes=2,
        description=f"tiny MLP width {width} for {cfg.name}",
    )


def not_a_workload(cfg):
    return "a string"


def plain_parts(cfg):
    # No Workload, no subclass: a model, two datasets and a loss.
    g = torch.Generator().manual_seed(1)
    x = torch.randn(96, 3, generator=g)
    y = (x[:, 0] > 0).long()
    return nn.Sequential(nn.Linear(3, 8), nn.ReLU(), nn.Linear(8, 2)), \
        TensorDataset(x[:64], y[:64]), TensorDataset(x[64:], y[64:]), \
        nn.functional.cross_entropy


def plain_dict(cfg):
    parts = dict(zip(("model", "train_set", "val_set", "loss_fn"), plain_parts(cfg)))
    return {**parts, "test_set": parts["val_set"], "class_names": ["neg", "pos"]}


def bad_parts(cfg):
    return {"model": nn.Linear(1, 1), "train": []}


def regress(cfg):
    # y = x . w + noise: float targets, a (B, 1) output, mean squared error.
    g = torch.Generator().manual_seed(0)
    x = torch.randn(256, 4, generator=g)
    y = x @ torch.tensor([1.0, -2.0, 0.5, 3.0]) + 0.01 * torch.randn(256, generator=g)
    split = lambda a, b: TensorDataset(x[a:b], y[a:b])
    return Workload(
        name="regress",
        model=nn.Linear(4, 1),
        train_set=split(0, 192),
        val_set=split(192, 224),
        test_set=split(224, 256),
        num_classes=0,
        task="regression",
        loss_fn=lambda out, t: nn.functional.mse_loss(out.squeeze(-1), t),
    )
"""


@pytest.fixture
def user_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A package ``<unique>.workloads`` importable from tmp_path; yields the package name."""
    pkg = f"ts_user_{uuid.uuid4().hex[:10]}"
    (tmp_path / pkg).mkdir()
    (tmp_path / pkg / "__init__.py").write_text("")
    (tmp_path / pkg / "workloads.py").write_text(USER_MODULE)
    (tmp_path / pkg / "broken.py").write_text("import ts_no_such_dependency_xyz\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield pkg
    for name in [m for m in sys.modules if m == pkg or m.startswith(pkg + ".")]:
        del sys.modules[name]


def test_user_factory_builds_workload(user_package: str, tmp_path: Path) -> None:
    spec = f"{user_package}.workloads:make"
    cfg = WorkloadConfig(name=spec, options={"width": 5})
    wl = build_workload(cfg, tmp_path)
    assert isinstance(wl, Workload) and wl.name == "tiny"
    assert wl.model[0].out_features == 5  # options reached the factory
    assert wl.description == f"tiny MLP width 5 for {spec}"  # and so did the config
    assert wl.class_names == ["0", "1"]
    assert wl.model(wl.train_set.tensors[0]).shape == (12, 2)


def test_user_factory_returning_non_workload(user_package: str, tmp_path: Path) -> None:
    spec = f"{user_package}.workloads:not_a_workload"
    with pytest.raises(ConfigError, match=r"returned str, not a Workload"):
        build_workload(WorkloadConfig(name=spec), tmp_path)


@pytest.mark.parametrize(
    ("target", "pattern"),
    [
        ("ts_no_such_module_xyz:make", r"cannot import 'ts_no_such_module_xyz'"),
        ("{pkg}.nope:make", r"cannot import '{pkg}\.nope'"),
        ("{pkg}.broken:make", r"cannot import '{pkg}\.broken'.*ts_no_such_dependency_xyz"),
        ("{pkg}.workloads:missing", r"has no callable 'missing'"),
        ("{pkg}.workloads:NOT_CALLABLE", r"has no callable 'NOT_CALLABLE'"),
    ],
)
def test_user_factory_errors(user_package: str, tmp_path: Path, target: str, pattern: str):
    spec = target.format(pkg=user_package)
    with pytest.raises(ConfigError, match=pattern.format(pkg=user_package)) as exc:
        build_workload(WorkloadConfig(name=spec), tmp_path)
    assert "\n" not in str(exc.value)
    with pytest.raises(ConfigError):
        load_factory(spec)


def test_build_workload_dispatches_builtins(tmp_path: Path) -> None:
    wl = build_workload(WorkloadConfig(name="synthetic", synthetic_samples=4), tmp_path)
    assert wl.name == "synthetic" and len(wl.train_set) == 4


# ------------------------------------------------------------------------ RandomAffine


def test_random_affine_identity_batch_and_single() -> None:
    identity = RandomAffine(degrees=0.0, translate=0.0, scale=(1.0, 1.0))
    batch = torch.rand(4, 2, 28, 28)
    out = identity(batch)
    assert out.shape == batch.shape and out.dtype == batch.dtype
    torch.testing.assert_close(out, batch, atol=1e-5, rtol=1e-5)
    single = torch.rand(1, 9, 13)  # non-square too
    out1 = identity(single)
    assert out1.shape == (1, 9, 13)
    torch.testing.assert_close(out1, single, atol=1e-5, rtol=1e-5)


def test_random_affine_default_shapes_and_change() -> None:
    aug = RandomAffine()
    batch = torch.rand(5, 3, 16, 16)
    out = aug(batch)
    assert out.shape == (5, 3, 16, 16) and out.dtype == torch.float32
    assert not torch.allclose(out, batch)
    assert aug(batch[0]).shape == (3, 16, 16)


def test_random_affine_generator_is_reproducible() -> None:
    aug = RandomAffine()
    x = torch.rand(3, 1, 12, 12)
    a = aug(x, torch.Generator().manual_seed(7))
    b = aug(x, torch.Generator().manual_seed(7))
    c = aug(x, torch.Generator().manual_seed(8))
    assert torch.equal(a, b)
    assert not torch.allclose(a, c)


def test_random_affine_matrices_stay_in_range() -> None:
    aug = RandomAffine(degrees=10.0, translate=0.1, scale=(0.9, 1.1))
    theta = aug.matrices(2000, torch.Generator().manual_seed(0))
    assert theta.shape == (2000, 2, 3)
    a, b = theta[:, 0, 0], theta[:, 1, 0]
    angle = torch.atan2(b, a).abs()
    scale = 1.0 / torch.sqrt(a * a + b * b)
    assert float(angle.max()) <= math.radians(10.0) + 1e-5
    assert float(angle.max()) > math.radians(8.0)  # and the range is actually used
    assert 0.9 - 1e-5 <= float(scale.min()) and float(scale.max()) <= 1.1 + 1e-5
    shift = theta[:, :, 2].abs()
    assert float(shift.max()) <= 0.2 + 1e-6  # 0.1 of the size = 0.2 in [-1, 1] units
    assert float(shift.max()) > 0.15


def test_random_affine_fill_shows_at_the_border() -> None:
    # Zooming out by 2 pulls in area from outside the image, which takes the fill value.
    shrink = RandomAffine(degrees=0.0, translate=0.0, scale=(0.5, 0.5), fill=1.0)
    out = shrink(torch.zeros(1, 1, 16, 16))
    assert float(out[0, 0, 0, 0]) == pytest.approx(1.0, abs=1e-5)
    assert float(out[0, 0, 8, 8]) == pytest.approx(0.0, abs=1e-5)


# ------------------------------------------------------------- ImageSet and augmentation


def _digits_images() -> torch.Tensor:
    images, _ = load_digits_arrays()
    return torch.from_numpy(images[:20, None])  # float pixels 0..16, as digits stores them


@pytest.mark.parametrize("augment", [None, RandomAffine()], ids=["no-augment", "augment"])
def test_imageset_items_leave_float_images_unchanged(augment: RandomAffine | None) -> None:
    # Regression: prepare() once divided float pixels by the scale in place, so every
    # __getitem__ shrank the stored image (float .float() is the stored tensor itself).
    images = _digits_images()
    before = images.clone()
    ds = ImageSet(images, torch.arange(20), augment, scale=16.0)
    for _ in range(3):
        for i in (0, 5, 5, 19):
            x, _ = ds[i]
            assert float(x.max()) <= 1.0 + 1e-5
    ds.prepare(ds.images[:8], torch.Generator().manual_seed(0))  # the batch path too
    assert torch.equal(ds.images, before)
    assert ds.images is images  # still the caller's tensor, not a copy
    if augment is None:  # and the values are right, every time
        torch.testing.assert_close(ds[5][0], before[5] / 16.0)
        torch.testing.assert_close(ds[5][0], before[5] / 16.0)


def test_imageset_prepare_normalises_single_images_and_batches() -> None:
    images = _digits_images()
    ds = ImageSet(images, torch.arange(20), None, scale=16.0, mean=0.5, std=0.25)
    want = (images / 16.0 - 0.5) / 0.25
    torch.testing.assert_close(ds.prepare(images[3]), want[3])
    torch.testing.assert_close(ds.prepare(images[2:6]), want[2:6])
    x, y = ds[4]
    torch.testing.assert_close(x, want[4])
    assert int(y) == 4 and len(ds) == 20
    split = ds.in_memory()
    assert split.inputs is ds.images and split.targets is ds.labels
    torch.testing.assert_close(split.transform(images[:4], None), want[:4])


def test_imageset_batch_augmentation_is_reproducible_with_a_generator() -> None:
    ds = ImageSet(_digits_images(), torch.arange(20), RandomAffine(), scale=16.0)
    a = ds.prepare(ds.images[:6], torch.Generator().manual_seed(1))
    b = ds.prepare(ds.images[:6], torch.Generator().manual_seed(1))
    c = ds.prepare(ds.images[:6], torch.Generator().manual_seed(2))
    assert a.shape == (6, 1, 8, 8) and torch.equal(a, b)
    assert not torch.allclose(a, c)


def test_digits_augment_makes_an_imageset_train_set() -> None:
    plain = digits(WorkloadConfig(), Path("unused"))
    aug = digits(WorkloadConfig(augment=True), Path("unused"))
    assert isinstance(plain.train_set, TensorDataset)
    assert isinstance(aug.train_set, ImageSet) and not isinstance(aug.train_set, TensorDataset)
    assert len(aug.train_set) == len(plain.train_set)
    assert "augmentation" in aug.description and "augmentation" not in plain.description
    assert torch.equal(aug.train_set.labels, plain.train_set.tensors[1])
    # Evaluation data is never augmented.
    for a, p in ((aug.val_set, plain.val_set), (aug.test_set, plain.test_set)):
        assert isinstance(a, TensorDataset)
        assert torch.equal(a.tensors[0], p.tensors[0]) and torch.equal(a.tensors[1], p.tensors[1])
    # Items are augmented afresh each time, in the plain set's range and shape.
    x1, y1 = aug.train_set[3]
    x2, _ = aug.train_set[3]
    assert x1.shape == plain.train_set[3][0].shape == (1, 8, 8)
    assert int(y1) == int(plain.train_set[3][1])
    assert not torch.allclose(x1, x2)
    # With an identity transform the pipeline gives exactly the plain (scaled) pixels.
    ts = aug.train_set
    identity = ImageSet(
        ts.images, ts.labels, RandomAffine(0.0, 0.0, (1.0, 1.0)), scale=ts.scale,
        mean=ts.mean, std=ts.std,
    )  # fmt: skip
    for i in (0, 7, len(ts) - 1):
        torch.testing.assert_close(identity[i][0], plain.train_set[i][0], atol=1e-5, rtol=1e-5)


def test_synthetic_augment_makes_an_imageset_train_set() -> None:
    kw = {"name": "synthetic", "synthetic_samples": 16, "synthetic_shape": (2, 12, 10)}
    plain = synthetic(WorkloadConfig(**kw), Path("unused"))
    aug = synthetic(WorkloadConfig(**kw, augment=True), Path("unused"))
    assert isinstance(plain.train_set, TensorDataset) and isinstance(aug.train_set, ImageSet)
    assert "augmentation" in aug.description and "augmentation" not in plain.description
    # The same random draws underneath: only the training items are transformed.
    assert torch.equal(aug.train_set.images, plain.train_set.tensors[0])
    assert torch.equal(aug.train_set.labels, plain.train_set.tensors[1])
    for a, p in ((aug.val_set, plain.val_set), (aug.test_set, plain.test_set)):
        assert isinstance(a, TensorDataset) and torch.equal(a.tensors[0], p.tensors[0])
    x, _ = aug.train_set[0]
    assert x.shape == (2, 12, 10) and aug.model(x[None]).shape == (1, 10)
    assert not torch.allclose(x, plain.train_set[0][0])


def test_a_regression_workload_trains_and_reports_regression_metrics(
    user_package: str, tmp_path: Path
) -> None:
    """Float targets: no bincount, no accuracy; MSE, MAE and R² instead."""
    from trainscope.config import from_dict
    from trainscope.train.run import run

    cfg = from_dict(
        {
            "workload": {"name": f"{user_package}.workloads:regress"},
            "train": {"epochs": 20, "optimizer": "adam", "lr": 0.1},
            "out": str(tmp_path / "r"),
            "runtime": {"progress": False},
        }
    )
    summary = run(cfg)
    assert summary["status"] == "completed"
    assert summary["test_accuracy"] is None and summary["per_class_accuracy"] is None
    metrics = summary["test_metrics"]
    assert metrics["r2"] > 0.9 and metrics["mse"] < 1.0 and metrics["mae"] > 0
    assert summary["epochs"][-1]["r2"] is not None and summary["epochs"][-1]["val_accuracy"] is None
    from trainscope.reports.tables import overview_table

    rows = dict(map(tuple, overview_table(summary).rows))
    assert rows["Test accuracy"] == "–" and float(rows["Test R^2"]) > 0.9


def test_an_unknown_task_is_refused() -> None:
    with pytest.raises(ConfigError, match="unknown task"):
        Workload("w", nn.Linear(1, 1), [], None, None, 0, task="ranking")


@pytest.mark.parametrize("factory", ["plain_parts", "plain_dict"])
def test_a_factory_may_return_plain_parts(user_package: str, tmp_path: Path, factory: str) -> None:
    """A model, datasets and a loss (a tuple or a dict) are wrapped into a Workload: the
    run trains, evaluates and counts two classes from the model's last layer."""
    from trainscope.config import from_dict
    from trainscope.train.run import run

    spec = f"{user_package}.workloads:{factory}"
    wl = build_workload(WorkloadConfig(name=spec), tmp_path)
    assert wl.num_classes == 2 and wl.task == "classification"
    cfg = from_dict(
        {
            "workload": {"name": spec},
            "train": {"epochs": 3, "optimizer": "adam", "lr": 0.05},
            "out": str(tmp_path / factory),
            "runtime": {"progress": False},
        }
    )
    summary = run(cfg)
    assert summary["status"] == "completed" and summary["epochs"][-1]["val_accuracy"] > 0.6
    if factory == "plain_dict":
        assert set(summary["per_class_accuracy"]) == {"neg", "pos"}


def test_plain_parts_with_unknown_keys_are_one_clear_error(user_package: str, tmp_path) -> None:
    with pytest.raises(ConfigError, match="unknown key.*train.*missing train_set"):
        build_workload(WorkloadConfig(name=f"{user_package}.workloads:bad_parts"), tmp_path)


def test_find_blocks_takes_model_blocks_else_the_longest_list_of_like_modules() -> None:
    """The block finder for scripts' models: ``blocks`` first (trainscope's own), else a
    ModuleList of one class (nanoGPT's ``transformer.h``); a mixed list is not blocks."""
    from torch import nn

    from trainscope.workloads.base import find_blocks

    class Gpt(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.transformer = nn.ModuleDict({
                "h": nn.ModuleList(nn.Linear(2, 2) for _ in range(4)),
                "mixed": nn.ModuleList([nn.Linear(2, 2), nn.ReLU(), nn.Linear(2, 2),
                                        nn.Tanh(), nn.ReLU()]),
            })  # fmt: skip
            self.short = nn.ModuleList(nn.Linear(2, 2) for _ in range(2))

    where, blocks = find_blocks(Gpt())
    assert where == "transformer.h" and len(blocks) == 4
    own = Gpt()
    own.blocks = nn.ModuleList(nn.ReLU() for _ in range(2))
    assert find_blocks(own)[0] == "blocks"
    assert find_blocks(nn.Sequential(nn.Linear(2, 2))) == ("", [])
