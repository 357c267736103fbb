"""``trainscope profile``: measure the user's own training script, unchanged.

    trainscope profile [OPTIONS] [--] SCRIPT.py [ARGS...]
    trainscope profile [OPTIONS] -m MODULE [ARGS...]

as ``python -m cProfile`` and ``py-spy record --`` take them: trainscope's options come
first, and everything from the script (or ``-m MODULE``) on is the script's own command
line, passed to it untouched. The exit code is the script's.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from trainscope.errors import ConfigError
from trainscope.injections import as_arguments, keys_help, parse_injections

VALUE_FLAGS = (
    "--out", "--steps", "--warmup-steps", "--threads", "--log-every", "--nproc", "--inject",
)  # fmt: skip
USAGE = "trainscope profile [OPTIONS] [--] SCRIPT.py [ARGS...] | -m MODULE [ARGS...]"


def add_parser(sub: Any) -> None:
    """The ``profile`` subcommand's own options (the script's come after them)."""
    p = sub.add_parser(
        "profile",
        usage=USAGE,
        help="measure your own training script, unchanged: stages, memory, trace, doctor",
        description="Run SCRIPT.py (or -m MODULE) as Python would, in this process, and "
        "write the same run record as `trainscope run`: where each training step's time "
        "goes (data wait, forward, backward, optimizer, evaluation, checkpoint, other), "
        "its memory, the system samples. Options come before the script; everything "
        "after it is the script's own. The exit code is the script's.",
    )
    p.add_argument("--out", metavar="DIR", help="run directory (default runs/<script>-<time>)")
    p.add_argument(
        "--overwrite", action="store_true", help="replace an earlier run directory trainscope wrote"
    )
    p.add_argument(
        "--steps",
        type=int,
        metavar="N",
        help="end the script cleanly after N training steps (optimizer steps)",
    )
    p.add_argument(
        "--warmup-steps",
        type=int,
        default=None,
        metavar="K",
        help="steps kept out of the steady-state figures (default 5, as run)",
    )
    p.add_argument(
        "--threads",
        type=int,
        metavar="T",
        help="torch's intra-op threads for the script (default: as it sets them)",
    )
    p.add_argument(
        "--log-every",
        type=int,
        default=10,
        metavar="N",
        help="steps between reads of the losses (on a GPU each read syncs)",
    )
    p.add_argument(
        "--nproc",
        type=int,
        default=1,
        metavar="N",
        help="processes on this node, started through torchrun",
    )
    p.add_argument(
        "--inject",
        action="append",
        metavar="KEY=VALUE",
        help="change a setting of the unchanged script, recorded in the run (repeatable). "
        + keys_help(),
    )
    p.add_argument("--quiet", "-q", action="store_true", help="print trainscope's errors only")
    p.set_defaults(handler=cmd_profile, target=None)


def split_argv(argv: list[str]) -> tuple[list[str], list[str] | None]:
    """trainscope's options, and the script's command line (``[SCRIPT, *ARGS]`` or
    ``["-m", MODULE, *ARGS]``; None when none was given)."""
    own: list[str] = []
    i = 0
    while i < len(argv):
        word = argv[i]
        if word == "--":
            return own, argv[i + 1 :] or None
        if word == "-m":
            return own, argv[i:]
        if not word.startswith("-") or word == "-":
            return own, argv[i:]
        own.append(word)
        if word in VALUE_FLAGS and i + 1 < len(argv):
            own.append(argv[i + 1])
            i += 1
        i += 1
    return own, None


def _positive(name: str, value: int | None, zero: bool = False) -> None:
    if value is not None and (value < 0 or (value == 0 and not zero)):
        raise ConfigError(f"{name} must be {'0 or more' if zero else 'at least 1'}, got {value}")


def _target(command: list[str] | None) -> Any:
    from trainscope.script.target import module_target, script_target

    if not command:
        raise ConfigError(f"profile needs a script to run: {USAGE}")
    if command[0] == "-m":
        if len(command) < 2:
            raise ConfigError("-m needs a module name: trainscope profile -m MODULE [ARGS...]")
        return module_target(command[1], command[2:])
    return script_target(command[0], command[1:])


def cmd_profile(args: argparse.Namespace) -> int:
    """``trainscope profile``: checks first (nothing written for a bad script), then the
    script in this process (or ``--nproc`` processes), its exit code returned."""
    _positive("--steps", args.steps)
    _positive("--warmup-steps", args.warmup_steps, zero=True)
    _positive("--threads", args.threads)
    _positive("--log-every", args.log_every)
    _positive("--nproc", args.nproc)
    if args.nproc > 64:
        raise ConfigError(f"--nproc {args.nproc}: at most 64 processes on one node")
    injected = parse_injections(args.inject)
    if "threads" in injected and args.threads is not None:
        raise ConfigError("--threads and --inject threads=N say the same: give one")
    target = _target(args.target)
    if args.nproc > 1:
        return _launch(args, target, injected)
    from trainscope.script.profile import profile_target
    from trainscope.script.session import DEFAULT_WARMUP_STEPS, ProfileOptions

    options = ProfileOptions(
        out=args.out,
        overwrite=args.overwrite,
        steps=args.steps,
        threads=args.threads,
        warmup_steps=DEFAULT_WARMUP_STEPS if args.warmup_steps is None else args.warmup_steps,
        log_every=args.log_every,
        injected=injected,
    )
    return profile_target(target, options, quiet=args.quiet)


def _launch(args: argparse.Namespace, target: Any, injected: dict[str, Any]) -> int:
    """``--nproc N``: the same command in N processes through torchrun; rank 0's record
    is shown here once they have all ended."""
    from pathlib import Path

    from trainscope.config import DistConfig
    from trainscope.launch.launcher import launch_command
    from trainscope.records.jsonio import try_json_object
    from trainscope.script.session import default_out
    from trainscope.train.console import RunConsole

    out = args.out or str(default_out(target.stem))
    own = ["profile", "--out", out, "--quiet", "--log-every", str(args.log_every)]
    own += ["--overwrite"] * args.overwrite
    for flag, value in (("--steps", args.steps), ("--warmup-steps", args.warmup_steps),
                        ("--threads", args.threads)):  # fmt: skip
        if value is not None:
            own += [flag, str(value)]
    own += as_arguments(injected)
    command = ["-m", target.name] if target.kind == "module" else [target.name]
    # The strategy is the script's own; DistConfig asks for a multi-process one to launch.
    launch = DistConfig(strategy="ddp", nproc=args.nproc)
    result = launch_command(launch, [*own, "--", *command, *target.args])
    summary = try_json_object(Path(out) / "summary.json")
    if summary is not None and not args.quiet:
        RunConsole(enabled=True, progress=False).finish(summary, Path(out))
    if result.error is not None and result.code:
        print(f"trainscope: {result.error}", file=sys.stderr)
    return result.code


__all__ = ["USAGE", "add_parser", "cmd_profile", "split_argv"]
