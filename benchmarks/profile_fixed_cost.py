"""What ``trainscope profile`` adds to a process before and after the script's own work.

Each round starts a fresh interpreter that imports torch and builds an optimizer (which
imports torch._dynamo: the script's own cost, alone or not), then times with
``perf_counter``: importing trainscope's command line, and ``main(["profile", ...])`` on
a script that does nothing (so all of that call is trainscope's: the argument parser, the
run folder, env.json, the hooks, the sampler, the record). Medians over ``--rounds``
fresh processes with min-max; the machine and load average printed with them.

    python benchmarks/profile_fixed_cost.py --rounds 9
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

CHILD = """
import json, sys, time
import torch
torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)  # torch._dynamo, as any script
t0 = time.perf_counter()
from trainscope.cli import main
t1 = time.perf_counter()
code = main(["profile", "-q", "--overwrite", "--out", sys.argv[1], "--", sys.argv[2]])
t2 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "profile_s": t2 - t1, "code": code}))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=9)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="profile-fixed-"))
    (tmp / "nothing.py").write_text("import torch\n")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    print(f"load average before: {os.getloadavg()}")
    rows = []
    for _ in range(args.rounds):
        done = subprocess.run(
            [sys.executable, "-c", CHILD, str(tmp / "run"), str(tmp / "nothing.py")],
            env=env, cwd=tmp, capture_output=True, text=True, check=True,
        )  # fmt: skip
        rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
    print(f"load average after: {os.getloadavg()}")
    for key in ("import_s", "profile_s"):
        xs = [r[key] for r in rows]
        print(f"{key}: {statistics.median(xs):.3f} s ({min(xs):.3f}-{max(xs):.3f}, n={len(xs)})")
    total = [r["import_s"] + r["profile_s"] for r in rows]
    print(f"total: {statistics.median(total):.3f} s ({min(total):.3f}-{max(total):.3f})")


if __name__ == "__main__":
    main()
