"""The ``trainscope`` command: parse arguments into a RunConfig and hand over; no training logic.

Nothing here imports torch at module level, so ``trainscope --help`` starts fast; the
training code is imported only by the subcommand that needs it.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import shlex
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

import yaml

from trainscope import registry
from trainscope.cli.doctor import add_parser as add_doctor_parser
from trainscope.cli.flags import (
    FLAG_GROUPS,
    flag_group,
    flag_help,
    help_with_default,
    refuse_muon_flags_without_muon,
    refuse_what_the_study_sets,
    run_flags,
)
from trainscope.cli.lab import add_parser as add_lab_parser
from trainscope.cli.profile import add_parser as add_profile_parser
from trainscope.cli.profile import split_argv as split_profile_argv
from trainscope.cli.slurm import add_parser as add_slurm_parser
from trainscope.cli.study_script import (
    add_script_arguments,
    refuse_script_flags,
    script_study_plan,
    wants_script,
)
from trainscope.collectives import cli as collectives_cli
from trainscope.config import deletion_only_from_command_line, resolve, safe_load_yaml, show
from trainscope.data import mnist_split
from trainscope.errors import ConfigError, Terminated, TrainscopeError
from trainscope.estimate.cli import add_parser as add_estimate_parser
from trainscope.estimate.cli import main as estimate_main
from trainscope.recipes import recipes_help
from trainscope.util.textsafe import one_line, terminal_text
from trainscope.version import __version__
from trainscope.workloads import check_data


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # One line, like every other input error of trainscope.
        print(f"{self.prog}: error: {one_line(message)}", file=sys.stderr)
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
        description="Train a workload (default: scikit-learn digits, offline, under a minute on\n"
        "CPU) and write its run directory. Flags override --config.",
        epilog=recipes_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_run_flags(p_run)
    p_run.add_argument(
        "--resume",
        metavar="RUN_DIR",
        help="continue RUN_DIR in place from its last complete checkpoint (its config.yaml, "
        "with --epochs to train longer)",
    )
    p_run.add_argument("--no-progress", action="store_true", help="no progress bars")
    p_run.add_argument("--quiet", "-q", action="store_true", help="print errors only")
    add_profile_parser(sub)  # your own script, unchanged

    _add_study_parser(sub)
    add_slurm_parser(sub, _add_run_flags, overrides_from_args)

    p_rep = sub.add_parser(
        "report",
        help="tables, plots and an HTML report from a run or study directory",
        description="Build report.md, report.html, tables.tex and plots/ from a run record or "
        "a study directory (no torch needed).",
    )
    p_rep.add_argument("run_dir", metavar="DIR", help="a run directory or a study directory")
    p_rep.add_argument("--out", metavar="DIR", help="where to write (default DIR/report)")
    p_rep.add_argument("--quiet", "-q", action="store_true", help="print errors only")

    p_smp = sub.add_parser(
        "sample",
        help="generate text from a gpt-char run's saved weights",
        description="Rebuild a gpt-char run's model from RUN_DIR (gpt_config.json, vocab.json, "
        "model.safetensors) and print generated text.",
    )
    p_smp.add_argument("run_dir", metavar="RUN_DIR")
    p_smp.add_argument("--prompt", default="\n", help="text to continue (default a newline)")
    p_smp.add_argument("--tokens", type=int, default=500, metavar="N", help="characters (500)")
    p_smp.add_argument(
        "--temperature", type=float, default=0.8, metavar="T", help="0 is greedy (default 0.8)"
    )
    p_smp.add_argument("--top-k", type=int, default=None, metavar="K", help="keep the K likeliest")
    p_smp.add_argument("--seed", type=int, default=0, metavar="N")
    p_smp.add_argument("--device", default="cpu", metavar="DEV", help="auto | cpu | cuda | cuda:N")

    add_doctor_parser(sub)
    add_lab_parser(sub, lambda argv: main(argv))  # main: defined below

    p_cmp = sub.add_parser(
        "compare",
        help="side-by-side table of several runs",
        description="Print and write (compare.md, compare.tex, compare.html) a side-by-side "
        "table of run directories.",
    )
    p_cmp.add_argument("run_dirs", metavar="RUN_DIR", nargs="+")
    p_cmp.add_argument(
        "--out", metavar="DIR", help="default a new runs/compare-<time> (see TRAINSCOPE_RUNS)"
    )
    p_cmp.add_argument("--quiet", "-q", action="store_true", help="print errors only")

    p_q = sub.add_parser(
        "quantize",
        help="INT8 weights of a run's Linear layers (torchao), evaluated against fp32",
        description="Quantize RUN_DIR's trained Linear layers to INT8 (dynamic activation "
        "quantization, torchao), evaluate both on the run's test (else validation) split and "
        "write RUN_DIR/quantize.json; `trainscope report RUN_DIR` shows it.",
    )
    p_q.add_argument("run_dir", metavar="RUN_DIR")
    p_q.add_argument("--device", default="cpu", metavar="DEV", help="auto | cpu | cuda | cuda:N")
    p_q.add_argument("--batch-size", type=int, default=None, metavar="N", help="the run's")
    p_q.add_argument(
        "--repeats", type=int, default=None, metavar="N", help="timed evaluations (auto, 1-5)"
    )
    p_q.add_argument("--quiet", "-q", action="store_true", help="print errors only")

    add_estimate_parser(sub)  # "estimate-memory"
    collectives_cli.add_parser(sub).set_defaults(handler=collectives_cli.main)
    mnist_split.add_parser(sub)  # "data mnist-split"
    return parser


def _add_run_flags(p: argparse.ArgumentParser, skip: tuple[str, ...] = ()) -> None:
    p.add_argument("--config", metavar="YAML", help="config file (e.g. a saved run's config.yaml)")
    groups = {title: p.add_argument_group(title) for title, _ in FLAG_GROUPS}
    for flag, (dest, kwargs) in run_flags().items():
        if flag not in skip:
            group = groups.get(flag_group(dest)) or p
            kwargs = {**kwargs, "help": flag_help(dest, kwargs)}  # its default from the config
            group.add_argument(flag, dest=dest, default=argparse.SUPPRESS, **kwargs)
    p.add_argument(
        "--set",
        dest="sets",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="any config key, e.g. --set train.lr=0.1 (YAML value syntax)",
    )


def _add_study_parser(sub: Any) -> None:
    p_study = sub.add_parser(
        "study",
        help="repeat runs under several settings and report the comparison",
        description="Run a study: a list of run configurations x repeats (a warm-up run first, "
        "discarded), then build its report. Rerunning it with the same --out resumes it: "
        "completed runs are kept.",
    )
    kinds = p_study.add_subparsers(dest="study", metavar="NAME", parser_class=_Parser)
    fresh_by_default = [n for n, e in registry.STUDIES.items() if e.fresh_process]
    for name, entry in registry.STUDIES.items():
        p = kinds.add_parser(name, help=entry.help, description=entry.help)
        _add_run_flags(p, skip=("--out", "--overwrite", *entry.replaces))
        p.add_argument(
            "--out", metavar="DIR", help="study directory (default runs/studies/NAME-<time>)"
        )
        p.add_argument("--overwrite", action="store_true", help="redo every run of --out")
        p.add_argument("--repeats", type=int, default=3, metavar="N", help="default 3")
        p.add_argument(
            "--remeasure",
            type=int,
            default=None,
            metavar="N",
            help="run a repeat measured under other load again, up to N more times (default "
            "2, or TRAINSCOPE_REMEASURE; 0: only leave it out of the comparisons)",
        )
        p.add_argument(
            "--warmup",
            action=argparse.BooleanOptionalAction,
            default=True,
            help="one discarded warm-up run first (default on)",
        )
        p.add_argument("--no-report", action="store_true", help="skip building the report")
        p.add_argument(
            "--dry-run", action="store_true", help="list the planned runs and exit (runs nothing)"
        )
        p.add_argument("--quiet", "-q", action="store_true", help="print errors only")
        p.add_argument(
            "--fresh-processes",
            action=argparse.BooleanOptionalAction,
            default=None,
            help="run every configuration in a process of its own, so setup time and peak "
            "memory are each run's own (default on for "
            + ", ".join(fresh_by_default)
            + "; off for the others: loader's many short runs, and studies whose figures "
            "are each run's own anyway)",
        )
        for flag in entry.flags:  # the study's own flags, from its registry entry
            kwargs = dict(flag.kwargs)
            kwargs["help"] = help_with_default(kwargs.get("help"), kwargs.get("default"))
            p.add_argument(*flag.names, **kwargs)
        add_script_arguments(p)


_EXPONENT_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)[eE][+-]?\d+")


def overrides_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The dotted config overrides a user typed (flags and --set)."""
    out = {dest: getattr(args, dest) for dest, _ in run_flags().values() if hasattr(args, dest)}
    for item in args.sets:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"--set expects KEY=VALUE, got {show(item)}")
        try:
            # Bounded like a config file: no aliases (a "billion laughs" value), no deep
            # nesting, no oversized text.
            value = safe_load_yaml(raw, f"--set {key}")
        except yaml.YAMLError:
            raise ConfigError(f"--set {key}: cannot parse value {show(raw)}") from None
        if isinstance(value, str) and _EXPONENT_NUMBER.fullmatch(value):
            value = float(value)  # YAML 1.1 reads 3e-3 (no dot) as a string
        out[key] = value
    return out


