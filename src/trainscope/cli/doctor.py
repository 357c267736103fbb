"""``trainscope doctor RUN_DIR``: what to fix in a run, ranked, from its record alone.

The parser is here; the diagnosis (:mod:`trainscope.diagnosis`) is imported when the command
runs, so ``--help`` does not load it.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

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
    p.set_defaults(handler=cmd_doctor)


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
        out.append(f"   fix: {f.command}" if f.command else "   fix: no flag changes it")
    if diagnosis.unread:
        out.append("Could not read (left out of the diagnosis): " + "; ".join(diagnosis.unread))
    return [terminal_text(line) for line in out]


def cmd_doctor(args: argparse.Namespace) -> int:
    """``trainscope doctor RUN_DIR [--json]``."""
    from trainscope.diagnosis import diagnose

    diagnosis = diagnose(args.run_dir)
    if args.json:
        json.dump(diagnosis.as_list(), sys.stdout, indent=2, allow_nan=False)
        sys.stdout.write("\n")
    else:
        print("\n".join(_lines(diagnosis)))
    return 0
