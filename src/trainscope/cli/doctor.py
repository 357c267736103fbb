"""``trainscope doctor RUN_DIR``: what to fix in a run, ranked, from its record alone.

The parser is here; the diagnosis (:mod:`trainscope.diagnosis`) is imported when the command
runs, so ``--help`` does not load it.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from typing import Any

from trainscope.collectives.predict_cli import add_link_flags
from trainscope.util.textsafe import terminal_text

HELP = "what to fix in a run, ranked, with evidence and the fix as a command line"


def add_parser(sub: Any) -> None:
    """Add ``doctor`` to the command line's sub-commands."""
    p = sub.add_parser(
        "doctor",
        help=HELP,
        description="Read RUN_DIR's record (no torch, nothing re-run) and print what to fix, "
        "most important first: what is wrong, the figures it rests on (median, spread, n), "
        "the estimated gain and how it was estimated, and the run's command line with the "
        "changed flags. A healthy run has nothing above minor.",
    )
    p.add_argument("run_dir", metavar="RUN_DIR")
    p.add_argument("--json", action="store_true", help="the findings as a JSON list")
    p.add_argument(
        "--apply",
        action="store_true",
        help="re-run the baseline and each fix for --steps steps, alternated, --repeats "
        "times each (a study: resumable, with a report), and name the best proven fix",
    )
    p.add_argument("--steps", type=int, default=30, help="steps per re-run (default 30)")
    p.add_argument(
        "--repeats",
        type=int,
        default=5,
        help="repeats of each (default 5: from 5 runs the spread is the IQR, not min-max)",
    )
    p.add_argument("--out", metavar="DIR", help="the study's folder (default runs/studies/)")
    p.add_argument(
        "--trust-record-code",
        action="store_true",
        help="with --apply: import the workload factory module (pkg.module:factory) that the "
        "run's config.yaml names, or re-run the script a trainscope profile run recorded; "
        "without it, such a run is refused, as that code is named by the record, not by "
        "your command line",
    )
    p.add_argument("--quiet", "-q", action="store_true", help="print errors only")
    g = p.add_argument_group("what the run must fit and the link its ranks use")
    g.add_argument(
        "--memory-limit",
        metavar="SIZE",
        help="the memory the run must fit in, e.g. 16GiB or 512M (default: its device's)",
    )
    add_link_flags(g)
    p.set_defaults(handler=cmd_doctor)


_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*([KMGT]?)(?:i?B)?", re.IGNORECASE)
MAX_LIMIT = 1 << 50  # 1 PiB: more is a typing error, not a device


def parse_limit(text: str) -> int:
    """``"16GiB"``/``"16G"`` -> bytes (binary units); one clear ConfigError otherwise."""
    from trainscope.errors import ConfigError

    m = _SIZE.fullmatch(text.strip())
    scale = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    size = int(float(m.group(1)) * scale[m.group(2).upper()]) if m else 0
    if not 1 <= size <= MAX_LIMIT:
        raise ConfigError(
            f"--memory-limit {text!r}: write a size such as 16GiB, 512M or 80G (1 B to 1 PiB)"
        )
    return size


def _link(args: argparse.Namespace, run_dir: str) -> tuple[dict[str, Any], str]:
    """The α–β fits the doctor predicts sync with ({} when no link is named)."""
    if not (args.fit or args.interconnect or args.bandwidth or args.latency):
        return {}, ""
    from trainscope.collectives.predict_cli import link_fits
    from trainscope.records.run_dir import load_run

    world = load_run(run_dir).view.world_size
    world = world if world is not None and world >= 2 else 2
    return link_fits(args, world)


def _lines(diagnosis: Any) -> list[str]:
    """The findings as terminal text (record values made safe to print)."""
    head = f"trainscope doctor: {diagnosis.run_dir} ({diagnosis.status}, {diagnosis.steps} steps)"
    out = [head]
    serious = [f for f in diagnosis.findings if f.severity != "minor"]
    if not serious:
        out.append("Nothing to fix beyond the noise: no rule found more than a minor point.")
    for i, f in enumerate(diagnosis.findings, 1):
        out.append(f"{i}. [{f.severity}] {f.rule}: {f.problem}")
        out += [f"   evidence: {e}" for e in f.evidence]
        out.append(f"   estimated gain: {f.gain}")
        out += [f"   note: {n}" for n in f.notes]
        if f.numerics:
            out.append("   changes numerics: compare the loss at the same step")
        if f.command:
            out.append(f"   fix: {f.command}")
        elif not (f.fix and diagnosis.script):
            out.append("   fix: no flag changes it")
    if diagnosis.unread:
        out.append("Could not read (left out of the diagnosis): " + "; ".join(diagnosis.unread))
    return [terminal_text(line) for line in out]


