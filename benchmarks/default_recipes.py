"""Each built-in workload's default recipe across seeds (and, for digits, CPU kernels).

A default must hold on every CPU a user has: the same run can take another path when the
vector instructions change the rounding (``ATEN_CPU_CAPABILITY`` picks torch's kernels:
``avx512``, ``avx2`` or ``default``, no vector instructions), or when the thread count
changes the order of a reduction. This script runs ``trainscope run`` with every default
but the seed, once per seed and setting, each in a fresh process, and prints the final
figure's median, min-max and n per setting, with every run's figure.

    python benchmarks/default_recipes.py digits --seeds 0-15 --isa native,avx2,default
    python benchmarks/default_recipes.py mnist --data-dir /tmp/mnist-8k --seeds 0-2
    python benchmarks/default_recipes.py gpt-char --data-dir ../shared/data/tinyshakespeare \
        --seeds 0-2 -- --preset tiny --epochs 1 --max-steps-per-epoch 500

Arguments after ``--`` go to every run. Runs use ``--threads`` (default 1; ``--threads
N`` here sets it), so that two runs side by side (``--parallel 2``) do not share cores.
Accuracy does not depend on the machine's load; the wall times printed do, and are not
compared.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

# What each workload's main figure is, read from its summary.json.
FIGURES = {
    "digits": ("test_accuracy", "test accuracy", True),
    "mnist": ("test_accuracy", "test accuracy", True),
    "text-cls": ("val_accuracy", "dev accuracy", True),
    "gpt-char": ("val_loss", "validation loss", False),
}


def seeds_of(text: str) -> list[int]:
    """``0-4`` or ``0,3,7`` -> a list of seeds."""
    if "-" in text:
        lo, hi = text.split("-", 1)
        return list(range(int(lo), int(hi) + 1))
    return [int(s) for s in text.split(",") if s.strip()]


def figure_of(summary: dict, workload: str) -> float | None:
    """The workload's main figure from its summary (gpt-char: the last validation loss;
    text-cls: the last validation accuracy, on GLUE's dev split)."""
    key = FIGURES[workload][0]
    if key.startswith("val_"):  # GLUE's dev split is the validation set; no test labels
        epochs = summary.get("epochs") or [{}]
        return epochs[-1].get(key)
    return summary.get(key)


def one_run(workload: str, seed: int, isa: str, args: argparse.Namespace, root: Path) -> dict:
    """One ``trainscope run`` in a process of its own; its figure and wall time."""
    out = root / f"{workload}-{isa}-s{seed}"
    env = dict(os.environ)
    if isa != "native":
        env["ATEN_CPU_CAPABILITY"] = isa
    argv = [sys.executable, "-c", "from trainscope.cli import main; raise SystemExit(main())",
            "run", "--workload", workload, "--seed", str(seed), "--threads", str(args.threads),
            "--out", str(out), "-q", "--no-progress", "--no-save-weights"]  # fmt: skip
    if args.data_dir:
        argv += ["--data-dir", args.data_dir, "--no-download"]
    done = subprocess.run([*argv, *args.extra], env=env, capture_output=True, text=True)
    summary = (
        json.loads((out / "summary.json").read_text()) if (out / "summary.json").exists() else {}
    )
    return {
        "seed": seed,
        "isa": isa,
        "figure": figure_of(summary, workload),
        "wall_s": summary.get("wall_time_s"),
        "status": summary.get("status"),
        "error": done.stderr.strip()[-300:] if done.returncode else None,
    }


def summarise(rows: list[dict], workload: str) -> list[str]:
    """Per setting: median (min-max, n) of the figure, and every run's figure."""
    _, name, higher = FIGURES[workload]
    lines = []
    for isa in dict.fromkeys(r["isa"] for r in rows):
        got = [r["figure"] for r in rows if r["isa"] == isa and r["figure"] is not None]
        if not got:
            lines.append(f"{isa}: no completed run")
            continue
        # Accuracy in percent to 2 decimals; a loss to 3.
        scale, unit, places = (100.0, "%", 2) if higher else (1.0, "", 3)
        each = ", ".join(f"{scale * v:.{places}f}" for v in got)
        mid, lo, hi = (scale * f(got) for f in (statistics.median, min, max))
        lines.append(
            f"{isa}: {name} median {mid:.{places}f}{unit} (min {lo:.{places}f}, "
            f"max {hi:.{places}f}, n={len(got)}); runs: {each}"
        )
    return lines


def main() -> None:
    """Run the seeds and settings asked for and print what they reached."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("workload", choices=sorted(FIGURES))
    ap.add_argument("--seeds", default="0-4", help="e.g. 0-4 or 0,3,7 (default 0-4)")
    ap.add_argument("--isa", default="native", help="native,avx2,default (ATEN_CPU_CAPABILITY)")
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--threads", type=int, default=1, help="--threads of every run (default 1)")
    ap.add_argument("--parallel", type=int, default=1, help="runs side by side (default 1)")
    ap.add_argument("--json", action="store_true", help="print every run as JSON too")
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)
    args = ap.parse_args(argv[:cut])
    args.extra = argv[cut + 1 :]  # run flags for every run
    jobs = list(itertools.product(seeds_of(args.seeds), args.isa.split(",")))
    with tempfile.TemporaryDirectory(prefix="trainscope-recipes-") as tmp:
        with concurrent.futures.ThreadPoolExecutor(args.parallel) as pool:
            rows = list(pool.map(lambda j: one_run(args.workload, *j, args, Path(tmp)), jobs))
    for r in rows:
        if r["error"] or r["status"] != "completed":
            print(f"seed {r['seed']} {r['isa']}: {r['status']}: {r['error']}", file=sys.stderr)
    print(f"{args.workload}, default recipe, extra flags: {' '.join(args.extra) or 'none'}; "
          f"--threads {args.threads}")  # fmt: skip
    for line in summarise(rows, args.workload):
        print("  " + line)
    if args.json:
        print(json.dumps(rows))


if __name__ == "__main__":
    main()
