"""The ``trainscope`` command: parse arguments into a RunConfig and hand over; no training logic.

Nothing here imports torch at module level, so ``trainscope --help`` starts fast; the
training code is imported only by the subcommand that needs it.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

import yaml

from trainscope import __version__
from trainscope.errors import ConfigError, TrainscopeError

# CLI flag -> (dotted config key, argparse keyword arguments). Defaults are SUPPRESSed so
# that only the flags a user typed override the YAML file.
RUN_FLAGS: dict[str, tuple[str, dict[str, Any]]] = {
    "--workload": (
        "workload.name",
        {
            "metavar": "NAME",
            "help": "digits | mnist | synthetic | pkg.module:factory (default digits)",
        },
    ),
    "--data-dir": (
        "workload.data_dir",
        {"metavar": "DIR", "help": "local data folder (mnist: the four IDX files)"},
    ),
    "--download": (
        "workload.download",
        {
            "action": argparse.BooleanOptionalAction,
            "help": "allow downloading missing data (default on)",
        },
    ),
    "--augment": (
        "workload.augment",
        {
            "action": argparse.BooleanOptionalAction,
            "help": "random-affine augmentation of training images (mnist)",
        },
    ),
    "--synthetic-samples": ("workload.synthetic_samples", {"type": int, "metavar": "N"}),
    "--synthetic-shape": (
        "workload.synthetic_shape",
        {"type": int, "nargs": 3, "metavar": ("C", "H", "W")},
    ),
    "--num-classes": (
        "workload.num_classes",
        {"type": int, "metavar": "N", "help": "synthetic: number of classes"},
    ),
    "--batch-size": (
        "data.batch_size",
        {"type": int, "metavar": "N", "help": "samples per step (default 32)"},
    ),
    "--num-workers": (
        "data.num_workers",
        {"type": int, "metavar": "N", "help": "DataLoader workers (default 0)"},
    ),
    "--pin-memory": ("data.pin_memory", {"action": argparse.BooleanOptionalAction}),
    "--persistent-workers": ("data.persistent_workers", {"action": argparse.BooleanOptionalAction}),
    "--prefetch-factor": ("data.prefetch_factor", {"type": int, "metavar": "N"}),
    "--shuffle-seed": ("data.shuffle_seed", {"type": int, "metavar": "N"}),
    "--drop-last": ("data.drop_last", {"action": argparse.BooleanOptionalAction}),
    "--epochs": ("train.epochs", {"type": int, "metavar": "N", "help": "default 30"}),
    "--max-steps-per-epoch": ("train.max_steps_per_epoch", {"type": int, "metavar": "N"}),
    "--optimizer": (
        "train.optimizer",
        {"metavar": "NAME", "help": "sgd | adam | adamw (default sgd)"},
    ),
    "--lr": ("train.lr", {"type": float, "metavar": "LR", "help": "learning rate (default 0.05)"}),
    "--momentum": ("train.momentum", {"type": float, "metavar": "M"}),
    "--weight-decay": ("train.weight_decay", {"type": float, "metavar": "WD"}),
    "--seed": ("train.seed", {"type": int, "metavar": "N", "help": "model/initialisation seed"}),
    "--eval-every": (
        "train.eval_every",
        {"type": int, "metavar": "N", "help": "validate every N epochs"},
    ),
    "--log-every": (
        "train.log_every",
        {"type": int, "metavar": "N", "help": "read timings and losses every N steps"},
    ),
    "--device": ("runtime.device", {"metavar": "DEV", "help": "auto | cpu | cuda | cuda:N"}),
    "--precision": ("runtime.precision", {"metavar": "P", "help": "fp32 | tf32 | fp16 | bf16"}),
    "--timing": (
        "runtime.timing",
        {"metavar": "MODE", "help": "auto (events on GPU) | exact (sync per stage)"},
    ),
    "--system-interval": (
        "runtime.system_interval_s",
        {"type": float, "metavar": "S", "help": "seconds between system samples"},
    ),
    "--out": ("out", {"metavar": "DIR", "help": "run directory (default runs/<workload>-<time>)"}),
    "--overwrite": (
        "overwrite",
        {"action": "store_true", "help": "replace an existing run directory"},
    ),
}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # One line, like every other input error of trainscope.
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        sys.exit(2)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of all subcommands."""
    parser = _Parser(
        prog="trainscope",
        description="Train a workload, measure where each step's time and memory go, report it.",
    )
    parser.add_argument("--version", action="version", version=f"trainscope {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    p_run = sub.add_parser(
        "run",
        help="train a workload and write a run record",
        description="Train a workload (default: scikit-learn digits, offline, under a minute on "
        "CPU) and write its run directory. Flags override --config.",
    )
    p_run.add_argument(
        "--config", metavar="YAML", help="config file (e.g. a saved run's config.yaml)"
    )
    for flag, (dest, kwargs) in RUN_FLAGS.items():
        p_run.add_argument(flag, dest=dest, default=argparse.SUPPRESS, **kwargs)
    p_run.add_argument(
        "--set",
        dest="sets",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="any config key, e.g. --set train.lr=0.1 (YAML value syntax)",
    )
    p_run.add_argument("--no-progress", action="store_true", help="no progress bars")
    p_run.add_argument("--quiet", "-q", action="store_true", help="print errors only")

    p_rep = sub.add_parser(
        "report",
        help="tables and plots from a run directory",
        description="Build stage pie chart, Markdown and LaTeX tables from a run record.",
    )
    p_rep.add_argument("run_dir", metavar="RUN_DIR")
    p_rep.add_argument("--out", metavar="DIR", help="where to write (default RUN_DIR/report)")
    p_rep.add_argument("--quiet", "-q", action="store_true", help="print errors only")
    return parser


def overrides_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The dotted config overrides a user typed (flags and --set)."""
    out = {dest: getattr(args, dest) for dest, _ in RUN_FLAGS.values() if hasattr(args, dest)}
    for item in args.sets:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"--set expects KEY=VALUE, got {item!r}")
        try:
            out[key] = yaml.safe_load(raw)
        except yaml.YAMLError:
            raise ConfigError(f"--set {key}: cannot parse value {raw!r}") from None
    return out


def cmd_run(args: argparse.Namespace) -> int:
    """``trainscope run``."""
    from trainscope.config import resolve

    cfg = resolve(args.config, overrides_from_args(args))  # validated before any import of torch
    if args.no_progress:
        cfg.runtime.progress = False
    from trainscope.train.console import RunConsole
    from trainscope.train.run import run

    console = RunConsole(enabled=not args.quiet, progress=cfg.runtime.progress)
    summary = run(cfg, console)
    return 0 if summary["status"] == "completed" else 1


def cmd_report(args: argparse.Namespace) -> int:
    """``trainscope report RUN_DIR``."""
    from trainscope.reports.console import print_report
    from trainscope.reports.run_report import build_run_report

    report = build_run_report(args.run_dir, args.out)
    if not args.quiet:
        print_report(report)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    handlers = {"run": cmd_run, "report": cmd_report}
    try:
        return handlers[args.command](args)
    except ConfigError as e:
        print(f"trainscope: error: {e}", file=sys.stderr)
        return 2
    except TrainscopeError as e:
        print(f"trainscope: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("trainscope: interrupted", file=sys.stderr)
        return 130
    except Exception as e:
        if os.environ.get("TRAINSCOPE_DEBUG"):
            raise
        print(
            f"trainscope: internal error: {type(e).__name__}: {e} "
            "(set TRAINSCOPE_DEBUG=1 for the traceback)",
            file=sys.stderr,
        )
        return 1


if __name__ == "__main__":
    sys.exit(main())
