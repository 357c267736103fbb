"""The per-step cost of ``trainscope profile``'s hooks, counted in instructions.

Wall-clock timing of a few percent is inside this kind of machine's noise (processes of
the same script differ by 15-40 %). Instruction counts are not: valgrind's callgrind
counts the same number whatever else the machine is doing. Each side — the loop bare,
and the same loop inside ``trainscope.profile()`` (hooks, stage clock, step records,
system sampler: the whole session) — runs for ``--steps`` and for 3x ``--steps``; the
difference of the two counts over 2x ``--steps`` steps is the instructions per step,
every fixed cost (interpreter, imports, trainscope's set-up) cancelled.

The system sampler's once-a-second reading is left out of the count (its interval set
to an hour): under valgrind a step runs some 50 times slower, so the sampler would fire
50 times as often per step as it does for real. Its real cost is timed apart
(``--sampler``: the median of 50 samples with ``perf_counter``), a cost per second of
run, not per step.

Two models: ``tiny`` (three 2x2 Linear layers: a step is almost all Python dispatch, the
hooks' worst case) and ``mlp`` (784-256-256-10, batch 64: the overhead benchmark's).
Needs valgrind (Debian: ``apt-get install valgrind``); about 3 minutes a run on a
2-core VM, 8 runs, so run the models in two shells to use both cores.

    python benchmarks/profile_instructions.py --model tiny --steps 100
    python benchmarks/profile_instructions.py --model mlp --steps 100
    python benchmarks/profile_instructions.py --sampler
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve()


def child(side: str, model_kind: str, steps: int, out: str) -> None:
    """One measured process: ``steps`` training steps of ``model_kind``, bare or profiled."""
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    torch.manual_seed(0)
    width = 784 if model_kind == "mlp" else 2
    hidden, classes = (256, 10) if model_kind == "mlp" else (2, 2)
    model = nn.Sequential(nn.Linear(width, hidden), nn.ReLU(), nn.Linear(hidden, hidden),
                          nn.ReLU(), nn.Linear(hidden, classes))  # fmt: skip
    x = torch.randn(steps * 64, width)
    loader = DataLoader(TensorDataset(x, torch.randint(0, classes, (len(x),))), batch_size=64)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    session = None
    if side == "hooks":  # trainscope.profile()'s session, the sampler's interval an hour
        from trainscope.script.session import ProfileOptions, ProfileSession

        opts = ProfileOptions(out=out, overwrite=True, system_interval_s=3600.0)
        source = {"kind": "python", "argv": ["bench"], "path": None, "module": None,
                  "sha256": None}  # fmt: skip
        session = ProfileSession(opts, source, "bench")
        session.begin()
    batches = iter(loader)
    for _ in range(steps):
        xb, yb = next(batches)
        loss = nn.functional.cross_entropy(model(xb), yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
    if session is not None:
        session.end()


def sampler_cost(samples: int = 50) -> None:
    """The system sampler's one reading (psutil, the other-load probe), timed."""
    import statistics
    import time

    from trainscope.profiling.system import SystemSampler
    from trainscope.runtime.threads import CpuMeter, ThreadPlan

    tmp = Path(tempfile.mkdtemp(prefix="profile-sampler-"))
    meter = CpuMeter(ThreadPlan(1, 1, "bench", os.cpu_count() or 1, 1))
    sampler = SystemSampler(tmp / "system.jsonl", 3600.0, gpus=False, probe=meter.tick)
    took = []
    for _ in range(samples):
        t0 = time.perf_counter()
        sampler.sample()
        took.append(time.perf_counter() - t0)
    shutil.rmtree(tmp, ignore_errors=True)
    ms = sorted(1e3 * t for t in took)
    print(f"one system sample: {statistics.median(ms):.3f} ms (IQR {ms[len(ms) // 4]:.3f}-"
          f"{ms[3 * len(ms) // 4]:.3f}, n={len(ms)}); once a second by default")  # fmt: skip


def counted(side: str, model_kind: str, steps: int, tmp: Path) -> int:
    """Instructions callgrind counted for one child process."""
    cmd = [
        "valgrind", "--tool=callgrind", f"--callgrind-out-file={tmp / 'callgrind.out'}",
        sys.executable, str(HERE), "--child", side, "--model", model_kind,
        "--steps", str(steps), "--out", str(tmp / "run"),
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    found = re.search(r"Collected : (\d+)", done.stderr)
    if done.returncode != 0 or not found:
        raise SystemExit(f"{side} {model_kind} {steps}: valgrind failed: {done.stderr[-1500:]}")
    return int(found.group(1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=["tiny", "mlp"], default="tiny")
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--sampler", action="store_true", help="time the system sampler instead")
    ap.add_argument("--child", choices=["bare", "hooks"], help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child, args.model, args.steps, args.out)
        return
    if args.sampler:
        sampler_cost()
        return
    if shutil.which("valgrind") is None:
        raise SystemExit("needs valgrind (Debian: apt-get install valgrind)")
    tmp = Path(tempfile.mkdtemp(prefix="profile-instructions-"))
    n, per_step = args.steps, {}
    for side in ("bare", "hooks"):
        low, high = counted(side, args.model, n, tmp), counted(side, args.model, 3 * n, tmp)
        per_step[side] = (high - low) / (2 * n)
        print(f"{args.model} {side}: {low:,} instructions at {n} steps, {high:,} at {3 * n}: "
              f"{per_step[side]:,.0f} per step")  # fmt: skip
    added = per_step["hooks"] - per_step["bare"]
    print(f"{args.model}: the session adds {added:,.0f} instructions per step "
          f"({100 * added / per_step['bare']:+.1f} % of the bare step's)")  # fmt: skip
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
