"""Regression on tabular data, as plain parts: no subclassing, nothing downloaded.

scikit-learn's bundled diabetes table (442 patients, 10 features, a disease-progression
score) split 70/15/15 with a fixed seed; features and target standardised with the
training split's mean and standard deviation (so MSE is in units of the target's variance
and R² = 1 - MSE on it, roughly); a small MLP; mean squared error.

From the repository root (the current directory is searched for ``examples`` after the
installed packages; elsewhere put the root on ``PYTHONPATH``)::

    trainscope run --workload examples.tabular_regression:make --epochs 5 \\
        --optimizer adam --lr 1e-3 --batch-size 32

Options (``--set workload.options.NAME=VALUE``): ``hidden`` (MLP width, 64),
``data`` (``diabetes``, or ``synthetic``: a fixed nonlinear function of 10 random
features plus noise), ``samples`` (rows of the synthetic table, 2000).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.utils.data import TensorDataset

from trainscope.errors import ConfigError

OPTIONS = {"hidden": 64, "data": "diabetes", "samples": 2000}


def diabetes() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's diabetes table (442 x 10, unscaled) from the files it ships: what
    ``load_diabetes(return_X_y=True, scaled=False)`` returns, without importing
    ``sklearn.datasets`` (about 2 s, paid again by every process under ``--nproc``)."""
    root = importlib.util.find_spec("sklearn").submodule_search_locations[0]
    data = Path(root) / "datasets" / "data"
    try:
        return np.loadtxt(data / "diabetes_data_raw.csv.gz"), np.loadtxt(
            data / "diabetes_target.csv.gz"
        )
    except OSError:  # a release that moved the files
        from sklearn.datasets import load_diabetes

        return load_diabetes(return_X_y=True, scaled=False)


def table(data: str, samples: int) -> tuple[np.ndarray, np.ndarray]:
    """The features (N, F) and targets (N,) as float arrays."""
    if data == "diabetes":
        return diabetes()
    if data == "synthetic":  # a fixed nonlinear function of 10 features, plus noise
        rng = np.random.default_rng(0)
        x = rng.normal(size=(samples, 10))
        y = x[:, :6] @ rng.normal(size=6) + np.sin(2 * x[:, 0]) + 0.1 * rng.normal(size=samples)
        return x, y
    raise ConfigError(f"tabular_regression: data must be diabetes or synthetic, got {data!r}")


def mse(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """(B, 1) predictions against (B,) targets, in float32 whatever the autocast dtype."""
    return nn.functional.mse_loss(outputs.squeeze(-1).float(), targets)


def make(cfg) -> dict:
    """The factory: ``cfg`` is trainscope's WorkloadConfig; options in ``cfg.options``."""
    unknown = set(cfg.options) - set(OPTIONS)
    if unknown:
        raise ConfigError(f"tabular_regression: unknown option(s) {', '.join(sorted(unknown))}")
    opt = {**OPTIONS, **cfg.options}
    x, y = table(opt["data"], int(opt["samples"]))
    order = np.random.default_rng(0).permutation(len(y))
    n_train, n_val = int(0.7 * len(y)), int(0.15 * len(y))
    train, val, test = np.split(order, [n_train, n_train + n_val])
    # Standardise with the training split's statistics only: nothing leaks from val/test.
    x = (x - x[train].mean(0)) / x[train].std(0)
    y = (y - y[train].mean()) / y[train].std()
    x, y = torch.tensor(x, dtype=torch.float32), torch.tensor(y, dtype=torch.float32)

    def split(ix: np.ndarray) -> TensorDataset:
        return TensorDataset(x[ix], y[ix])  # two tensors: --loader fast takes it as is

    h = int(opt["hidden"])
    model = nn.Sequential(
        nn.Linear(x.shape[1], h), nn.ReLU(), nn.Linear(h, h), nn.ReLU(), nn.Linear(h, 1)
    )
    return {
        "model": model,
        "train_set": split(train),
        "val_set": split(val),
        "test_set": split(test),
        "loss_fn": mse,
        "task": "regression",  # loss, MSE, MAE and R² instead of accuracy
        "description": f"{opt['data']} table ({x.shape[1]} features), MLP {h}-{h}",
    }
