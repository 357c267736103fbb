"""Muon's Newton-Schulz iterations in bf16 (torch.optim.Muon's) against fp32, per step.

torch.optim.Muon orthogonalises every hidden matrix's update with 5 quintic Newton-Schulz
iterations in bfloat16. On a CPU without native bf16 units (no avx512_bf16 / amx_bf16)
each bf16 matmul is emulated. This times one optimizer step's worth of iterations (every
hidden matrix of a GPT of the given shape) in both dtypes, alternating blocks of
``--steps`` steps, and prints the median time per step of each with its min-max and n:

    python benchmarks/muon_newton_schulz.py --layers 4 --width 128 --threads 1

Warm-up: one untimed block of each first. Nothing else is timed (no model, no data).
"""

from __future__ import annotations

import argparse
import statistics
import time


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--width", type=int, default=128)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--steps", type=int, default=10, help="steps per timed block")
    p.add_argument("--rounds", type=int, default=7, help="alternated blocks of each dtype")
    args = p.parse_args()

    import torch

    from trainscope.runtime.device import cpu_low_precision
    from trainscope.train.optimizers import orthogonalize

    torch.set_num_threads(args.threads)
    w = args.width
    # A GPT block's hidden matrices: fused q/k/v, attention output, MLP in and out.
    shapes = [(3 * w, w), (w, w), (4 * w, w), (w, 4 * w)] * args.layers
    gen = torch.Generator().manual_seed(0)
    grads = [torch.randn(s, generator=gen) for s in shapes]
    coeffs = (3.4445, -4.7750, 2.0315)

    def block(dtype: torch.dtype) -> float:
        t0 = time.perf_counter()
        for _ in range(args.steps):
            for g in grads:
                orthogonalize(g, coeffs, 5, 1e-7, dtype)
        return (time.perf_counter() - t0) / args.steps * 1e3

    kinds = {"bf16": torch.bfloat16, "fp32": torch.float32}
    for dtype in kinds.values():
        block(dtype)  # warm-up, untimed
    times: dict[str, list[float]] = {k: [] for k in kinds}
    for _ in range(args.rounds):
        for name, dtype in kinds.items():
            times[name].append(block(dtype))
    print(f"{len(shapes)} matrices ({args.layers} layers, width {w}), {args.threads} thread(s), "
          f"native bf16 units: {(cpu_low_precision() or {}).get('bf16')}")  # fmt: skip
    for name, xs in times.items():
        print(f"  {name}: {statistics.median(xs):.1f} ms per step "
              f"(min-max {min(xs):.1f}-{max(xs):.1f}, n={len(xs)})")  # fmt: skip
    ratio = statistics.median(times["bf16"]) / statistics.median(times["fp32"])
    apart = min(times["bf16"]) > max(times["fp32"]) or min(times["fp32"]) > max(times["bf16"])
    print(f"  bf16 / fp32: {ratio:.2f}x" + ("" if apart else " (the ranges overlap: no claim)"))


if __name__ == "__main__":
    main()
