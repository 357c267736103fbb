"""Preemption: a scheduler's signal becomes a checkpoint at a step every rank agrees on,
a record that says ``preempted`` (or ``cancelled``), and, with ``--requeue`` under SLURM,
the job put back in the queue, where it resumes from that checkpoint.

SLURM sends its pre-timeout signal (``#SBATCH --signal=USR1@90``) and, on preemption or
``scancel``, SIGTERM, to every task; Kubernetes sends SIGTERM to an evicted pod. The
signal reaches each rank at its own moment, so no rank may stop on its own: a rank that
stopped one step before the others would leave them waiting in a collective. Instead
the signal is only noted (:func:`~trainscope.runtime.signals.preemption_noted`), and at
every log interval, a step every rank reaches alike, one all-reduce of one integer
(:class:`StopVote`) tells every rank whether any was signalled. Then all write the
checkpoint of that step and stop together. The cost is that one collective per log
interval (the losses are read back there already), and a stop up to ``--log-every``
steps after the signal.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import signal
import subprocess
from collections.abc import Mapping
from typing import Any

import torch

from trainscope.config import RunConfig
from trainscope.errors import Preempted
from trainscope.runtime.dist import DistInfo
from trainscope.runtime.scheduler import detect
from trainscope.runtime.signals import preempt_signal
from trainscope.util.textsafe import one_line

STATUSES = ("preempted", "cancelled")
SLURM_TIMEOUT_S = 20.0
"""How long ``scontrol`` may take to answer before the run gives up on it."""


def armed(cfg: RunConfig, env: Mapping[str, str] | None = None) -> bool:
    """Whether a preemption signal checkpoints and stops this run (instead of ending it
    at once as failed): under a scheduler (a SLURM job, a PyTorchJob), or with
    ``--requeue``."""
    placement = detect(os.environ if env is None else env)
    placed = placement is not None and placement.scheduler != "torchrun"
    return cfg.dist.requeue or placed


class StopVote:
    """Whether any rank received a preemption signal: the signal number (the largest,
    where ranks differ), or 0. A collective: every rank calls it at the same step."""

    def __init__(self, info: DistInfo, device: torch.device) -> None:
        self.info = info
        # nccl reduces CUDA tensors only; gloo CPU ones.
        self.device = device if info.backend == "nccl" else torch.device("cpu")

    def __call__(self) -> int:
        return self._max(preempt_signal())

    def status(self, signum: int) -> str:
        """``preempted``, or ``cancelled`` where SLURM says so: rank 0 asks SLURM once and
        every rank records its answer (a collective too, on the way out only)."""
        mine = STATUSES.index(how_stopped(signal.Signals(signum).name)) if self.info.is_main else 0
        return STATUSES[self._max(mine)]

    def _max(self, value: int) -> int:
        if not self.info.distributed or self.info.world_size == 1:
            return value
        import torch.distributed as dist

        flag = torch.tensor([value], dtype=torch.int64, device=self.device)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return int(flag.item())


def slurm_job(job_id: str) -> dict[str, str]:
    """The job as SLURM's controller has it (``scontrol show job``: JobState, StartTime,
    EndTime, TimeLimit, ...), or {} when it cannot be asked."""
    try:
        out = subprocess.run(["scontrol", "show", "job", "-o", job_id], capture_output=True,
                             text=True, timeout=SLURM_TIMEOUT_S, check=False)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return {}
    return dict(re.findall(r"\b(\w+)=(\S*)", out.stdout[:100_000]))


def _limit_s(text: str) -> float | None:
    """SLURM's TimeLimit ([D-]HH:MM:SS, MM:SS, UNLIMITED) in seconds; None if unlimited."""
    m = re.fullmatch(r"(?:(\d+)-)?(?:(\d+):)?(\d+):(\d+)", text)
    if m is None:
        return None
    days, hours, minutes, seconds = (int(g or 0) for g in m.groups())
    return ((days * 24 + hours) * 60 + minutes) * 60 + seconds


def _ended_at_time_limit(job: dict[str, str]) -> bool:
    """The job ends when its time limit says (EndTime = StartTime + TimeLimit), not
    earlier as a cancelled job does (scancel sets EndTime to the moment it was asked)."""
    limit = _limit_s(job.get("TimeLimit", ""))
    try:
        start = dt.datetime.fromisoformat(job["StartTime"])
        end = dt.datetime.fromisoformat(job["EndTime"])
    except (KeyError, ValueError):
        return False
    return limit is not None and (start + dt.timedelta(seconds=limit) - end).total_seconds() < 2


def how_stopped(signame: str, env: Mapping[str, str] | None = None) -> str:
    """``cancelled`` when SLURM says the job is ending before its time (``scancel`` sends
    the same SIGTERM as a preemption; the job is then COMPLETING with an EndTime before its
    limit), else ``preempted``: the pre-timeout SIGUSR1, a SIGTERM at the time limit, a
    job SLURM requeues or suspends itself, or a signal outside SLURM."""
    env = os.environ if env is None else env
    job_id = env.get("SLURM_JOB_ID")
    if signame != "SIGTERM" or not job_id:
        return "preempted"
    job = slurm_job(job_id)
    if job.get("JobState") in ("COMPLETING", "CANCELLED") and not _ended_at_time_limit(job):
        return "cancelled"
    return "preempted"


def requeue(env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """``scontrol requeue`` this SLURM job: what was asked and how it went (for the
    record). SLURM starts the job's script again later, with the same job id."""
    env = os.environ if env is None else env
    job = env.get("SLURM_JOB_ID")
    if not job:
        return {"requeued": False, "why": "not a SLURM job: nothing to requeue"}
    command = ["scontrol", "requeue", job]
    try:
        done = subprocess.run(command, capture_output=True, text=True,
                              timeout=SLURM_TIMEOUT_S, check=False)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as e:
        return {"requeued": False, "command": " ".join(command), "why": one_line(str(e))}
    if done.returncode != 0:
        why = one_line(done.stderr or done.stdout or f"exit status {done.returncode}").strip()
        return {"requeued": False, "command": " ".join(command), "why": why[:300]}
    return {"requeued": True, "command": " ".join(command)}


def stop_between_epochs(vote: StopVote, checkpointer: Any, state: Any, saved: bool) -> None:
    """At an epoch's end, after its validation (every rank alike): stop, checkpointed, if
    any rank received a preemption signal; a resume from it starts the next epoch."""
    signum = vote()
    if not signum:
        return
    if not saved:
        checkpointer.save(state)
    raise Preempted(signum, state.step, f"checkpoints/step-{state.step}", vote.status(signum))


__all__ = ["StopVote", "armed", "how_stopped", "requeue", "slurm_job", "stop_between_epochs"]
