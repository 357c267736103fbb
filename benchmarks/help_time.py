"""How long ``trainscope --help`` takes as a whole process, for two checkouts side by side.

    python benchmarks/help_time.py OLD_SRC NEW_SRC [--runs 10] [--args "--help"]

OLD_SRC and NEW_SRC are the ``src`` folders of two checkouts (for example one made with
``git worktree add /tmp/old <commit>``). Each run starts a fresh interpreter with that
``src`` first on ``PYTHONPATH`` and calls the command line's ``main`` with the given
arguments, timed from outside with ``time.perf_counter`` (interpreter start, imports and
the help text: what a user waits for). Runs alternate old, new, old, new... so that a slow
spell of the machine hits both; the medians come with their min–max range and n.
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

CODE = "import sys; from trainscope.cli import main; sys.exit(main(sys.argv[1:]))"


def once(src: Path, args: list[str]) -> float:
    """Seconds for one whole process running ``trainscope ARGS`` from ``src``."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    t0 = time.perf_counter()
    subprocess.run(
        [sys.executable, "-c", CODE, *args], env=env, check=True, stdout=subprocess.DEVNULL
    )
    return time.perf_counter() - t0


def main() -> int:
    """Time both checkouts alternately and print median (min–max, n) for each."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("old", type=Path)
    parser.add_argument("new", type=Path)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--args", default="--help")
    opts = parser.parse_args()
    args = shlex.split(opts.args)
    times: dict[str, list[float]] = {"old": [], "new": []}
    for src in (opts.old, opts.new):  # one untimed run each: files into the page cache
        once(src, args)
    for _ in range(opts.runs):
        times["old"].append(once(opts.old, args))
        times["new"].append(once(opts.new, args))
    for name, values in times.items():
        ms = sorted(v * 1000 for v in values)
        print(
            f"{name}: trainscope {opts.args}: median {statistics.median(ms):.0f} ms "
            f"({ms[0]:.0f}–{ms[-1]:.0f}, n={len(ms)})"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