def cmd_run(args: argparse.Namespace) -> int:
    """``trainscope run``."""
    from trainscope.launch.cluster import adopt_scheduler, requeued_start
    from trainscope.launch.launcher import run_or_launch
    from trainscope.train.console import RunConsole

    overrides = overrides_from_args(args)
    config = args.config
    if args.resume is None and overrides.get("dist.requeue"):
        start = requeued_start(overrides.get("out"))
        if start == "completed":  # a job requeued once more after its run finished
            if not args.quiet:
                print(f"the run in {overrides['out']} has completed: nothing left to do")
            return 0
        if start == "resume":
            args.resume = overrides["out"]
        elif start == "again":  # stopped before its first checkpoint: start it over
            overrides["overwrite"] = True
    if args.resume is not None:
        config = _resume_config(args.resume, overrides, config)
    cfg = resolve(config, overrides)  # validated before any import of torch
    deletion_only_from_command_line(cfg, overrides, config)
    refuse_muon_flags_without_muon(cfg, overrides)
    check_data(cfg.workload)  # the data folder too: before the run folder and torch
    if args.no_progress:
        cfg.runtime.progress = False
    cfg = adopt_scheduler(cfg)  # under srun or in a PyTorchJob pod: the scheduler's rank

    console = RunConsole(enabled=not args.quiet, progress=cfg.runtime.progress)
    extra = ["--quiet"] * args.quiet + ["--no-progress"] * args.no_progress
    outcome = run_or_launch(cfg, console, extra_args=extra, own_process=True)
    if outcome.error is not None:
        raise TrainscopeError(outcome.error)
    ended = outcome.summary or {}
    error = str(ended.get("error") or "")
    if outcome.code and ended.get("status") == "failed" and error:
        # A run that ended failed without raising (its last metrics lines refused by a
        # full disk) says why in one line too; a stall's verdict has said it already.
        if not error.startswith("stalled:"):
            raise TrainscopeError(error)
    return outcome.code


