"""The fast input path against the DataLoader: data only, and end to end (training).

A data-only speed-up says how much faster batches arrive; what a user gets is the
speed-up of a training epoch, where the model's compute does not shrink. This script
measures both on the same data, each measurement a ``trainscope run`` process of its own,
the configurations alternating round-robin (after one discarded warm-up round), and
prints medians with their min–max range and n. A ratio is printed only where the two
ranges do not overlap; otherwise "no measurable difference".

    python benchmarks/mnist_from_test_set.py ../shared/data/mnist /tmp/mnist-8k
    python benchmarks/loader_end_to_end.py --data-dir /tmp/mnist-8k --runs 3

The figure per run is seconds per epoch of the training loop (``train_time_s`` / epochs:
no setup, no evaluation), so the process start-up and imports are excluded.
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from trainscope.util.spread import differ, no_difference_text, spread

LOADERS = ("torch", "fast")


def command(
    loader: str, augment: bool, data_only: bool, args: argparse.Namespace, out: Path
) -> list[str]:
    """The ``trainscope run`` command of one measurement."""
    script = Path(sys.executable).parent / "trainscope"
    cmd = [
        str(script), "run", "--workload", "mnist", "--data-dir", args.data_dir,
        "--epochs", str(args.epochs), "--loader", loader, "--num-workers", "0",
        "--no-save-weights", "--no-progress", "-q", "--out", str(out), "--overwrite",
    ]  # fmt: skip
    if augment:
        cmd.append("--augment")
    if data_only:
        cmd.append("--data-only")
    return cmd


def epoch_seconds(run_dir: Path) -> float:
    """Training-loop seconds per epoch of a finished run."""
    summary = json.loads((run_dir / "summary.json").read_text())
    if summary.get("status") != "completed":
        raise SystemExit(f"{run_dir}: {summary.get('status')}: {summary.get('error')}")
    return summary["train_time_s"] / len(summary["epochs"])


def ratio_text(slow: list[float], fast: list[float]) -> str:
    """``"7.1x"`` when the ranges do not overlap, else the no-difference sentence."""
    a, b = spread(slow), spread(fast)
    if differ(a, b):
        return f"{a.median / b.median:.1f}x"
    return no_difference_text(a, b)


def main() -> None:
    """Alternate every configuration, then print the table and the speed-ups."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", required=True)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=3)
    args = ap.parse_args()
    configs = [(lo, aug, do) for do in (True, False) for aug in (False, True) for lo in LOADERS]
    results: dict[tuple[str, bool, bool], list[float]] = {c: [] for c in configs}
    tmp = Path(tempfile.mkdtemp(prefix="loader-e2e-"))
    try:
        for r in range(args.runs + 1):  # round 0 warms the page cache and is discarded
            for c in configs:
                out = tmp / f"{c[0]}-{int(c[1])}-{int(c[2])}"
                subprocess.run(command(*c, args, out), check=True, timeout=900)
                secs = epoch_seconds(out)
                print(f"round {r} {c}: {secs:.3f} s/epoch", file=sys.stderr)
                if r:
                    results[c].append(secs)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"machine: {platform.machine()}, python {platform.python_version()}; n={args.runs}")
    print("| what | augment | DataLoader s/epoch | fast s/epoch | speed-up |")
    print("| --- | --- | ---: | ---: | ---: |")
    for data_only in (True, False):
        for aug in (False, True):
            slow, fast = results[("torch", aug, data_only)], results[("fast", aug, data_only)]
            cells = []
            for vals in (slow, fast):
                sp = spread(vals)
                cells.append(f"{sp.median:.3f} ({sp.low:.3f}–{sp.high:.3f})")
            what = "data only" if data_only else "end to end (training)"
            print(f"| {what} | {'on' if aug else 'off'} | {cells[0]} | {cells[1]} | "
                  f"{ratio_text(slow, fast)} |")  # fmt: skip


if __name__ == "__main__":
    main()
