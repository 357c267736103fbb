"""trainscope under a real SLURM (one node, started for these tests): an sbatch job of
two srun tasks trains as one DDP run, each task one rank, no torchrun inside, and the
record names the job and both ranks; a job whose time limit comes mid-run checkpoints,
requeues itself and ends with an uninterrupted run's weights; ``scancel`` leaves a
record that says cancelled."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tests.cluster.slurm import sbatch, slurm, wait_for
from tests.conftest import scaled

pytestmark = [pytest.mark.timeout(400), pytest.mark.slow]
__all__ = ["slurm"]  # the fixture, used by name

TRAINSCOPE = Path(sys.executable).parent / "trainscope"


def test_an_sbatch_job_of_two_tasks_is_one_ddp_run(slurm: dict[str, str], tmp_path: Path) -> None:
    out = tmp_path / "run"
    script = f"""#!/bin/bash
#SBATCH --ntasks=2
#SBATCH --output={tmp_path}/slurm-%j.out
#SBATCH --time=00:05:00
srun {TRAINSCOPE} run --workload digits --strategy ddp --epochs 1 --max-steps-per-epoch 4 \\
    --threads 1 --out {out} --no-progress -q
"""
    job = sbatch(slurm, script, tmp_path)
    state = wait_for(slurm, job, {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"}, scaled(300))
    log = next(tmp_path.glob("slurm-*.out"), None)
    assert state == "COMPLETED", log.read_text() if log else state
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["world_size"] == 2
    sched = summary["scheduler"]
    assert (sched["name"], sched["job_id"], sched["tasks"], sched["nnodes"]) == ("slurm", job, 2, 1)
    assert {r["rank"] for r in summary["ranks"]} == {0, 1}
    assert (out / "ranks" / "rank1").is_dir()


# A run that is mostly waiting (each training sample sleeps 12 ms): longer than the
# 5 to 35 s SLURM takes to send its signal (it checks time limits every 30 s or so), cheap
# for the CPU. 1,920 samples, batch 16: 120 steps an epoch, 3 epochs, about 75 s here.
SLOW = ["--workload", "trainscope.lab.straggler:slow_rank", "--set", "workload.options.rank=0",
        "--set", "workload.options.delay_ms=12", "--synthetic-samples", "1920",
        "--batch-size", "16", "--epochs", "3", "--log-every", "4", "--threads", "1",
        "--optimizer", "adamw", "--lr", "0.001"]  # fmt: skip


def _script(tmp_path: Path, *job: str) -> Path:
    """The sbatch script ``trainscope slurm-script`` writes for the slow run."""
    out = tmp_path / "job.sbatch"
    made = subprocess.run([str(TRAINSCOPE), "slurm-script", *SLOW, *job, "--runs",
                           str(tmp_path / "runs"), "--out", str(out)],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert made.returncode == 0, made.stderr
    return out


def _submit(env: dict[str, str], script: Path, cwd: Path) -> str:
    done = subprocess.run(["sbatch", "--parsable", str(script)], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=30)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().split(";")[0]


def test_a_job_signalled_before_its_time_limit_requeues_and_ends_as_uninterrupted(
    slurm: dict[str, str], tmp_path: Path
) -> None:
    """--time 1 min, SIGUSR1 55 s before it: the run checkpoints, requeues the job, and the
    job, started again (as often as it takes), ends with the uninterrupted run's weights.
    SLURM holds a requeued job for 2 minutes; the test starts it at once instead."""
    ref = tmp_path / "ref"
    reference = subprocess.Popen([str(TRAINSCOPE), "run", *SLOW, "--out", str(ref), "-q",
                                  "--no-progress"], cwd=tmp_path)  # fmt: skip
    job = _submit(slurm, _script(tmp_path, "--nodes", "1", "--tasks-per-node", "1", "--time",
                                 "00:01", "--signal-s", "55"), tmp_path)  # fmt: skip
    deadline = time.monotonic() + scaled(360)
    state, restarts = "PENDING", 0
    while time.monotonic() < deadline:
        info = subprocess.run(["scontrol", "show", "job", job], env=slurm, capture_output=True,
                              text=True, timeout=30).stdout  # fmt: skip
        state = re.search(r"JobState=(\w+)", info)[1]  # type: ignore[index]
        restarts = int(re.search(r"Restarts=(\d+)", info)[1])  # type: ignore[index]
        if state in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"):
            break
        if state == "PENDING" and "Reason=BeginTime" in info:
            subprocess.run(["scontrol", "update", f"JobId={job}", "StartTime=now"], env=slurm,
                           capture_output=True, timeout=30)  # fmt: skip
        time.sleep(1)
    assert reference.wait(timeout=scaled(300)) == 0
    log = "\n".join(p.read_text() for p in tmp_path.glob("slurm-*.out"))
    assert state == "COMPLETED" and restarts >= 1, (state, restarts, log)
    run = tmp_path / "runs" / f"trainscope-slow_rank-{job}"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["scheduler"]["job_id"] == job
    attempts = summary["attempts"]
    assert len(attempts) == restarts + 1
    assert all(a["ended"].startswith("preempted: preempted by SIGUSR1") for a in attempts[:-1])
    assert attempts[-1]["ended"] == "completed"
    a, b = load_file(str(run / "model.safetensors")), load_file(str(ref / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in b)


def test_scancel_leaves_a_record_that_says_cancelled(slurm: dict[str, str], tmp_path: Path) -> None:
    job = _submit(slurm, _script(tmp_path, "--nodes", "1", "--tasks-per-node", "1", "--time",
                                 "00:10"), tmp_path)  # fmt: skip
    run = tmp_path / "runs" / f"trainscope-slow_rank-{job}"
    deadline = time.monotonic() + scaled(120)
    while time.monotonic() < deadline and not (run / "checkpoints").exists():
        metrics = run / "metrics.jsonl"
        if metrics.is_file() and '"event": "step"' in metrics.read_text():
            break
        time.sleep(0.5)
    subprocess.run(["scancel", job], env=slurm, check=True, timeout=30)
    state = wait_for(slurm, job, {"CANCELLED", "COMPLETED", "FAILED"}, scaled(60))
    assert state == "CANCELLED"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "cancelled", summary.get("error")
    assert summary["error"].startswith("cancelled by SIGTERM at step")
    assert "requeue" not in summary["preemption"]  # cancelled: not requeued
