"""What a checkpoint costs a run, and how long a resume takes to train again (CPU).

For each workload below, ``--runs`` runs write a checkpoint every ``--every`` steps; each
checkpoint's blocking time is its own line in ``metrics.jsonl`` (the ``checkpoint``
stage). Reported per workload: the checkpoint's size, the median seconds per checkpoint
(spread, n = all checkpoints of all runs), the median steady step time of the same runs,
and what that makes as a share of training time at an interval of N steps,
``c / (N x step)``, for N = one epoch and N = 100.

Then the time from ``trainscope run --resume`` to the first step: a run is killed with
SIGKILL (``TRAINSCOPE_FAULT``) a few steps after a checkpoint, and the resume is started
as a user would (the console script, a fresh process). The time runs from just before the
process is started to the start of its first step (the record's wall clock origin plus
that step's ``t``), so it includes interpreter start-up and imports, setup (data, model)
and loading + verifying the checkpoint; the setup line of the resumed attempt gives the
setup part alone. Median over ``--runs`` kills, with spread and n.

    python benchmarks/mnist_from_test_set.py ../shared/data/mnist /tmp/mnist-8k
    python benchmarks/checkpoint_cost.py --mnist /tmp/mnist-8k \\
        --text ../shared/data/tinyshakespeare --runs 3
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from trainscope.util.spread import Spread, spread


def trainscope_argv() -> list[str]:
    script = Path(sys.executable).parent / "trainscope"
    return [str(script)] if script.exists() else [sys.executable, "-m", "trainscope.cli"]


def workloads(args: argparse.Namespace) -> dict[str, list[str]]:
    """name -> run flags; each trains ``args.steps`` steps in one epoch."""
    out = {}
    if args.mnist:
        out["mnist (LeNet5, 8k train)"] = ["--workload", "mnist", "--data-dir", args.mnist,
                                           "--batch-size", "64"]  # fmt: skip
    if args.text:
        base = ["--workload", "gpt-char", "--data-dir", args.text, "--optimizer", "adamw",
                "--lr", "0.001"]  # fmt: skip
        # An epoch of random windows is a unit of accounting (tens of thousands of steps
        # here): a fixed number of steps instead.
        out["gpt-char tiny"] = [*base, "--preset", "tiny", "--batch-size", "32",
                                "--max-steps-per-epoch", "200"]  # fmt: skip
        if args.large:
            out["gpt-char shakespeare (10.7M)"] = [*base, "--preset", "shakespeare",
                                               "--batch-size", "16", "--max-steps-per-epoch",
                                               str(args.steps)]  # fmt: skip
    return out


def read_lines(run_dir: Path) -> list[dict[str, Any]]:
    from trainscope.records import load_run

    return load_run(run_dir).metrics


def run(argv: list[str], env: dict[str, str] | None = None) -> int:
    done = subprocess.run(
        [*trainscope_argv(), *argv], env={**os.environ, **(env or {})},
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    return done.returncode


def checkpoint_cost(name: str, flags: list[str], args: argparse.Namespace, tmp: Path) -> dict:
    seconds, steps, loads, size, epoch_steps = [], [], [], None, None
    for i in range(args.runs):
        out = tmp / f"cost-{abs(hash(name))}-{i}"
        code = run(["run", *flags, "--epochs", "1", "--checkpoint-every",
                    str(args.every), "--out", str(out), "-q", "--no-progress"])  # fmt: skip
        if code != 0:
            raise SystemExit(f"{name}: run failed (exit {code})")
        lines = read_lines(out)
        seconds += [e["seconds"] for e in lines if e.get("event") == "checkpoint"]
        summary = json.loads((out / "summary.json").read_text())
        steps.append(summary["steady_state"]["step_s"]["median"])
        epoch_steps = summary["steps"]
        ckpt = sorted((out / "checkpoints").iterdir())[-1]
        size = sum(f.stat().st_size for f in ckpt.iterdir())
        loads.append(load_s(ckpt))
    c, s = spread(seconds), spread(steps)
    return {"name": name, "checkpoint_s": c, "step_s": s, "bytes": size, "load_s": spread(loads),
            "epoch_steps": epoch_steps}  # fmt: skip


def load_s(folder: Path) -> float:
    """Seconds to verify (SHA-256 of every file) and read one checkpoint, in this process."""
    from trainscope.train.checkpoint import Checkpoint, load_checkpoint

    t0 = time.perf_counter()
    load_checkpoint(Checkpoint(folder, int(folder.name.split("-")[1])))
    return time.perf_counter() - t0


def resume_time(name: str, flags: list[str], args: argparse.Namespace, tmp: Path) -> dict:
    first_step, setup = [], []
    kill_at = args.every + 2
    for i in range(args.runs):
        out = tmp / f"resume-{abs(hash(name))}-{i}"
        base = [*flags, "--epochs", "1", "--checkpoint-every", str(args.every)]
        code = run(["run", *base, "--out", str(out), "-q", "--no-progress"],
                   {"TRAINSCOPE_FAULT": f"step={kill_at}"})  # fmt: skip
        if code != -9:
            raise SystemExit(f"{name}: the run to kill ended with {code}, not SIGKILL")
        t0 = time.time()
        # Only the first step is timed: its line is written at once (--log-every 1, which
        # a resume may change) and the resumed run is stopped a step later with a fault.
        code = run(["run", "--resume", str(out), "-q", "--no-progress", "--log-every", "1"],
                   {"TRAINSCOPE_FAULT": f"step={kill_at + 2},attempt=2"})  # fmt: skip
        lines = read_lines(out)
        origin = None
        for e in lines:
            if e.get("event") == "resume":
                origin = e
        summary = json.loads((out / "summary.json").read_text())
        # The summary of a killed attempt still has its clock: the wall-clock axis origin.
        unix0 = summary["clock"]["unix_at_origin"]
        step = next(e for e in lines if e.get("event") == "step" and e.get("attempt") == 2)
        first_step.append(unix0 + step["t"] - t0)
        setup.append(next(e["seconds"] for e in lines
                          if e.get("event") == "setup" and e.get("attempt") == 2))  # fmt: skip
        assert origin is not None and code == -9
    return {"name": name, "to_first_step_s": spread(first_step), "setup_s": spread(setup)}


def fmt(s: Spread, scale: float = 1.0, digits: int = 3) -> str:
    return (f"{s.median * scale:.{digits}f} ({s.kind} {s.low * scale:.{digits}f}–"
            f"{s.high * scale:.{digits}f}, n={s.n})")  # fmt: skip


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--mnist", help="MNIST IDX folder (e.g. /tmp/mnist-8k)")
    p.add_argument("--text", help="Tiny Shakespeare folder")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--every", type=int, default=20, help="steps between checkpoints")
    p.add_argument("--steps", type=int, default=45, help="steps of the shakespeare preset")
    p.add_argument("--part", choices=("all", "cost", "resume"), default="all")
    p.add_argument("--large", action=argparse.BooleanOptionalAction, default=True,
                   help="include the 10.7M-parameter shakespeare preset (minutes)")  # fmt: skip
    # A checkpoint's share at an interval of N steps is c / (N x step): the medians of both.
    args = p.parse_args()
    if not (args.mnist or args.text):
        p.error("give --mnist and/or --text")
    machine = f"{platform.node()} {platform.machine()}, {os.cpu_count()} CPUs"
    print(
        f"# {machine}, python {platform.python_version()}; --runs {args.runs} --every {args.every}"
    )
    with tempfile.TemporaryDirectory(prefix="ckpt-bench-") as tmp:
        print("| workload | checkpoint size | s per checkpoint | steady step (s) | "
              "% at every 100 steps | % at every 1000 steps | load + verify (s) |")  # fmt: skip
        print("| --- | --- | --- | --- | --- | --- | --- |")
        rows = list(workloads(args).items()) if args.part == "resume" else []
        for name, flags in workloads(args).items() if args.part != "resume" else []:
            r = checkpoint_cost(name, flags, args, Path(tmp))
            c, s = r["checkpoint_s"].median, r["step_s"].median
            print(f"| {name} | {r['bytes'] / 2**20:.1f} MiB | {fmt(r['checkpoint_s'])} | "
                  f"{fmt(r['step_s'], digits=4)} | {100 * c / (100 * s):.1f}% | "
                  f"{100 * c / (1000 * s):.2f}% | {fmt(r['load_s'])} |", flush=True)  # fmt: skip
            rows.append((name, flags))
        print()
        print("| workload | --resume to first step (s) | of which setup incl. checkpoint load |")
        print("| --- | --- | --- |")
        for name, flags in rows if args.part != "cost" else []:
            r = resume_time(name, flags, args, Path(tmp))
            print(f"| {name} | {fmt(r['to_first_step_s'], digits=2)} | "
                  f"{fmt(r['setup_s'], digits=2)} |", flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
