"""A ready sbatch script for a trainscope run (``trainscope slurm-script``), torch-free.

One SLURM task per rank, started by ``srun`` (trainscope reads SLURM's variables:
:mod:`trainscope.runtime.scheduler`), with SLURM's pre-timeout signal asked for and
``--requeue``, so that a job about to reach its time limit, or preempted, checkpoints,
requeues itself and resumes where it stopped. The run's folder is named by the job id,
which a requeued job keeps: that is how the job finds the run to resume. Every line says
what it is for; every value from the user is shell-quoted.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from trainscope.errors import ConfigError

MAX_NODES = 100_000
MAX_TASKS_PER_NODE = 1024
MAX_SIGNAL_S = 65535  # SLURM's own limit on --signal's seconds
TIME = re.compile(r"(?:(\d{1,3})-)?(\d{1,4}):(\d{2})(?::(\d{2}))?")


@dataclass(frozen=True)
class ScriptOptions:
    """What the job asks of SLURM."""

    nodes: int
    tasks_per_node: int
    time: str
    """HH:MM, HH:MM:SS or D-HH:MM[:SS]."""
    job_name: str = "trainscope"
    partition: str | None = None
    cpus_per_task: int | None = None
    gpus_per_node: int | None = None
    signal_s: int = 90
    """Seconds before the time limit that SLURM sends SIGUSR1."""
    runs: str | None = None
    """The output root the job's run folder goes under (``$TRAINSCOPE_RUNS``; None:
    ``$TRAINSCOPE_RUNS`` where the job is submitted, else ``runs/`` in its folder)."""
    trainscope: str = "trainscope"
    """The command that starts trainscope on the nodes."""

    def __post_init__(self) -> None:
        for name, value, high in (("--nodes", self.nodes, MAX_NODES),
                                  ("--tasks-per-node", self.tasks_per_node, MAX_TASKS_PER_NODE),
                                  ("--cpus-per-task", self.cpus_per_task, 4096),
                                  ("--gpus-per-node", self.gpus_per_node, 64)):  # fmt: skip
            if value is not None and not 1 <= value <= high:
                raise ConfigError(f"{name} must be in 1..{high}, got {value}")
        if not 1 <= self.signal_s <= MAX_SIGNAL_S:
            raise ConfigError(f"--signal-s must be in 1..{MAX_SIGNAL_S}, got {self.signal_s}")
        limit = time_limit_s(self.time)
        if limit <= self.signal_s:
            raise ConfigError(
                f"--time {self.time} ends before the signal {self.signal_s} s ahead of it "
                "could come: give a longer --time or a smaller --signal-s"
            )
        if not re.fullmatch(r"[A-Za-z0-9._-]{1,64}", self.job_name):
            raise ConfigError("--job-name: 1-64 letters, digits, '.', '_' or '-'")
        if self.partition is not None and not re.fullmatch(
            r"[A-Za-z0-9._,-]{1,64}", self.partition
        ):
            raise ConfigError("--partition: 1-64 letters, digits, '.', '_', ',' or '-'")
        command_words(self.trainscope)


def command_words(command: str) -> list[str]:
    """``--trainscope``'s command split as the shell would, or one clear line when it
    cannot be (an unclosed quote) or names no command."""
    try:
        words = shlex.split(command)
    except ValueError as e:
        raise ConfigError(f"--trainscope {command[:80]!r}: the shell could not split it ({e})"
                          ) from None  # fmt: skip
    if not words:
        raise ConfigError("--trainscope names no command: give the one that starts trainscope")
    return words


def time_limit_s(text: str) -> int:
    """SLURM's time limit in seconds (HH:MM, HH:MM:SS or D-HH:MM[:SS]); one clear error
    for anything else."""
    m = TIME.fullmatch(text.strip())
    if m is None or int(m[3]) > 59 or int(m[4] or 0) > 59:
        raise ConfigError(f"--time {text!r}: expected HH:MM, HH:MM:SS or D-HH:MM[:SS]")
    days, hours, minutes, seconds = (int(g or 0) for g in m.groups())
    total = ((days * 24 + hours) * 60 + minutes) * 60 + seconds
    if total == 0:
        raise ConfigError(f"--time {text!r}: a job needs some time")
    return total


def slurm_time(text: str) -> str:
    """The limit as SLURM reads it unambiguously ([D-]HH:MM:SS: SLURM reads "01:00" as
    one minute, where this command's HH:MM means one hour)."""
    total = time_limit_s(text)
    days, rest = divmod(total, 86400)
    clock = f"{rest // 3600:02d}:{rest % 3600 // 60:02d}:{rest % 60:02d}"
    return f"{days}-{clock}" if days else clock


def _directive(option: str, why: str) -> str:
    return f"#SBATCH {option:<32} # {why}"


def sbatch_script(run_args: list[str], opts: ScriptOptions, made_by: str) -> str:
    """The sbatch script that runs ``trainscope run RUN_ARGS`` as this job's ranks."""
    world = opts.nodes * opts.tasks_per_node
    lines = [
        "#!/bin/bash",
        f"# {made_by}",
        "# Submit it with: sbatch THIS_FILE. Every rank is one SLURM task; trainscope reads",
        "# SLURM's variables (no torchrun inside), and checkpoints, requeues and resumes",
        "# when SLURM's signal comes before the time limit or the job is preempted.",
        _directive(f"--job-name={opts.job_name}", "the name squeue shows"),
        _directive(f"--nodes={opts.nodes}", "machines"),
        _directive(f"--ntasks-per-node={opts.tasks_per_node}",
                   f"one task per rank: {world} rank(s) in all"),
    ]  # fmt: skip
    if opts.cpus_per_task is not None:
        lines.append(_directive(f"--cpus-per-task={opts.cpus_per_task}",
                                "cores per rank (its threads)"))  # fmt: skip
    if opts.gpus_per_node is not None:
        lines.append(_directive(f"--gpus-per-node={opts.gpus_per_node}",
                                "GPUs per machine: one per local rank"))  # fmt: skip
    if opts.partition is not None:
        lines.append(_directive(f"--partition={opts.partition}", "where the job runs"))
    lines += [
        _directive(f"--time={slurm_time(opts.time)}", "the time limit"),
        _directive(f"--signal=USR1@{opts.signal_s}",
                   f"SIGUSR1 to every rank {opts.signal_s} s before it: checkpoint, requeue"),
        _directive("--requeue", "the job may be put back in the queue"),
        _directive("--open-mode=append", "a requeued job's output follows the first's"),
        _directive("--output=slurm-%x-%j.out", "output: job name and id"),
        "",
        "set -euo pipefail",
        "# Where runs go; the run's folder is named by the job id, which a requeued job keeps:",
        "# started again, the same command finds the run and goes on from its checkpoint.",
        "export TRAINSCOPE_RUNS=" + (shlex.quote(opts.runs) if opts.runs is not None
                                     else '"${TRAINSCOPE_RUNS:-$SLURM_SUBMIT_DIR/runs}"'),
        f'RUN_DIR="$TRAINSCOPE_RUNS/{opts.job_name}-$SLURM_JOB_ID"',
        *(["# srun does not pass --cpus-per-task on to its tasks (SLURM 22.05 and later)",
            'export SRUN_CPUS_PER_TASK="$SLURM_CPUS_PER_TASK"']
          if opts.cpus_per_task is not None else []),
        "# One trainscope per task. No --kill-on-bad-exit: preempted ranks exit 128 + the",
        "# signal together, and rank 0 must live on to requeue the job. (A rank that fails",
        "# ends the others anyway: their next collective loses it.)",
        *_wrapped(["srun", *map(shlex.quote, command_words(opts.trainscope)), "run",
                   *map(shlex.quote, run_args), "--requeue", '--out "$RUN_DIR"']),
    ]  # fmt: skip
    return "\n".join(lines) + "\n"


def _wrapped(words: list[str], width: int = 88) -> list[str]:
    """A command as shell lines of at most ``width`` characters (a word longer than that
    gets a line of its own), continued with backslashes."""
    lines, line = [], ""
    for w in words:
        if line and len(line) + 1 + len(w) > width - 2:
            lines.append(line + " \\")
            line = "    " + w
        else:
            line = f"{line} {w}" if line else w
    return [*lines, line]


__all__ = ["ScriptOptions", "sbatch_script", "slurm_time", "time_limit_s"]
