"""Preemption: a scheduler's signal (SLURM's pre-timeout SIGUSR1, SIGTERM) reaches one
rank; every rank stops at the same log interval after writing its checkpoint, the record
says preempted (or cancelled, when SLURM says so), and the same command with --requeue
goes on from the checkpoint to the weights of an uninterrupted run.

Every run here is a process of its own (it signals itself, exits 128 + the signal, is
started again), forked from the test process (``fault_driver.py``): the ranks of the
two-rank tests are started as srun or a PyTorchJob starts them, one command each, with no
launcher of trainscope's or torchrun between, so what is asserted is what the processes
do on their own, not how an interpreter starts. The same end to end from real launches
(sbatch, scancel, SLURM's SIGUSR1 and requeue): tests/cluster/test_slurm.py."""

from __future__ import annotations

import json
import os
import signal
import stat
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file

from tests.train.fault_driver import start, trainscope
from trainscope.cli import main
from trainscope.errors import ConfigError, Terminated
from trainscope.launch.cluster import requeued_start
from trainscope.runtime.dist import free_port
from trainscope.runtime.signals import preempt_signal, preemption_noted
from trainscope.train import preemption

pytestmark = pytest.mark.timeout(120)

# 320 samples, batch 16: 20 steps an epoch, 40 in all; steps read back every 4.
SMALL = ["--workload", "synthetic", "--synthetic-samples", "320", "--synthetic-shape", "1",
         "12", "12", "--batch-size", "16", "--epochs", "2", "-q", "--no-progress",
         "--log-every", "4", "--optimizer", "adamw", "--lr", "0.001", "--threads", "1"]  # fmt: skip


def same_weights(a: Path, b: Path) -> bool:
    x, y = load_file(str(a / "model.safetensors")), load_file(str(b / "model.safetensors"))
    return x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in y)


