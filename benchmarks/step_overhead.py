"""Per-step cost of trainscope's instrumentation, in microseconds, measured in-process.

Whole-process timing (loop_overhead.py) is what a user sees, but on a noisy machine its
spread can exceed the overhead being measured. This script isolates the instrumentation:
it runs trainscope's ``train_epoch`` (stage marks, loss bookkeeping, step records written
as JSON lines) and a bare loop over the same near-free model (a 1x1 linear layer on one
sample), so the difference per step is the bookkeeping itself. It then times a real
LeNet5 step, and states the bookkeeping as a share of it.

    python benchmarks/step_overhead.py
"""

from __future__ import annotations

import io
import json
import statistics
import time

import torch
from torch.utils.data import DataLoader, TensorDataset

from trainscope.profiling.timer import HostStageTimer
from trainscope.techniques.precision import Precision
from trainscope.train.loop import EpochOptions, TrainState, train_epoch
from trainscope.workloads.lenet import LeNet5

CPU = torch.device("cpu")


def _state(model: torch.nn.Module) -> TrainState:
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    return TrainState(model, opt, Precision(CPU), torch.nn.functional.cross_entropy, CPU)


def bare_epoch(state: TrainState, loader: DataLoader, log_every: int = 10) -> None:
    """The same step as train_step, with nothing measured or recorded."""
    losses = []
    for step, (x, y) in enumerate(loader, 1):
        loss = state.loss_fn(state.model(x), y)
        loss.backward()
        state.optimizer.step()
        state.optimizer.zero_grad(set_to_none=True)
        losses.append(loss.detach())
        if step % log_every == 0:
            torch.stack(losses).tolist()
            losses.clear()


def instrumented_epoch(state: TrainState, loader: DataLoader, log_every: int = 10) -> None:
    """trainscope's epoch, writing its step records as the run writer does."""
    sink = io.StringIO()

    def on_steps(records: list[dict]) -> None:
        for r in records:
            sink.write(json.dumps({"event": "step", **r}) + "\n")

    options = EpochOptions(log_every=log_every, on_steps=on_steps)
    train_epoch(state, loader, HostStageTimer(), options)


def per_step_us(fn, state: TrainState, loader: DataLoader, repeats: int) -> list[float]:
    """Microseconds per step of ``fn`` over ``repeats`` epochs."""
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn(state, loader)
        out.append((time.perf_counter() - t0) / len(loader) * 1e6)
    return out


def main() -> None:
    """Measure and print the table."""
    torch.manual_seed(0)
    tiny = TensorDataset(torch.randn(2000, 1), torch.randint(0, 2, (2000,)))
    tiny_loader = DataLoader(tiny, batch_size=1)
    tiny_state = _state(torch.nn.Linear(1, 2))
    bare, inst = [], []
    for _ in range(7):  # alternate, so drift hits both
        bare += per_step_us(bare_epoch, tiny_state, tiny_loader, 1)
        inst += per_step_us(instrumented_epoch, tiny_state, tiny_loader, 1)
    overhead = statistics.median(inst) - statistics.median(bare)

    g = torch.Generator().manual_seed(1234)
    mnist_like = TensorDataset(
        torch.randn(2048, 1, 28, 28, generator=g), torch.randint(0, 10, (2048,), generator=g)
    )
    lenet_loader = DataLoader(mnist_like, batch_size=64, shuffle=True)
    lenet = statistics.median(per_step_us(bare_epoch, _state(LeNet5(1, 28, 10)), lenet_loader, 5))

    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    print("| measure | microseconds per step |")
    print("| --- | ---: |")
    print(
        f"| bare step, 1x1 linear, batch 1 (median of 7 epochs) | {statistics.median(bare):.1f} |"
    )
    print(f"| trainscope step, same model (median of 7 epochs) | {statistics.median(inst):.1f} |")
    print(f"| instrumentation cost (difference) | {overhead:.1f} |")
    print(f"| bare LeNet5 step, batch 64, 28x28 (median of 5 epochs) | {lenet:.1f} |")
    print(f"instrumentation as a share of a LeNet5 step: {overhead / lenet:.2%}")


if __name__ == "__main__":
    main()