def _resume_config(run_dir: str, overrides: dict[str, Any], config: str | None) -> str:
    """``run --resume RUN_DIR``: the run's own config.yaml (or --config), continued in
    RUN_DIR; the flags given with it are checked against the checkpoint when it loads."""
    if "out" in overrides and Path(overrides["out"]) != Path(run_dir):
        raise ConfigError("--resume continues RUN_DIR in place: leave out --out")
    saved = Path(run_dir) / "config.yaml"
    if config is None and not saved.is_file():
        raise ConfigError(f"--resume {run_dir}: not a run directory (no config.yaml there)")
    overrides.update(out=run_dir, resume=True)
    return config or str(saved)


def cmd_report(args: argparse.Namespace) -> int:
    """``trainscope report DIR``: a run's or a study's report."""
    from trainscope.records.study_dir import is_study_dir
    from trainscope.reports.run_report import build_run_report, print_report
    from trainscope.reports.study_report import build_study_report, print_study_report

    if is_study_dir(args.run_dir):
        study_report = build_study_report(args.run_dir, args.out)
        if not args.quiet:
            print_study_report(study_report)
        return 0
    report = build_run_report(args.run_dir, args.out)
    if not args.quiet:
        print_report(report)
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    """``trainscope compare RUN_A RUN_B ...``."""
    from trainscope.reports.compare import build_comparison, print_comparison

    comparison = build_comparison(args.run_dirs, args.out)  # None: a new folder
    if not args.quiet:
        print_comparison(comparison)
    return 0