def test_a_first_signal_is_noted_and_a_second_stops_at_once() -> None:
    with preemption_noted((signal.SIGUSR1, signal.SIGTERM)):
        assert preempt_signal() == 0
        os.kill(os.getpid(), signal.SIGUSR1)
        assert preempt_signal() == signal.SIGUSR1
        with pytest.raises(Terminated):
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(1000):  # the handler runs between two bytecodes
                pass
    assert preempt_signal() == 0


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The uninterrupted run every preempted one must end as."""
    ref = tmp_path_factory.mktemp("ref") / "run"
    assert main(["run", *SMALL, "--out", str(ref)]) == 0  # in-process: no signal in it
    return ref


@pytest.mark.parametrize(
    ("fault_step", "extra", "stop"),
    [
        (6, [], 8),  # noted in step 6, agreed at the next multiple of --log-every (4)
        (6, ["--checkpoint-every", "5"], 8),  # step 5's checkpoint flushes: still step 8
        (18, [], 20),  # step 20 ends the epoch: agreed after the epoch's validation
    ],
)
def test_a_run_with_requeue_that_is_signalled_stops_checkpointed_and_goes_on(
    tmp_path: Path, reference: Path, fault_step: int, extra: list[str], stop: int
) -> None:
    run = tmp_path / "run"
    fault = f"step={fault_step},stage=forward,signal=USR1"
    done = trainscope("run", *SMALL, *extra, "--out", str(run), "--requeue", fault=fault)
    assert done.returncode == 128 + signal.SIGUSR1, done.stderr
    line = f"preempted by SIGUSR1 at step {stop}: checkpoint checkpoints/step-{stop} written"
    assert line in done.stderr and len(done.stderr.strip().splitlines()) == 1
    summary = json.loads((run / "summary.json").read_text())
    assert (summary["status"], summary["preemption"]["step"]) == ("preempted", stop)
    assert summary["preemption"]["requeue"] == {
        "requeued": False, "why": "not a SLURM job: nothing to requeue"}  # fmt: skip
    assert (run / "checkpoints" / f"step-{stop}").is_dir()
    # The same command again (a requeued job, a restarted pod) goes on from there.
    assert requeued_start(str(run)) == "resume"
    again = trainscope("run", *SMALL, *extra, "--out", str(run), "--requeue", fault=fault)
    assert again.returncode == 0, again.stderr
    assert same_weights(run, reference)
    first, second = json.loads((run / "summary.json").read_text())["attempts"]
    assert first["ended"].startswith(f"preempted: preempted by SIGUSR1 at step {stop}")
    assert (second["from_step"], second["ended"]) == (stop, "completed")
    if not extra:  # once more: nothing left to do, nothing touched
        before = (run / "summary.json").read_bytes()
        done = trainscope("run", *[a for a in SMALL if a != "-q"], "--out", str(run),
                          "--requeue")  # fmt: skip
        assert done.returncode == 0 and "has completed: nothing left to do" in done.stdout
        assert (run / "summary.json").read_bytes() == before


def srun_env(rank: int, port: int) -> dict[str, str]:
    return {
        "SLURM_JOB_ID": "5150", "SLURM_STEP_ID": "0", "SLURM_PROCID": str(rank),
        "SLURM_LOCALID": str(rank), "SLURM_NODEID": "0", "SLURM_STEP_NUM_TASKS": "2",
        "SLURM_NTASKS": "2", "SLURM_STEP_NODELIST": "localhost",
        "SLURM_STEP_TASKS_PER_NODE": "2", "MASTER_PORT": str(port),
        "PATH": os.environ["PATH"],
    }  # fmt: skip


def pod_env(rank: int, port: int) -> dict[str, str]:
    """What Kubeflow's training operator gives the pod of ``rank``."""
    return {"RANK": str(rank), "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port), "PATH": os.environ["PATH"]}  # fmt: skip


@pytest.mark.parametrize(
    ("placed", "sig", "resume"),
    [
        # Started again after the stop: three two-rank runs, seconds (slow tier).
        pytest.param(srun_env, "USR1", True, id="srun-usr1", marks=pytest.mark.slow),
        pytest.param(srun_env, "TERM", False, id="srun-term"),
        pytest.param(pod_env, "TERM", True, id="pod-eviction", marks=pytest.mark.slow),
    ],
)
def test_one_signalled_rank_stops_every_rank_at_the_same_step(
    tmp_path: Path, placed: Any, sig: str, resume: bool
) -> None:
    """Two srun tasks (SLURM's variables, no SLURM: ``scontrol`` answers nothing) or two
    PyTorchJob pods (started with --requeue, as examples/cluster's manifest does), the
    signal on rank 1 only: both ranks checkpoint step 8 and stop there; started again,
    the run ends as an uninterrupted one does."""
    run = tmp_path / "run"
    pod = placed is pod_env
    args = [*SMALL, "--strategy", "ddp", "--out", str(run), *(["--requeue"] * pod)]
    port = free_port()
    fault = f"step=6,stage=forward,rank=1,signal={sig}"
    procs = [start("run", *args, env=placed(r, port), fault=fault, cwd=tmp_path,
                   logs=tmp_path / f"logs-{r}") for r in (0, 1)]  # fmt: skip
    codes = [p.wait() for p in procs]
    signum = signal.Signals["SIG" + sig]
    assert codes == [128 + signum] * 2, [p.stderr for p in procs]  # a pod restarts on it
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "preempted" and summary["preemption"]["step"] == 8
    assert summary["preemption"]["signal"] == f"SIG{sig}"
    assert summary["scheduler"]["name"] == ("pytorchjob" if pod else "slurm")
    if pod:  # --requeue outside SLURM: nothing to requeue, and the record says so
        assert summary["preemption"]["requeue"]["requeued"] is False
    else:
        assert "requeue" not in summary["preemption"]  # not asked for
    rank1 = json.loads((run / "ranks" / "rank1" / "summary.json").read_text())
    assert rank1["status"] == "preempted" and rank1["preemption"]["step"] == 8
    assert (run / "checkpoints" / "step-8").is_dir()
    assert (run / "ranks" / "rank1" / "checkpoints" / "step-8").is_dir()
    if not resume:
        return
    # Both started again with --requeue (a requeued job, restarted pods): the run ends as
    # an uninterrupted one does.
    ref = tmp_path / "ref"
    for out, extra in ((run, ["--requeue"]), (ref, [])):
        port = free_port()
        argv = [*SMALL, "--strategy", "ddp", "--out", str(out), *extra]
        procs = [start("run", *argv, env=placed(r, port), cwd=tmp_path,
                       logs=tmp_path / f"logs-{out.name}-{r}") for r in (0, 1)]  # fmt: skip
        assert [p.wait() for p in procs] == [0, 0], [p.stderr for p in procs]
    assert same_weights(run, ref)
    attempts = json.loads((run / "summary.json").read_text())["attempts"]
    assert [a.get("from_step") for a in attempts] == [0, 8]


def fake_scontrol(folder: Path, state: str, end: str = "12:00:10",
                  requeue_exit: int = 0) -> dict[str, str]:  # fmt: skip
    """A ``scontrol`` on PATH that shows the job as SLURM 22.05 does (a 10-minute job
    started at noon, in ``state``, ending at ``end``) and answers a requeue."""
    script = folder / "scontrol"
    job = (f"JobId=12 JobName=x JobState={state} Reason=None TimeLimit=00:10:00 "
           f"StartTime=2026-11-27T12:00:00 EndTime=2026-11-27T{end} Partition=debug")  # fmt: skip
    script.write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = show ]; then echo "{job}"; fi\n'
        f'if [ "$1" = requeue ]; then echo "requeue refused" >&2; exit {requeue_exit}; fi\n'
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return {"PATH": f"{folder}:{os.environ['PATH']}", "SLURM_JOB_ID": "12"}


