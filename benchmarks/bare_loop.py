"""A bare, hand-written PyTorch training loop: the baseline for trainscope's overhead.

It does the same work as
``trainscope run --workload synthetic --synthetic-samples N --batch-size B --epochs E
--num-workers 0``: the same data (same generator seed), the same LeNet5, the same
shuffled DataLoader, SGD with momentum, validation after each epoch and a test pass at
the end, with a loss read every ``log_every`` steps, but no stage timing, no system
sampler, no run record and no console output.
"""

from __future__ import annotations

import argparse

import torch
from torch.utils.data import DataLoader, TensorDataset

from trainscope.workloads.lenet import LeNet5


def main() -> None:
    """Parse the workload size and train it."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--samples", type=int, default=8192)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--log-every", type=int, default=10)
    args = p.parse_args()

    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1234)  # same tensors as trainscope's synthetic data

    def make(n: int) -> TensorDataset:
        return TensorDataset(
            torch.randn(n, 1, 28, 28, generator=g), torch.randint(0, 10, (n,), generator=g)
        )

    train_set, val_set, test_set = (
        make(args.samples),
        make(args.samples // 4),
        make(args.samples // 4),
    )
    model = LeNet5(1, 28, 10)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    train = DataLoader(
        train_set,
        batch_size=args.batch_size,
        shuffle=True,
        generator=torch.Generator().manual_seed(0),
    )

    def evaluate(ds: TensorDataset) -> float:
        model.eval()
        correct = 0
        with torch.no_grad():
            for x, y in DataLoader(ds, batch_size=args.batch_size):
                correct += (model(x).argmax(1) == y).sum().item()
        return correct / len(ds)

    for _ in range(args.epochs):
        model.train()
        losses = []
        for step, (x, y) in enumerate(train, 1):
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            losses.append(loss.detach())
            if step % args.log_every == 0:
                torch.stack(losses).tolist()  # the loss read a real loop does for its log
                losses.clear()
        evaluate(val_set)
    print(f"test accuracy {evaluate(test_set):.4f}")


if __name__ == "__main__":
    main()