def cmd_quantize(args: argparse.Namespace) -> int:
    """``trainscope quantize RUN_DIR``."""
    from trainscope.tools.quantize import format_quantize, quantize_run

    result = quantize_run(
        args.run_dir, device=args.device, batch_size=args.batch_size, repeats=args.repeats
    )
    if not args.quiet:
        for line in format_quantize(result):
            print(terminal_text(line))
        print(terminal_text(f"wrote {Path(args.run_dir) / 'quantize.json'}"))
    return 0


def _estimate_memory(args: argparse.Namespace) -> int:
    """``trainscope estimate-memory``: see :mod:`trainscope.estimate.cli`."""
    return estimate_main(args)


def cmd_sample(args: argparse.Namespace) -> int:
    """``trainscope sample RUN_DIR``."""
    from trainscope.tools.sample import check_settings, sample_from_run

    # Checked here too, so that the messages name the flags the user typed.
    check_settings(args.tokens, args.temperature, args.top_k, args.seed, args.device, cli=True)
    text = sample_from_run(
        args.run_dir,
        prompt=args.prompt,
        max_new_tokens=args.tokens,
        temperature=args.temperature,
        top_k=args.top_k,
        seed=args.seed,
        device=args.device,
    )
    # The characters come from the run's vocabulary (vocab.json: record text, perhaps
    # someone else's): on a terminal, control characters are shown, not obeyed. Piped to
    # a file, the text is written as generated.
    print(terminal_text(text, newlines=True) if sys.stdout.isatty() else text)
    return 0


def cmd_study(args: argparse.Namespace) -> int:
    """``trainscope study NAME``: plan, execute (resumably), report."""
    from trainscope.launch.launcher import run_any
    from trainscope.reports.study_report import build_study_report, print_study_report
    from trainscope.studies.base import execute

    if args.study is None:
        raise ConfigError("study needs a NAME: " + ", ".join(registry.STUDIES))
    from trainscope.runtime.scheduler import slurm_job_id

    slurm_job_id(os.environ)  # its runs may ask scontrol about the job: refused up front
    entry = registry.STUDIES[args.study]
    script = wants_script(args)
    if script:  # the user's own script, each configuration injected
        plan = script_study_plan(args, entry, overrides_from_args(args))
    else:
        refuse_script_flags(args)
        plan = _plan_study(args, entry)
    if args.dry_run:
        _print_plan(plan)
        return 0
    from trainscope.records.study_dir import default_study_out

    out = args.out or default_study_out(args.study)

    def say(text: str) -> None:
        if not args.quiet:  # run names and errors are record text: shown, never obeyed
            print(terminal_text(text), file=sys.stderr)

    run_fn = None
    fresh = entry.fresh_process if args.fresh_processes is None else args.fresh_processes
    fresh = fresh or script  # a script's runs are processes of their own, always
    # Part of the plan: the report says how the runs were executed and what that implies.
    plan.options["execution"] = "process per run" if fresh else "one process"
    if fresh and not script:
        import functools

        run_fn = functools.partial(run_any, fresh_process=True)
    if entry.adaptive is not None:  # a search: later runs follow from earlier results
        from trainscope.studies.base import execute_adaptive

        more = registry.load(entry.adaptive)
        result = execute_adaptive(plan, out, more, overwrite=args.overwrite, say=say,
                                  run_fn=run_fn, remeasure=args.remeasure)  # fmt: skip
    else:
        result = execute(plan, out, overwrite=args.overwrite, say=say, run_fn=run_fn,
                         remeasure=args.remeasure)  # fmt: skip
    say(
        f"study {args.study}: {len(result.executed)} run(s) executed, "
        f"{len(result.skipped)} kept from before, {len(result.failed)} failed -> {out}"
    )
    if not args.no_report:
        report = build_study_report(out)
        if not args.quiet:
            print_study_report(report)
    return 1 if result.failed else 0


