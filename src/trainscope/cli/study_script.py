"""``trainscope study NAME [FLAGS] -- SCRIPT.py [ARGS]`` (or ``--script FILE``): a study
of the user's unchanged script, its configurations injected
(:mod:`trainscope.studies.script_studies`).

The study's own flags (``--iter-workers``, ``--precisions``, ``--policies``,
``--repeats``, ``--warmup``) mean what they mean on a workload; of the run flags only
``--threads`` applies (the script sets the rest itself), and ``--steps`` and ``--inject``
are the script's, as for ``trainscope profile``.
"""

from __future__ import annotations

import argparse
import hashlib
import os
from pathlib import Path
from typing import Any

from trainscope.errors import ConfigError

DEFAULT_STEPS = 30


def add_script_arguments(p: argparse.ArgumentParser) -> None:
    """The flags of a study on a script, added to each ``study NAME`` parser."""
    g = p.add_argument_group("a study of your own script (loader, precision, checkpointing, "
                             "profile)")  # fmt: skip
    g.add_argument("--script", metavar="FILE",
                   help="the script to study, run with no arguments (or give the command "
                   "after --: trainscope study loader -- train.py --lr 0.1)")  # fmt: skip
    g.add_argument("--steps", type=int, default=None, metavar="N",
                   help=f"with a script: the training steps each run takes, then the "
                   f"script is ended cleanly (default {DEFAULT_STEPS})")  # fmt: skip
    g.add_argument("--inject", action="append", default=[], metavar="KEY=VALUE",
                   help="with a script: settings every configuration injects, as for "
                   "trainscope profile")  # fmt: skip
    p.set_defaults(script_command=[])  # the words after `--` (split off before parsing)


def wants_script(args: argparse.Namespace) -> bool:
    """Whether the command names a script to study."""
    return bool(getattr(args, "script", None) or getattr(args, "script_command", None))


def _command(args: argparse.Namespace) -> tuple[list[str], str | None]:
    """The script's command as a record keeps it, and the file's SHA-256 (None: -m)."""
    if args.script and args.script_command:
        raise ConfigError("give the script once: --script FILE, or the command after --")
    words = [args.script] if args.script else list(args.script_command)
    if words[0] == "-m":
        if len(words) < 2:
            raise ConfigError("-m needs a module name: trainscope study NAME -- -m MODULE")
        return [f"-m {words[1]}", *words[2:]], None
    path = Path(words[0])
    if not path.is_file():
        raise ConfigError(f"{words[0]}: no such script")
    return words, hashlib.sha256(path.read_bytes()).hexdigest()


def _threads(overrides: dict[str, Any]) -> int | None:
    """``--threads N`` (None: auto, the usable cores, set by the planner)."""
    text = overrides.pop("runtime.threads", None)
    if text is None or str(text) == "auto":
        return None
    try:
        n = int(str(text))
    except ValueError:
        raise ConfigError(f"--threads {text}: give a number or auto") from None
    if not 1 <= n <= 1024:
        raise ConfigError(f"--threads {n}: give 1..1024")
    return n


def script_study_plan(args: argparse.Namespace, entry: Any, overrides: dict[str, Any]) -> Any:
    """The study's plan on the script the command names (see module docs); refused in
    one line: a study that needs trainscope's workloads, a run flag the script sets
    itself, a bad ``--inject`` or ``--steps``."""
    from trainscope import registry
    from trainscope.injections import parse_injections
    from trainscope.studies.script_runs import check_spec, script_base
    from trainscope.studies.script_studies import plan_script_study, script_studies

    if entry.script is None:
        raise ConfigError(f"study {entry.name} needs trainscope's own workloads; on a "
                          f"script: {', '.join(script_studies())}")  # fmt: skip
    from trainscope.cli.flags import run_flags

    threads = _threads(overrides)
    flag_of = {dest: flag for flag, (dest, _) in run_flags().items()}
    typed = [k for k in overrides if k not in ("out", "overwrite")]  # the study's own
    given = sorted(flag_of.get(k, f"--set {k}") for k in typed)
    given += ["--config"] if args.config else []
    if given:
        raise ConfigError(
            f"study {entry.name} on a script: {', '.join(given)} is the script's own to "
            "set (of the run flags only --threads applies)"
        )
    argv, digest = _command(args)
    inject = parse_injections(args.inject)
    if threads is not None and "threads" in inject:
        raise ConfigError("--threads and --inject threads=N say the same: give one")
    steps = DEFAULT_STEPS if args.steps is None else args.steps
    base = script_base(argv, os.getcwd(), steps=steps, threads=threads, inject=inject,
                       sha256=digest)  # fmt: skip
    check_spec(base["script"])
    options: dict[str, Any] = {}
    if entry.options is not None:  # the study's own flags, read as on a workload
        options, _ = registry.load(entry.options)(args, {})
    import torch

    return plan_script_study(entry.name, base, cuda=torch.cuda.is_available(),
                             repeats=args.repeats, warmup=args.warmup, **options)  # fmt: skip


def refuse_script_flags(args: argparse.Namespace) -> None:
    """``--steps``/``--inject`` without a script: they are a script's, refused in one line."""
    if getattr(args, "steps", None) is not None or getattr(args, "inject", None):
        raise ConfigError("--steps and --inject apply to a study of a script "
                          "(--script FILE, or the command after --)")  # fmt: skip


__all__ = ["add_script_arguments", "refuse_script_flags", "script_study_plan", "wants_script"]
