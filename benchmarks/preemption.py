"""Time from a preemption signal to the checkpoint written, and to the process gone.

A run started with ``--requeue`` (what ``trainscope slurm-script`` writes) is sent
SIGUSR1, SLURM's pre-timeout signal, once it has logged ``--after`` steps; this script
times, with ``time.perf_counter``, from just before ``os.kill`` to the checkpoint's
folder appearing (a checkpoint is renamed into place whole) and to the process's exit.
The run agrees on a stop at its next log interval (``--log-every``, default 10 steps),
so the time is up to that many steps plus writing the checkpoint. MNIST (LeNet) and
gpt-char (tiny preset) alternate, ``--repeats`` each.

    python benchmarks/preemption.py --data ../shared/data --out /tmp/preempt --repeats 5

Needs ``mnist/`` and ``tinyshakespeare/`` under ``--data``; one intra-op thread per run.
Writes ``results.json`` under ``--out`` and prints the medians with their min-max.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

TS = str(Path(sys.executable).with_name("trainscope"))
RUNS = {
    "mnist": ["--workload", "mnist", "--data-dir", "{out}/mnist", "--epochs", "5"],
    "gpt-char": ["--workload", "gpt-char", "--data-dir", "{data}/tinyshakespeare",
                 "--preset", "tiny", "--epochs", "5"],
}  # fmt: skip
COMMON = ["--requeue", "--threads", "1", "-q", "--no-progress"]


def steps_logged(run: Path) -> int:
    """Step records in the run's metrics so far."""
    try:
        return (run / "metrics.jsonl").read_text().count('"event": "step"')
    except OSError:
        return 0


def one(name: str, out: Path, data: Path, k: int, after: int, log_every: int) -> dict:
    """Start the run, signal it after ``after`` logged steps, time the checkpoint and exit."""
    run = out / f"{name}-r{k}"
    args = [a.format(out=out, data=data) for a in RUNS[name]]
    proc = subprocess.Popen([TS, "run", *args, *COMMON, "--log-every", str(log_every),
                             "--out", str(run)])  # fmt: skip
    while steps_logged(run) < after:
        if proc.poll() is not None:
            raise SystemExit(f"{name} ended before step {after}")
        time.sleep(0.005)
    t0 = time.perf_counter()
    os.kill(proc.pid, signal.SIGUSR1)
    ckpt_s = None
    while proc.poll() is None:
        if ckpt_s is None and any((run / "checkpoints").glob("step-*")):
            ckpt_s = time.perf_counter() - t0
        time.sleep(0.002)
    exit_s = time.perf_counter() - t0
    summary = json.loads((run / "summary.json").read_text())
    return {"workload": name, "repeat": k, "signal_to_checkpoint_s": ckpt_s,
            "signal_to_exit_s": exit_s, "status": summary["status"],
            "stopped_at_step": summary.get("preemption", {}).get("step"),
            "exit_code": proc.returncode}  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", type=Path, default=Path("../shared/data"))
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--after", type=int, default=30, help="steps logged before the signal")
    p.add_argument("--log-every", type=int, default=10)
    args = p.parse_args()
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    if not (out / "mnist").is_dir():
        subprocess.run([TS, "data", "mnist-split", str(args.data / "mnist"), str(out / "mnist")],
                       check=True)  # fmt: skip
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    rows = []
    for k in range(1, args.repeats + 1):  # alternated: slow spells hit both alike
        for name in RUNS:
            rows.append(one(name, out, args.data.resolve(), k, args.after, args.log_every))
            print(json.dumps(rows[-1]), flush=True)
    (out / "results.json").write_text(json.dumps(rows, indent=1))
    for name in RUNS:
        for key in ("signal_to_checkpoint_s", "signal_to_exit_s"):
            v = [r[key] for r in rows if r["workload"] == name and r[key] is not None]
            print(f"{name} {key}: median {statistics.median(v):.3f} s "
                  f"(min {min(v):.3f}, max {max(v):.3f}, n={len(v)})")  # fmt: skip


if __name__ == "__main__":
    main()
