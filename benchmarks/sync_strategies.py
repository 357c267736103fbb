"""Gradient sync by hand (gather-scatter, allreduce) vs DDP, 2 processes, many tensors.

Each measurement is one whole ``trainscope run --nproc 2`` (torchrun, gloo on CPU or nccl
on GPUs) of the deep MLP in ``many_tensors.py`` (64 parameter tensors). The strategies
run round-robin, ``--runs`` times each, so a slow spell of the machine hits all of them;
the script prints the median time per iteration, the median gradient-sync time per
iteration (the ``comm`` stage of the hand-written strategies; DDP's is inside backward)
and, per pair of strategies, the ratio of the medians where trainscope's rule allows a
claim (see :func:`verdicts`):

    python benchmarks/sync_strategies.py --runs 5
    python benchmarks/sync_strategies.py --runs 5 --device cuda   # with 2 GPUs
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from trainscope.util.spread import differ, no_difference_text, spread

STRATEGIES = ("ddp", "gather-scatter", "allreduce")
# The pairs compared, each as a / b.
PAIRS = (("gather-scatter", "ddp"), ("allreduce", "ddp"), ("gather-scatter", "allreduce"))
HERE = Path(__file__).resolve().parent


def one_run(strategy: str, out: Path, args: argparse.Namespace) -> dict:
    """One whole run; returns ms per iteration and ms of comm per iteration."""
    cmd = [
        sys.executable, "-m", "trainscope.cli", "run",
        "--workload", "many_tensors:workload",
        "--synthetic-samples", str(args.samples),
        "--batch-size", str(args.batch_size),
        "--epochs", "1",
        "--strategy", strategy, "--nproc", "2",
        "--device", args.device,
        "--log-every", "50",
        "--no-save-weights", "--quiet", "--no-progress",
        "--out", str(out),
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": f"{HERE}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    env.setdefault("OMP_NUM_THREADS", "1")  # one thread per rank: 2 ranks on 2 cores
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL)
    s = json.loads((out / "summary.json").read_text())
    steps = s["steps"]
    comm = s["stages_s"].get("comm")
    return {
        "iter_ms": 1e3 * s["train_time_s"] / steps,
        "comm_ms": 1e3 * comm / steps if comm is not None else None,
        "backward_ms": 1e3 * s["stages_s"]["backward"] / steps,
    }


def verdicts(iter_ms: dict[str, list[float]]) -> list[str]:
    """One line per pair in PAIRS: ``"a / b: 1.23x"``, the ratio of the median times per
    iteration, only where the two differ by trainscope's rule (``trainscope.util.spread``: both
    measured at least twice and their spreads, the IQR from 5 runs and the min–max range
    below, do not overlap); otherwise why no ratio is given."""
    iters = {s: spread(values) for s, values in iter_ms.items()}
    lines = []
    for a, b in PAIRS:
        if differ(iters[a], iters[b]):
            lines.append(f"{a} / {b}: {iters[a].median / iters[b].median:.2f}x")
        else:
            lines.append(f"{a} / {b}: {no_difference_text(iters[a], iters[b])}")
    return lines


def main() -> None:
    """Run the strategies round-robin and print medians and ratios as Markdown."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--samples", type=int, default=4096)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    results: dict[str, list[dict]] = {s: [] for s in STRATEGIES}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.runs + 1):  # round 0 is a warm-up, discarded
            for s in STRATEGIES:
                res = one_run(s, Path(tmp) / f"{s}-{r}", args)
                print(f"run {r} {s}: {res}", file=sys.stderr)
                if r:
                    results[s].append(res)

    def med(s: str, key: str) -> float | None:
        vals = [x[key] for x in results[s] if x[key] is not None]
        return statistics.median(vals) if vals else None

    print("| strategy | time/iter (ms) | min–max | comm/iter (ms) | backward/iter (ms) |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for s in STRATEGIES:
        its = [x["iter_ms"] for x in results[s]]
        comm = med(s, "comm_ms")
        print(
            f"| {s} | {med(s, 'iter_ms'):.2f} | {min(its):.2f}–{max(its):.2f} | "
            f"{'in backward' if comm is None else f'{comm:.2f}'} | {med(s, 'backward_ms'):.2f} |"
        )
    print()
    for line in verdicts({s: [x["iter_ms"] for x in results[s]] for s in STRATEGIES}):
        print(line)


if __name__ == "__main__":
    main()