def _plan_study(args: argparse.Namespace, entry: registry.StudyEntry) -> Any:
    """The study's plan: the run flags as its base config, its own flags as the planner's
    options (through its registry hook), every configuration checked before any runs."""
    from trainscope.studies.base import positive

    overrides = overrides_from_args(args)
    refuse_what_the_study_sets(args.study, overrides)
    options: dict[str, Any] = {"repeats": positive("repeats", args.repeats), "warmup": args.warmup}
    notes: list[str] = []
    # A study that reads run flags from a file of its own (time-to-target's recipes)
    # parses them with the run command's own flags.
    args.parse_run_flags = _run_flags_parser(args.study)
    if entry.options is not None:  # it may move overrides it reads itself (--nproc)
        own, notes = registry.load(entry.options)(args, overrides)
        options.update(own)
    for note in notes:
        if not args.quiet:  # e.g. a cost model fitted on another world size
            print(f"trainscope: note: {terminal_text(note)}", file=sys.stderr)
    cfg = resolve(args.config, overrides)
    check_data(cfg.workload)
    base = {**cfg.to_dict(), "out": None, "overwrite": False, "resume": False}
    from trainscope.runtime.device import resolve_device

    return registry.load(entry.planner)(base, resolve_device(cfg.runtime.device), **options)


def _run_flags_parser(where: str) -> Any:
    """``"--lr 0.002 --batch-size 128"`` -> the dotted overrides those run flags mean."""

    def parse(text: str) -> dict[str, Any]:
        parser = _Parser(prog=f"trainscope study {where} --recipes", add_help=False)
        _add_run_flags(parser)
        try:
            words = shlex.split(text)
        except ValueError as e:
            raise ConfigError(f"recipe flags {show(text)}: {e}") from None
        return overrides_from_args(parser.parse_args(words))

    return parse


