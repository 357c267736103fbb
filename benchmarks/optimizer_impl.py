"""One optimizer step under torch's three implementations: the per-tensor loop (a CPU's
default), foreach (multi-tensor) and fused, on the same parameters and gradients.

The three alternate, one step each, in a rotating order; each is timed with
``time.perf_counter`` around ``optimizer.step()`` (a CPU run: nothing asynchronous),
after 5 warm-up steps each. Prints the median and IQR per implementation and the ratio
of medians against the loop, for each model and thread count:

    python benchmarks/optimizer_impl.py --steps 30 --threads 1 2
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch import nn

IMPLS = {"for-loop": {"foreach": False}, "foreach": {"foreach": True}, "fused": {"fused": True}}


def models() -> dict[str, nn.Module]:
    """Many small tensors, and a GPT-sized one (gpt-char's Shakespeare preset's shapes)."""
    from trainscope.workloads.gpt import GPT, GPTConfig

    torch.manual_seed(0)
    small = nn.Sequential(*[nn.Linear(64, 64) for _ in range(50)])
    gpt = GPT(GPTConfig(vocab_size=65, block_size=256, n_layer=6, n_head=6, n_embd=384))
    return {"50 x Linear(64, 64)": small, "gpt-char shakespeare": gpt}


def quartiles(xs: list[float]) -> tuple[float, float, float]:
    """(low quartile, median, high quartile)."""
    q = statistics.quantiles(xs, n=4)
    return q[0], statistics.median(xs), q[2]


def measure(model: nn.Module, name: str, steps: int) -> dict[str, list[float]]:
    """Seconds per step() of each implementation, alternated."""
    opts = {}
    for impl, flags in IMPLS.items():
        params = [p.detach().clone().requires_grad_(True) for p in model.parameters()]
        for p in params:
            p.grad = torch.randn_like(p)
        opts[impl] = torch.optim.Adam(params, lr=1e-3, **flags)
    times: dict[str, list[float]] = {impl: [] for impl in IMPLS}
    order = list(IMPLS)
    for i in range(steps + 5):
        for impl in order[i % 3 :] + order[: i % 3]:  # rotate who goes first
            t0 = time.perf_counter()
            opts[impl].step()
            dt = time.perf_counter() - t0
            if i >= 5:
                times[impl].append(dt)
    return times


def main() -> None:
    """Print one table per thread count."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    args = p.parse_args()
    for threads in args.threads:
        torch.set_num_threads(threads)
        for name, model in models().items():
            times = measure(model, name, args.steps)
            loop = statistics.median(times["for-loop"])
            cells = []
            for impl, xs in times.items():
                lo, med, hi = quartiles(xs)
                cells.append(f"{impl} {1e3 * med:.3g} ms ({1e3 * lo:.3g}-{1e3 * hi:.3g}) "
                             f"x{loop / med:.2f}")  # fmt: skip
            print(f"threads={threads} {name} (Adam, n={args.steps}): " + "; ".join(cells))


if __name__ == "__main__":
    main()