def test_slurm_tells_a_cancelled_job_from_a_preempted_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the controller showed in the tests on a real SLURM 22.05: scancel leaves the
    job COMPLETING with its EndTime the moment it was asked; at the time limit, EndTime
    is StartTime + TimeLimit."""

    def scontrol(state: str, end: str = "12:00:10", requeue_exit: int = 0) -> None:
        for key, value in fake_scontrol(tmp_path, state, end, requeue_exit).items():
            monkeypatch.setenv(key, value)

    scontrol("COMPLETING")  # scancel, 10 s into a 10-minute job
    assert preemption.how_stopped("SIGTERM") == "cancelled"
    assert preemption.how_stopped("SIGUSR1") == "preempted"  # the pre-timeout signal
    scontrol("COMPLETING", end="12:10:00")  # the time limit's SIGTERM
    assert preemption.how_stopped("SIGTERM") == "preempted"
    scontrol("RUNNING", end="12:10:00", requeue_exit=1)  # a SIGTERM to a running job
    assert preemption.how_stopped("SIGTERM") == "preempted"
    assert preemption.requeue() == {"requeued": False, "command": "scontrol requeue 12",
                                    "why": "requeue refused"}  # fmt: skip
    scontrol("RUNNING")
    assert preemption.requeue() == {"requeued": True, "command": "scontrol requeue 12"}
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    assert preemption.how_stopped("SIGTERM") == "preempted"  # no scontrol: cannot tell


def test_requeue_resumes_only_what_a_scheduler_stopped(tmp_path: Path) -> None:
    def run(name: str, checkpoint: bool, **summary: object) -> str:
        folder = tmp_path / name
        (folder / "checkpoints" / "step-4" if checkpoint else folder).mkdir(parents=True)
        (folder / "summary.json").write_text(json.dumps(summary))
        return str(folder)

    assert requeued_start(str(tmp_path / "new")) is None
    assert requeued_start(run("p", True, status="preempted")) == "resume"
    assert requeued_start(run("k", True, status="running")) == "resume"  # SIGKILLed
    signalled = run("s", True, status="failed", error="terminated by SIGTERM (the run ...)")
    assert requeued_start(signalled) == "resume"
    assert requeued_start(run("e", False, status="preempted")) == "again"  # no checkpoint
    assert requeued_start(run("c", False, status="completed")) == "completed"
    for name, summary in (("f", {"status": "failed", "error": "ValueError: x"}),
                          ("x", {"status": "cancelled"})):  # fmt: skip
        with pytest.raises(ConfigError, match="not stopped by its scheduler"):
            requeued_start(run(name, True, **summary))
    with pytest.raises(ConfigError, match="--requeue needs --out"):
        requeued_start(None)
