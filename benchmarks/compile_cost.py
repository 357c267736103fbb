"""What ``--compile`` costs and buys on this machine: compile time against step time.

For each workload, eager and compiled runs alternate (eager, compiled, eager, ...), each
in a fresh process through the console script, so one slow spell of the machine does not
land on one side. Reported per workload and mode: the median steady-state step time over
the runs (each run's own median over its steps after the warm-up), its spread and n; for
the compiled runs also the compile stage's seconds (the forward + backward + evaluation
forward compiled before training; the inductor cache of this user is cleared per run,
so every run pays a cold compile, as a first run on a new machine would), and after how
many steps the saving pays the compile back, ``compile / (eager - compiled)``, where the
two step-time spreads do not overlap.

    python benchmarks/compile_cost.py --text ../shared/data/tinyshakespeare --runs 3
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from trainscope.util.spread import differ, spread


def trainscope_argv() -> list[str]:
    script = Path(sys.executable).parent / "trainscope"
    return [str(script)] if script.exists() else [sys.executable, "-m", "trainscope.cli"]


def workloads(args: argparse.Namespace) -> dict[str, list[str]]:
    """name -> run flags (one epoch of ``--steps`` steps)."""
    out = {"digits (LeNet5)": ["--workload", "digits"]}
    if args.text:
        common = ["--workload", "gpt-char", "--data-dir", args.text, "--no-download"]
        out["gpt-char tiny"] = [*common, "--preset", "tiny"]
        out["gpt-char shakespeare (10.7M)"] = [*common, "--preset", "shakespeare",
                                               "--batch-size", "8"]  # fmt: skip
    return out


def one_run(flags: list[str], compiled: bool, steps: int, root: Path) -> dict[str, Any]:
    out = Path(tempfile.mkdtemp(dir=root))
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(out / "inductor")}  # a cold compile
    argv = [*trainscope_argv(), "run", *flags, "--epochs", "1", "--max-steps-per-epoch",
            str(steps), "--out", str(out / "run"), "-q", "--no-save-weights",
            "--compile" if compiled else "--no-compile"]  # fmt: skip
    subprocess.run(argv, check=True, env=env)
    return json.loads((out / "run" / "summary.json").read_text())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--text", help="folder with Tiny Shakespeare's input.txt (gpt-char rows)")
    p.add_argument("--runs", type=int, default=3, help="runs per workload and mode")
    p.add_argument("--steps", type=int, default=40, help="training steps per run")
    args = p.parse_args()
    print(f"# {platform.node()}: {os.cpu_count()} CPUs, Python {platform.python_version()}")
    with tempfile.TemporaryDirectory() as tmp:
        for name, flags in workloads(args).items():
            step: dict[bool, list[float]] = {False: [], True: []}
            comp: list[float] = []
            for _ in range(args.runs):
                for compiled in (False, True):
                    s = one_run(flags, compiled, args.steps, Path(tmp))
                    step[compiled].append(1e3 * s["steady_state"]["step_s"]["median"])
                    if compiled:
                        comp.append(s["stages_s"]["compile"])
            e, c, k = spread(step[False]), spread(step[True]), spread(comp)
            line = (
                f"{name}: eager {e.median:.2f} ms/step ({e.low:.2f}-{e.high:.2f}), compiled "
                f"{c.median:.2f} ms/step ({c.low:.2f}-{c.high:.2f}), n={e.n}; compile "
                f"{k.median:.1f} s ({k.low:.1f}-{k.high:.1f})"
            )
            if differ(e, c) and e.median > c.median:
                line += f"; pays back after {k.median / ((e.median - c.median) / 1e3):,.0f} steps"
            elif differ(e, c):
                line += "; compiled steps are slower: it never pays back"
            else:
                line += "; no measurable difference in step time"
            print(line, flush=True)


if __name__ == "__main__":
    main()