def cmd_doctor(args: argparse.Namespace) -> int:
    """``trainscope doctor RUN_DIR [--json]``."""
    from trainscope.diagnosis import diagnose

    limit = parse_limit(args.memory_limit) if args.memory_limit else None
    fits, where = _link(args, args.run_dir)
    diagnosis = diagnose(args.run_dir, memory_limit_bytes=limit, link_fits=fits, link_where=where)
    if args.apply:
        return _apply(args, diagnosis)
    if args.json:
        json.dump(diagnosis.as_list(), sys.stdout, indent=2, allow_nan=False)
        sys.stdout.write("\n")
    else:
        print("\n".join(_lines(diagnosis)))
    return 0


MAX_STEPS = 100_000
MAX_REPEATS = 100


def _apply(args: argparse.Namespace, diagnosis: Any) -> int:
    """Re-measure the fixes as a study, then report it (or say why nothing compares)."""
    import functools

    from trainscope.config import from_dict
    from trainscope.errors import ConfigError
    from trainscope.launch.launcher import run_any
    from trainscope.records.study_dir import default_study_out
    from trainscope.runtime.device import resolve_device
    from trainscope.studies.base import execute
    from trainscope.studies.doctor import base_config, plan_apply

    if not 1 <= args.steps <= MAX_STEPS or not 1 <= args.repeats <= MAX_REPEATS:
        raise ConfigError(
            f"--steps must be 1..{MAX_STEPS} and --repeats 1..{MAX_REPEATS}, got "
            f"{args.steps} and {args.repeats}"
        )
    if not any(f.fix for f in diagnosis.findings):
        print(_lines(diagnosis)[0] + "\nNo finding has a fix to apply: nothing re-run.")
        return 0
    if diagnosis.script:
        plan = _script_plan(args, diagnosis)
    else:
        cfg = base_config(diagnosis.run_dir, args.steps)
        _refuse_record_code(cfg, diagnosis.run_dir, args.trust_record_code)
        device = resolve_device(from_dict(cfg).runtime.device)
        plan = plan_apply(diagnosis, device, steps=args.steps, repeats=args.repeats)
    plan.options["execution"] = "process per run"  # each fix's memory and start-up its own
    out = args.out or default_study_out("doctor")

    def say(text: str) -> None:
        if not args.quiet:
            print(terminal_text(text), file=sys.stderr)

    _wait_for_quiet(say)
    # a script's re-runs are processes of their own already (studies.script_runs)
    run_fn = None if diagnosis.script else functools.partial(run_any, fresh_process=True)
    execute(plan, out, say=say, run_fn=run_fn)
    return _conclude(out, args.quiet)


def _script_plan(args: argparse.Namespace, diagnosis: Any) -> Any:
    """The re-runs of a ``trainscope profile`` run's script with each fix injected; refused
    in one line where the record names no command, the script changed since, or the
    user has not said to trust the command the record names."""
    from trainscope.errors import ConfigError
    from trainscope.records.run_dir import load_run
    from trainscope.studies.doctor import plan_apply_script

    record = load_run(diagnosis.run_dir)
    summary, source = record.summary, record.view.source
    argv, cwd = source.get("argv"), source.get("cwd")
    from trainscope.records.source import COMMAND_KINDS

    if source.get("kind") not in COMMAND_KINDS or not isinstance(argv, list) or not cwd:
        raise ConfigError(
            f"{diagnosis.run_dir} was measured from inside Python (trainscope.profile() or "
            "a Lightning / Hugging Face integration), not as a command: there is nothing "
            "to re-run; each finding's fix says what to change"
        )
    command = " ".join(str(a) for a in argv)
    if not args.trust_record_code:
        raise ConfigError(
            f"--apply would run `python {command}` in {cwd}, as {diagnosis.run_dir}'s record "
            "names it, not your command line; pass --trust-record-code to re-run it"
        )
    _same_script(source)
    return plan_apply_script(
        diagnosis, summary, summary.get("device") or "cpu", steps=args.steps, repeats=args.repeats
    )


