"""``trainscope lab``: the parser here; the lab (:mod:`trainscope.lab`) is imported when
the command runs, so ``--help`` does not load it."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainscope.util.textsafe import terminal_text

if TYPE_CHECKING:
    from trainscope.lab.chapters import Chapter

HELP = "one document answering the classic questions of efficient training, measured here"


def add_parser(sub: Any, run_command: Callable[[list[str]], int]) -> None:
    """Add ``lab`` to the command line's sub-commands; ``run_command(argv)`` is the
    command line's own entry point, which runs each chapter's ``trainscope study``."""
    p = sub.add_parser(
        "lab",
        help=HELP,
        description="Run (or reuse) the study behind each chapter and write one document "
        "(Markdown, HTML, the LaTeX tables): each chapter's question, its short answer from "
        "the study's findings (noise rule: median, spread, n), the measurement, the command "
        "that reproduces it and the records it comes from. Rerun the same command to "
        "continue an interrupted lab.",
    )
    p.add_argument("--quick", action="store_true", help="small workloads, few repeats")
    p.add_argument(
        "--only", metavar="LIST", help="chapter numbers or names, e.g. 2,5 or precision,workers "
        "(default all)",
    )  # fmt: skip
    p.add_argument(
        "--from", dest="from_dirs", action="append", default=[], metavar="DIR",
        help="reuse this study folder for the chapter that measures with its kind "
        "(repeatable)",
    )  # fmt: skip
    p.add_argument("--data", metavar="DIR", help="a folder holding tinyshakespeare/, mnist/, "
                   "sst2/ (as ../shared/data): the chapters that need them")  # fmt: skip
    p.add_argument("--out", metavar="DIR", default="runs/lab", help="default runs/lab")
    p.add_argument(
        "--script", metavar="FILE",
        help="the lab of your own script: the chapters it answers (where its time goes, "
        "workers, precision, activation memory) measured on it unchanged, the others said "
        "to need trainscope's workloads; give its arguments after --: trainscope lab -- "
        "train.py --lr 0.1",
    )  # fmt: skip
    p.add_argument("--threads", metavar="N", help="with a script: torch's threads in every "
                   "run (default: the usable cores)")  # fmt: skip
    p.set_defaults(script_command=[])
    p.add_argument("--quiet", "-q", action="store_true", help="print errors only")
    p.set_defaults(handler=cmd_lab, run_command=run_command)


def cmd_lab(args: argparse.Namespace) -> int:
    """Measure the chapters, then write the document; where it is, on stdout."""
    from trainscope.lab.document import build_lab_document
    from trainscope.lab.runner import run_lab

    chapters = only_chapters(args.only)
    command = _script_command(args)
    if command is not None:
        from trainscope.lab.script_chapters import script_chapters

        chosen = {c.number for c in chapters}
        chapters = [c for c in script_chapters(command, args.threads) if c.number in chosen]
    elif args.threads is not None:
        from trainscope.errors import ConfigError

        raise ConfigError("--threads applies to a lab of a script (--script FILE)")

    def say(text: str) -> None:
        if not args.quiet:
            print(terminal_text(text), file=sys.stderr)

    result = run_lab(Path(args.out), chapters, quick=args.quick, data_root=args.data,
                     from_dirs=args.from_dirs, run_study=args.run_command, say=say)  # fmt: skip
    made = build_lab_document(result, chapters)
    for state in result.states:
        say(f"chapter {state.number}: {state.status}"
            + (f" ({state.reason})" if state.reason else ""))  # fmt: skip
    for problem in made.problems:
        print(terminal_text(f"trainscope lab: {problem}"), file=sys.stderr)
    print(terminal_text(f"lab written to {made.files[0].parent} in {result.seconds:.0f} s"))
    return 1 if any(s.status == "failed" for s in result.states) else 0


def _script_command(args: argparse.Namespace) -> list[str] | None:
    """The script a lab of a script measures (``[FILE, *ARGS]``), checked; None: none."""
    from trainscope.errors import ConfigError

    words = list(args.script_command)
    if args.script and words:
        raise ConfigError("give the script once: --script FILE, or the command after --")
    words = [args.script] if args.script else words
    if not words:
        return None
    if words[0] != "-m" and not Path(words[0]).is_file():
        raise ConfigError(f"{words[0]}: no such script")
    if words[0] == "-m" and len(words) < 2:
        raise ConfigError("-m needs a module name: trainscope lab -- -m MODULE")
    return words


def only_chapters(text: str | None) -> list[Chapter]:
    """``--only 2,5`` or ``--only precision,workers`` -> those chapters, in order (None:
    every chapter); anything else is one line listing the chapters. Only ASCII digits are
    numbers: ``str.isdigit`` also takes "²", which ``int`` refuses."""
    from trainscope.errors import ConfigError
    from trainscope.lab.chapters import all_chapters
    from trainscope.util.checks import show

    if text is None:
        return list(all_chapters())
    chapters = all_chapters()
    by_key = {str(c.number): c for c in chapters} | {c.slug: c for c in chapters}
    listed = ", ".join(f"{c.number} {c.slug}" for c in chapters)
    chosen: dict[int, Chapter] = {}
    for part in (p.strip() for p in str(text).split(",")):
        number = part.isascii() and part.isdigit() and len(part) < 10
        key = str(int(part)) if number else part  # "02" is chapter 2
        if part and key not in by_key:
            raise ConfigError(f"--only: {show(part)} is not a chapter; the chapters are {listed}")
        if part:
            chosen[by_key[key].number] = by_key[key]
    if not chosen:
        raise ConfigError(f"--only: name at least one chapter: {listed}")
    return [chosen[n] for n in sorted(chosen)]
