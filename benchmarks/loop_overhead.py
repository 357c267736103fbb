"""Overhead of trainscope's instrumented loop against a bare hand-written loop.

Runs the two as whole processes, alternately (A B A B ...), after one warm-up of each,
and reports per-command median wall and CPU time and the median of the pairwise ratios.
Alternating pairs keep a drifting machine from favouring one side.

    python benchmarks/loop_overhead.py --runs 7
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def timed(cmd: list[str], pin: int | None = None) -> tuple[float, float]:
    """(wall seconds, user+sys CPU seconds) of one child process, optionally on one CPU."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    pre = (lambda: os.sched_setaffinity(0, {pin})) if pin is not None else None
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, preexec_fn=pre)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def main() -> None:
    """Run the pairs and print the table."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=7, help="counted pairs (after one warm-up)")
    p.add_argument("--samples", type=int, default=8192)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--json", type=Path, help="also write the raw figures here")
    p.add_argument("--pin", type=int, metavar="CPU", help="run both on this CPU only")
    p.add_argument(
        "--threads", type=int, metavar="N", help="set OMP_NUM_THREADS=N for both (1: no spinning)"
    )
    args = p.parse_args()
    if args.threads:
        os.environ["OMP_NUM_THREADS"] = str(args.threads)

    size = ["--batch-size", str(args.batch_size), "--epochs", str(args.epochs)]
    bare = [sys.executable, str(HERE / "bare_loop.py"), "--samples", str(args.samples), *size]
    out = Path(tempfile.mkdtemp(prefix="trainscope-bench-")) / "run"
    ts = [
        sys.executable, "-m", "trainscope", "run", "--workload", "synthetic",
        "--synthetic-samples", str(args.samples), "--num-workers", "0", *size,
        "--quiet", "--no-progress", "--out", str(out), "--overwrite",
    ]  # fmt: skip

    timed(bare, args.pin), timed(ts, args.pin)  # warm-up: file cache, bytecode
    rows: dict[str, list[tuple[float, float]]] = {"bare": [], "trainscope": []}
    for i in range(args.runs):
        rows["bare"].append(timed(bare, args.pin))
        rows["trainscope"].append(timed(ts, args.pin))
        print(
            f"pair {i + 1}: bare {rows['bare'][-1][0]:.2f} s, "
            f"trainscope {rows['trainscope'][-1][0]:.2f} s",
            file=sys.stderr,
        )
    ratios = [t[0] / b[0] for b, t in zip(rows["bare"], rows["trainscope"])]
    cpu_ratios = [t[1] / b[1] for b, t in zip(rows["bare"], rows["trainscope"])]
    med = {
        k: (statistics.median(w for w, _ in v), statistics.median(c for _, c in v))
        for k, v in rows.items()
    }
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} CPUs, python "
        f"{platform.python_version()}, pin={args.pin}, OMP_NUM_THREADS="
        f"{os.environ.get('OMP_NUM_THREADS', 'unset')}"
    )
    print(
        f"work: synthetic 1x28x28, {args.samples} samples, batch {args.batch_size}, "
        f"{args.epochs} epochs, LeNet5, num_workers=0"
    )
    print("| command | median wall (s) | median CPU (s) |")
    print("| --- | ---: | ---: |")
    for k, (w, c) in med.items():
        print(f"| {k} | {w:.3f} | {c:.3f} |")
    print(
        f"trainscope / bare, median of {args.runs} pairwise ratios: "
        f"wall {statistics.median(ratios):.4f} "
        f"(min {min(ratios):.4f}, max {max(ratios):.4f}), CPU {statistics.median(cpu_ratios):.4f}"
    )
    best = {k: min(w for w, _ in v) for k, v in rows.items()}
    print(f"fastest run of each: trainscope / bare = {best['trainscope'] / best['bare']:.4f}")
    if args.json:
        args.json.write_text(
            json.dumps({"rows": rows, "ratios": ratios, "cpu_ratios": cpu_ratios}, indent=2)
        )


if __name__ == "__main__":
    main()