def _print_plan(plan: Any) -> None:
    """``study NAME --dry-run``: one line per planned run, in execution order."""
    from trainscope.studies.base import execution_order, plan_line

    print(terminal_text(plan_line(plan)))
    for r in execution_order(plan.runs):
        if not r.applicable and (r.warmup or r.repeat != 1):
            continue
        what = ", ".join(f"{k}={v}" for k, v in r.overrides.items()) or "the base config"
        if "script" in plan.base_config:  # a script's configuration: its --inject words
            what = " ".join(f"--inject {k.removeprefix('script.inject.')}={v}"
                            for k, v in r.overrides.items()) or "the script as it is"  # fmt: skip
        state = "" if r.applicable else f"  (not applicable: {r.reason})"
        if r.labels.get("budget_kept") is False:
            budget = plan.options.get("core_budget")
            state += f"  (not within the core budget of {budget}: compared in no finding)"
        print(terminal_text(f"  {r.id}: {what}{state}"))


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script; returns the exit status.

    Every way a command ends is one line on stderr (or, in a process a trainscope
    launcher started, a note the launcher turns into that one line): an input error, an
    unexpected error, Ctrl-C, or SIGTERM/SIGHUP/SIGQUIT, which end a command as Ctrl-C
    does (see :mod:`trainscope.runtime.signals`).
    """
    from trainscope.runtime.signals import signals_end_runs
    from trainscope.train.failures import machine_cause

    parser = build_parser()
    words = list(sys.argv[1:] if argv is None else argv)
    if words[:1] == ["profile"]:  # the script's own command line is not parsed here
        own, script = split_profile_argv(words[1:])
        args, extras = parser.parse_known_args(["profile", *own])
        args.target = script
    elif words[:1] in (["study"], ["lab"]) and "--" in words:  # of a script: its command
        cut = words.index("--")
        args, extras = parser.parse_known_args(words[:cut])
        args.script_command = words[cut + 1 :]
    else:
        args, extras = parser.parse_known_args(words)
    if extras:
        _refuse_extras(parser, args, extras)
    # --threads auto reads the other load from here to the run (a window that costs no
    # wait); imported after parsing, so that --help loads no more than the parsers.
    from trainscope.runtime.threads import note_entry

    note_entry()
    if args.command is None:
        parser.print_help()
        return 2
    handlers = {
        "run": cmd_run,
        "report": cmd_report,
        "study": cmd_study,
        "compare": cmd_compare,
        "sample": cmd_sample,
        "quantize": cmd_quantize,
        "estimate-memory": _estimate_memory,
    }
    with warnings.catch_warnings():
        warnings.showwarning = _show_warning
        if getattr(args, "quiet", False):
            warnings.simplefilter("ignore")  # -q: errors only (and the launched workers too)
            # Libraries' own log lines too (torchao's "Failed to load ...", torch's
            # _pytree deprecation notes when transformers imports them): errors only.
            logging.disable(logging.WARNING)
        try:
            with signals_end_runs():
                return handlers.get(args.command, getattr(args, "handler", None))(args)
        except ConfigError as e:
            _debug_cause(e)
            return _end(f"error: {e}", 2)
        except TrainscopeError as e:
            _debug_cause(e)
            return _end(f"error: {e}", 1)
        except Terminated as e:
            return _end(str(e), 128 + e.signum, kind="terminated")
        except KeyboardInterrupt:
            return _end("interrupted", 130, kind="interrupted")
        except BrokenPipeError:  # e.g. `trainscope sample RUN | head`: the reader left
            sys.stderr.close()
            return 0
        except Exception as e:
            if os.environ.get("TRAINSCOPE_DEBUG"):
                raise
            if cause := machine_cause(e):
                return _end(f"error: {cause}", 1)
            return _end(
                f"internal error: {type(e).__name__}: {e} "
                "(set TRAINSCOPE_DEBUG=1 for the traceback)",
                1,
            )
        finally:
            logging.disable(logging.NOTSET)  # main() called in a process that goes on


def _refuse_extras(parser: argparse.ArgumentParser, args: argparse.Namespace,
                   extras: list[str]) -> NoReturn:  # fmt: skip
    """Words no command takes: argparse's one line, or, for a script given to ``run``,
    how a script is measured today."""
    script = next((w for w in extras if not w.startswith("-")), None)
    if args.command == "run" and script is not None:
        parser.error(
            f"run takes no script ({script}): measure a script as it is with `trainscope "
            f"profile -- {script}`, or train it in trainscope's loop through a workload "
            "factory, --workload module:factory (docs/workloads.md)"
        )
    parser.error(f"unrecognized arguments: {' '.join(extras)}")


def _debug_cause(e: BaseException) -> None:
    """With TRAINSCOPE_DEBUG set, an error that explains another (a user's factory that
    raised, a full disk) shows the traceback of what it explains."""
    if os.environ.get("TRAINSCOPE_DEBUG") and e.__cause__ is not None:
        raise e


def _end(message: str, code: int, kind: str = "error") -> int:
    """Print ``trainscope: MESSAGE`` as one line (or leave it for the launcher)."""
    from trainscope.records.launch_outcomes import report_end

    text = message.removeprefix("error: ")
    if not report_end(text, kind):
        print(f"trainscope: {one_line(message)}", file=sys.stderr)
    return code


_python_showwarning = warnings.showwarning


def _show_warning(message: Warning | str, category: type[Warning], *args: Any, **kw: Any) -> None:
    from trainscope.records.run_dir import RecordWarning

    if not issubclass(category, RecordWarning):
        return _python_showwarning(message, category, *args, **kw)
    # Part of a record was left out: one line that says so, no source line.
    print(f"trainscope: warning: {one_line(str(message))}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
