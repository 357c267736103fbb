"""``trainscope slurm-script``: a ready sbatch script for a run (the script's text is
:mod:`trainscope.launch.slurm_script`'s, imported when the command runs, so that ``--help``
does not load it). Torch-free, like the rest of the parser."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from trainscope.cli.flags import refuse_muon_flags_without_muon
from trainscope.cli.flags import run_flags as every_run_flag
from trainscope.config import resolve
from trainscope.errors import ConfigError
from trainscope.version import __version__

HEADER = "Written by trainscope"
# The script sets these itself: the ranks are SLURM's tasks, the run folder the job's.
SKIPPED = ("--out", "--overwrite", "--nproc", "--nnodes", "--node-rank", "--master-addr",
           "--master-port", "--rdzv-endpoint", "--requeue", "--max-restarts")  # fmt: skip


def add_parser(
    sub: Any,
    add_run_flags: Callable[..., None],
    overrides_of: Callable[[argparse.Namespace], dict[str, Any]],
) -> None:
    """Add ``slurm-script`` to the sub-commands: ``trainscope run``'s flags (less those
    the script sets), and the job's."""
    p = sub.add_parser(
        "slurm-script",
        help="print (or write) an sbatch script for a run: one SLURM task per rank, "
        "checkpoint and requeue before the time limit",
        description="An sbatch script that runs `trainscope run FLAGS` as a SLURM job: one task "
        "per rank (srun; trainscope reads SLURM's variables), SIGUSR1 before the time limit "
        "(checkpoint, requeue, resume), a comment per line.",
    )
    add_run_flags(p, skip=SKIPPED)
    job = p.add_argument_group("the SLURM job")
    job.add_argument("--nodes", type=int, required=True, metavar="N", help="machines")
    job.add_argument("--tasks-per-node", type=int, required=True, metavar="T",
                     help="ranks on each machine (one per GPU on GPUs)")  # fmt: skip
    job.add_argument("--time", required=True, metavar="HH:MM", help="the job's time limit")
    job.add_argument("--partition", metavar="NAME")
    job.add_argument("--cpus-per-task", type=int, metavar="C", help="cores per rank")
    job.add_argument("--gpus-per-node", type=int, metavar="G")
    job.add_argument("--signal-s", type=int, default=90, metavar="S",
                     help="SIGUSR1 this many seconds before the limit (default 90)")  # fmt: skip
    job.add_argument("--job-name", default=None, metavar="NAME",
                     help="default trainscope-<workload>")  # fmt: skip
    job.add_argument(
        "--runs",
        metavar="DIR",
        help="the output root (default: $TRAINSCOPE_RUNS "
        "when the job is submitted, else runs/ in the folder it is submitted from)",
    )
    job.add_argument("--trainscope", metavar="CMD", help="the command that starts trainscope "
                     "on the nodes, split as the shell would (default: this one's full "
                     "path)")  # fmt: skip
    job.add_argument("--out", dest="script_out", metavar="FILE",
                     help="write the script here (default: print it)")  # fmt: skip
    p.set_defaults(handler=cmd_slurm_script, overrides_of=overrides_of)


def run_flags(overrides: dict[str, Any]) -> list[str]:
    """The ``trainscope run`` arguments that give ``overrides`` (as the flags a user
    would type, ``--flag=value``, or ``--set KEY=VALUE`` in JSON, which YAML reads the
    same)."""
    by_dest = {dest: (flag, kwargs) for flag, (dest, kwargs) in every_run_flag().items()}
    out: list[str] = []
    for key, value in overrides.items():
        flag, kwargs = by_dest.get(key, (None, {}))
        action = kwargs.get("action")
        if flag is not None and action == "store_true" and value is True:
            out.append(flag)
        elif flag is not None and action is argparse.BooleanOptionalAction:
            out.append(flag if value else "--no-" + flag[2:])
        elif flag is not None and isinstance(value, (str, int, float)) and not action:
            out.append(f"{flag}={value}")  # one word, even for a value that starts with -
        elif flag is not None and isinstance(value, list) and all(map(_is_text, value)):
            out.append(f"{flag}={','.join(value)}")
        else:
            out += ["--set", f"{key}={json.dumps(value)}"]
    return out


def _is_text(value: Any) -> bool:
    return isinstance(value, str)


def _trainscope_command() -> str:
    """The trainscope that is running now: the job should start the same one."""
    here = Path(sys.executable).parent / "trainscope"
    return str(here) if here.exists() else (shutil.which("trainscope") or "trainscope")


def cmd_slurm_script(args: argparse.Namespace) -> int:
    """Check the run as the job will start it, then print or write its script."""
    from trainscope.launch.slurm_script import ScriptOptions, sbatch_script

    overrides = args.overrides_of(args)
    world = {"dist.nproc": args.tasks_per_node, "dist.nnodes": args.nodes}
    if args.nodes > 1:
        world["dist.master_port"] = 29500  # a placeholder: SLURM's variables give the real one
    cfg = resolve(args.config, {**overrides, **world})  # one clear line for a bad setting
    refuse_muon_flags_without_muon(cfg, overrides)  # as `trainscope run` on the nodes would
    default = f"trainscope-{cfg.workload.name.split(':')[-1]}"[:64]  # a factory's name too
    name = args.job_name or "".join(c if c.isascii() and (c.isalnum() or c in "._-") else "-"
                                    for c in default)  # fmt: skip
    opts = ScriptOptions(
        nodes=args.nodes, tasks_per_node=args.tasks_per_node, time=args.time,
        job_name=name,
        partition=args.partition, cpus_per_task=args.cpus_per_task,
        gpus_per_node=args.gpus_per_node, signal_s=args.signal_s,
        runs=os.path.abspath(args.runs) if args.runs else None,
        trainscope=_trainscope_command() if args.trainscope is None else args.trainscope,
    )  # fmt: skip
    flags = (["--config", os.path.abspath(args.config)] if args.config else []) + run_flags(
        overrides
    )
    script = sbatch_script(flags, opts, f"{HEADER} {__version__} (trainscope slurm-script)")
    if args.script_out is None:
        sys.stdout.write(script)
        return 0
    path = Path(args.script_out)
    if path.is_symlink() or (path.exists() and not _ours(path)):
        raise ConfigError(f"--out {path}: a file trainscope did not write is there: "
                          "give a new name")  # fmt: skip
    path.write_text(script, encoding="utf-8")
    print(f"sbatch script written to {path}: submit it with sbatch {path}")
    return 0


def _ours(path: Path) -> bool:
    """A script this command wrote (its second line says so)."""
    try:
        with path.open(encoding="utf-8", errors="replace") as f:
            return f.readline().startswith("#!") and f.readline().startswith(f"# {HEADER} ")
    except OSError:
        return False


__all__ = ["add_parser", "run_flags"]