def _same_script(source: dict[str, Any]) -> None:
    """Refuse a script file that changed since it was profiled: the fixes would be
    measured on other code than the findings came from."""
    import hashlib
    from pathlib import Path

    from trainscope.errors import ConfigError

    path, digest = source.get("path"), source.get("sha256")
    if not isinstance(path, str) or not isinstance(digest, str):
        return  # a module run: its file is found again by name, as the first run found it
    try:
        now = hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError as e:
        raise ConfigError(f"{path}: cannot read the script again ({e.strerror or e})") from None
    if now != digest:
        raise ConfigError(
            f"{path} changed since it was profiled: profile it again, then ask the doctor"
        )


QUIET_WAIT_S = 60.0
"""How long ``--apply`` waits for other load to drop before it refuses to judge."""


def _wait_for_quiet(say: Any) -> None:
    """Before any re-run: other load would be measured instead of the fixes. Wait for it
    to drop (up to :data:`QUIET_WAIT_S`), or refuse in one line."""
    from trainscope.errors import TrainscopeError
    from trainscope.runtime.threads import quiet_or_waited

    load = quiet_or_waited(0.0)
    if load is None:
        return
    say(f"other processes keep {load.cores:.1f} cores busy: waiting up to "
        f"{QUIET_WAIT_S:.0f} s for them to finish before re-measuring")  # fmt: skip
    load = quiet_or_waited(QUIET_WAIT_S)
    if load is not None:
        raise TrainscopeError(
            f"doctor --apply: other processes kept {load.cores:.1f} cores busy for "
            f"{QUIET_WAIT_S:.0f} s: the re-runs would measure them, not the fixes; free the "
            "cores and run it again (nothing was re-run)"
        )


def _refuse_record_code(cfg: dict[str, Any], run_dir: Any, trusted: bool) -> None:
    """Refuse to re-run a record whose workload is a factory module, unless trusted: the
    module would be imported because the record names it (it may even sit in the
    record's own folder), not because the user's command line does."""
    from trainscope.errors import ConfigError
    from trainscope.studies.doctor import record_code

    spec = record_code(cfg)
    if spec is None or trusted:
        return
    module = spec.partition(":")[0]
    raise ConfigError(
        f"{run_dir}/config.yaml names the workload {spec!r}: --apply would import module "
        f"{module!r} and run its code, named by the record, not by you; pass "
        "--trust-record-code to re-run it if you trust that code"
    )


def _conclude(out: str, quiet: bool) -> int:
    """The study's report and its exit status: 1, with a line that ``-q`` keeps, where a
    re-run failed; an error, and no verdict, where the failures left nothing compared."""
    from trainscope.errors import TrainscopeError
    from trainscope.records.study_dir import load_study
    from trainscope.reports.study_report import build_study_report, print_study_report
    from trainscope.studies.doctor import failed_runs, nothing_compared

    study = load_study(out)
    failed = failed_runs(study)
    if failed is not None and nothing_compared(study):
        # No report: its verdicts ("keep the run as it was") would rest on no measurement.
        raise TrainscopeError(
            f"doctor --apply: nothing was measured: {failed}; the study is in {out} (run the "
            "same command to redo the failed re-runs)"
        )
    report = build_study_report(out)
    if not quiet:
        print_study_report(report)  # the table, the best proven fix, the report's files
    if any(f.startswith("No verdict") for f in report.findings):
        # Other load came back during the re-runs and never left: no judgement.
        print(terminal_text("trainscope doctor: no verdict: re-runs measured under other "
                            f"load ({out})"), file=sys.stderr)  # fmt: skip
        return 1
    if failed is None:
        return 0
    line = (f"trainscope doctor: {failed}; the study ended {study.status}: the comparison "
            f"rests on the other re-runs ({out})")  # fmt: skip
    print(terminal_text(line), file=sys.stderr)
    return 1
