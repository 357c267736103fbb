"""A Lightning ``Trainer.fit``: an MLP LightningModule learns scikit-learn's 8x8 digits.

Nothing here knows about trainscope. ``training_step`` and ``validation_step`` as any
LightningModule has them, two DataLoaders, validation every epoch (and Lightning's
sanity check before the first), a checkpoint per epoch from Lightning's default
``ModelCheckpoint``. Lightning runs each step's forward and backward inside
``optimizer.step(closure)``; trainscope times them apart. Needs ``pip install lightning``;
the digits ship with scikit-learn, so nothing is downloaded. About 10 s on a 2-core CPU.

Run it as a plain script, then measured, unchanged::

    python examples/profile/lightning_fit.py
    trainscope profile --out runs/lightning -- examples/profile/lightning_fit.py
    trainscope report runs/lightning && trainscope doctor runs/lightning

The last line it prints is ``optimizer steps (trainer.global_step): N``: the count
trainscope's ``steps`` must equal.

``--trainscope-out DIR`` measures the same fit the other way, from inside: the Trainer
gets trainscope's Lightning profiler and callback (``trainscope.integrations.lightning``),
which write the same record to DIR (the one place this script names trainscope)::

    python examples/profile/lightning_fit.py --trainscope-out runs/lightning-integration
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import lightning as L
import numpy as np
import torch
from sklearn.datasets import load_digits
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument(
        "--out", type=Path, default=None, help="Lightning's root folder (default: a temporary one)"
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--trainscope-out",
        type=Path,
        default=None,
        help="record the fit with trainscope's Lightning integration into DIR",
    )
    return p.parse_args()


class DigitsClassifier(L.LightningModule):
    """An MLP over the 64 pixels; cross-entropy, Adam, accuracy logged on validation."""

    def __init__(self, lr: float) -> None:
        super().__init__()
        self.lr = lr
        self.net = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], idx: int) -> torch.Tensor:
        x, y = batch
        loss = nn.functional.cross_entropy(self(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], idx: int) -> None:
        x, y = batch
        logits = self(x)
        self.log("val_loss", nn.functional.cross_entropy(logits, y))
        self.log("val_acc", (logits.argmax(dim=1) == y).float().mean(), prog_bar=True)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=self.lr)


def loaders(batch_size: int, seed: int) -> tuple[DataLoader, DataLoader]:
    """Training and validation loaders over an 80 / 20 split of the digits."""
    digits = load_digits()
    x = torch.from_numpy(digits.data.astype(np.float32) / 16.0)
    y = torch.from_numpy(digits.target.astype(np.int64))
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(seed))
    cut = int(0.8 * len(x))
    train = TensorDataset(x[order[:cut]], y[order[:cut]])
    val = TensorDataset(x[order[cut:]], y[order[cut:]])
    return (DataLoader(train, batch_size=batch_size, shuffle=True),
            DataLoader(val, batch_size=256))  # fmt: skip


def fit(args: argparse.Namespace, root: Path) -> None:
    L.seed_everything(args.seed, verbose=False)
    train, val = loaders(args.batch_size, args.seed)
    measured: dict = {}
    if args.trainscope_out is not None:  # imported only when asked for
        from trainscope.integrations.lightning import Callback, Profiler

        measured = {"profiler": Profiler(out=str(args.trainscope_out)), "callbacks": [Callback()]}
    trainer = L.Trainer(
        max_epochs=args.epochs, accelerator="cpu", devices=1, default_root_dir=root,
        logger=False, enable_progress_bar=False, enable_model_summary=False, **measured,
    )  # fmt: skip
    trainer.fit(DigitsClassifier(args.lr), train, val)
    print(f"val_acc {float(trainer.callback_metrics['val_acc']):.4f}")
    print(f"optimizer steps (trainer.global_step): {trainer.global_step}")


def main() -> None:
    args = parse_args()
    if args.out is not None:
        fit(args, args.out)
        return
    with tempfile.TemporaryDirectory(prefix="lightning_fit-") as tmp:
        fit(args, Path(tmp))


if __name__ == "__main__":
    main()
