"""A custom training loop with gradient accumulation, an evaluation every N steps and
checkpoints written with ``torch.save``: an MLP learns scikit-learn's 8x8 digits.

Nothing here knows about trainscope. Each optimizer step sums the gradients of
``--accum`` micro-batches (the loss divided by ``--accum``, as nanoGPT does), so
trainscope's ``steps`` are optimizer steps and each step record's ``micro_batches`` is
``--accum``. Every ``--eval-every`` steps the held-out loss is computed (``model.eval()``,
``torch.no_grad()``) and, when it improved, a checkpoint is saved; a last one at the end.
The digits ship with scikit-learn: nothing is downloaded. About 5 s on a 2-core CPU.

Run it as a plain script, then measured, unchanged::

    python examples/profile/grad_accum.py
    trainscope profile --out runs/accum -- examples/profile/grad_accum.py --out ckpt
    trainscope report runs/accum && trainscope doctor runs/accum
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch
from sklearn.datasets import load_digits
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=200, help="optimizer steps (default 200)")
    p.add_argument("--accum", type=int, default=4, help="micro-batches per optimizer step")
    p.add_argument("--micro-batch", type=int, default=16, help="samples per micro-batch")
    p.add_argument("--eval-every", type=int, default=50, help="optimizer steps between evals")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument(
        "--out", type=Path, default=None, help="checkpoint folder (default: a temporary one)"
    )
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args()


def digits_loaders(micro_batch: int, seed: int) -> tuple[DataLoader, DataLoader]:
    """A shuffled training loader of micro-batches and a held-out loader (80 / 20 split)."""
    digits = load_digits()
    x = torch.from_numpy(digits.data.astype(np.float32) / 16.0)  # 64 pixels in [0, 1]
    y = torch.from_numpy(digits.target.astype(np.int64))
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(seed))
    cut = int(0.8 * len(x))
    train = TensorDataset(x[order[:cut]], y[order[:cut]])
    held_out = TensorDataset(x[order[cut:]], y[order[cut:]])
    # drop_last: every optimizer step sums exactly --accum full micro-batches
    return (DataLoader(train, batch_size=micro_batch, shuffle=True, drop_last=True),
            DataLoader(held_out, batch_size=128))  # fmt: skip


def micro_batches(loader: DataLoader) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """The training loader's batches, epoch after epoch, without end."""
    while True:
        yield from loader


@torch.no_grad()
def held_out_loss(model: nn.Module, loader: DataLoader) -> float:
    """Mean cross-entropy over the held-out split (eval mode, no gradients)."""
    model.eval()
    total, n = 0.0, 0
    for x, y in loader:
        total += nn.functional.cross_entropy(model(x), y, reduction="sum").item()
        n += len(y)
    model.train()
    return total / n


def save(path: Path, model: nn.Module, optimizer: torch.optim.Optimizer, step: int) -> None:
    """A resumable checkpoint: weights, optimizer state and the step it was taken at."""
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                "step": step}, path)  # fmt: skip


def train(args: argparse.Namespace, out: Path) -> None:
    torch.manual_seed(args.seed)
    train_loader, test_loader = digits_loaders(args.micro_batch, args.seed)
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
                          nn.Linear(256, 10))  # fmt: skip
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=1e-2)
    batches = micro_batches(train_loader)
    best = float("inf")
    t0 = time.perf_counter()
    for step in range(1, args.steps + 1):
        for _ in range(args.accum):
            x, y = next(batches)
            # Divided so that the summed gradients are those of one batch of accum * micro.
            loss = nn.functional.cross_entropy(model(x), y) / args.accum
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if step % args.eval_every == 0 or step == args.steps:
            val = held_out_loss(model, test_loader)
            print(f"step {step}: train loss {loss.item() * args.accum:.4f}, "
                  f"held-out loss {val:.4f}")  # fmt: skip
            if val < best:
                best = val
                save(out / "best.pt", model, optimizer, step)
    save(out / "last.pt", model, optimizer, args.steps)
    print(f"done in {time.perf_counter() - t0:.1f} s; best held-out loss {best:.4f}")


def main() -> None:
    args = parse_args()
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        train(args, args.out)
        return
    with tempfile.TemporaryDirectory(prefix="grad_accum-") as tmp:
        train(args, Path(tmp))


if __name__ == "__main__":
    main()
