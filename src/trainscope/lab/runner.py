"""Running a lab: each chapter's study into the lab's folder, resumably, then the document.

The lab's folder holds ``lab.json`` (what was asked: the chapters, the budget, each
chapter's study folder and state), ``studies/NN-slug/`` (one study per chapter, made by
``trainscope study``: interrupted, the same command continues it) and ``report/`` (the
document). Rerunning the same ``trainscope lab`` command continues where it stopped: a
finished study is read again, not rerun. ``--from DIR`` reuses a study made elsewhere
for the chapter that measures with its kind; nothing in it is changed.

The folder is trainscope's by its ownership marker (``.trainscope``, kind ``lab``),
written before anything else in it: a lab killed however (SIGKILL too) is continued by
the same command, and a ``lab.json`` beside no such marker is someone else's, refused.
"""

from __future__ import annotations

import importlib.util
import re
import shlex
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from trainscope.errors import ConfigError, Terminated, TrainscopeError
from trainscope.lab.chapters import Chapter
from trainscope.lab.makers import maker
from trainscope.lab.steps import (
    COMMAND_LOAD,
    MakeContext,
    load_beside,
    record_commands,
    stopped_by,
)
from trainscope.records.jsonio import (
    TMP_PREFIX,
    atomic_write_json,
    read_json_object,
    try_json_object,
)
from trainscope.records.ownership import MARKER, MAX_MARKER_BYTES
from trainscope.records.source import is_script_record
from trainscope.records.study_dir import STUDY_FILE, load_study
from trainscope.util.textsafe import one_line
from trainscope.version import __version__

LAB_FILE = "lab.json"
KIND = "trainscope-lab"
MARKER_KIND = "lab"
"""The kind of the lab folder's ownership marker (records.ownership's ``MARKER`` file,
in its format: the files and folders trainscope writes there)."""
MAX_FROM_BYTES = 16 << 20
"""A ``--from`` study.json larger than this is not read: a chapter's study plans tens of
runs (a few hundred kB at most), and the document reads every run it plans."""
MAX_FROM_RUNS = 2000
"""Nor one that plans more runs than this (the report's tables are per configuration)."""
EXTRAS = {"text": ("transformers", "peft", "tokenizers"), "quant": ("torchao",)}
"""pyproject's optional extras a chapter may need, and the modules each installs."""
NEEDS_EXTRA = {"finetune": "text", "text-cls": "text"}
"""A study kind, or a workload a chapter's flags name, -> the extra its runs import."""


@dataclass
class ChapterState:
    """Where a chapter stands: its study folder, the command that made it, its status."""

    number: int
    status: str
    """measured | reused | not built | elsewhere | needs data | unavailable | failed |
    interrupted"""
    study_dir: str | None = None
    command: str | None = None
    reason: str | None = None


@dataclass
class LabResult:
    """What a lab run produced."""

    out: Path
    quick: bool
    states: list[ChapterState] = field(default_factory=list)
    seconds: float = 0.0


def _lab_marker(out: Path) -> dict[str, Any] | None:
    """The lab folder's ownership marker, if trainscope wrote one (never through a link)."""
    path = out / MARKER
    try:
        if path.is_symlink() or not path.is_file() or path.stat().st_size > MAX_MARKER_BYTES:
            return None
        data = read_json_object(path)
    except (OSError, TrainscopeError):
        return None
    ours = data.get("kind") == MARKER_KIND and data.get("writer") == "trainscope"
    return data if ours else None


def _check_folder(out: Path, quick: bool, data_root: str | None,
                  script: list[str] | None = None) -> dict[str, Any]:  # fmt: skip
    """The lab folder's record (a new one for an empty or new folder, or for a lab killed
    before its first record); refuse a folder that holds something else, a lab.json
    trainscope did not write, or a lab made with another budget or of another script
    (``script``: the command of a lab of a script). Nothing is written."""
    record = out / LAB_FILE
    new = {"kind": KIND, "quick": quick, "data": data_root, "chapters": {}}
    if script is not None:
        new["script"] = script
    if _lab_marker(out) is None:
        if record.exists() or record.is_symlink():
            raise ConfigError(
                f"--out {out} holds a {LAB_FILE} that trainscope did not write (no lab "
                f"marker {MARKER} beside it): give a new or empty folder"
            )
        # A killed atomic write may leave a temporary file of the marker: not the user's.
        if out.exists() and (not out.is_dir() or _foreign(out)):
            raise ConfigError(f"--out {out} holds other files: give a new or empty folder")
        return new
    if not record.is_file():  # killed between its marker and its first record
        return new
    old = read_json_object(record)
    if old.get("kind") != KIND:
        raise ConfigError(f"{record} is not a trainscope lab record")
    if bool(old.get("quick")) != quick:
        was = "with" if old.get("quick") else "without"
        raise ConfigError(
            f"the lab in {out} was made {was} --quick: run the same command to continue "
            "it, or give another --out"
        )
    if old.get("script") != script:
        raise ConfigError(
            f"the lab in {out} was made of "
            + (f"the command {' '.join(map(str, old['script']))}" if old.get("script")
               else "trainscope's workloads")
            + ": run the same command to continue it, or give another --out"
        )  # fmt: skip
    return old


def _foreign(out: Path) -> bool:
    """Whether ``out`` holds anything but leftovers of trainscope's atomic writes."""
    return any(not p.name.startswith(TMP_PREFIX) for p in out.iterdir())


def _claim(out: Path, record: dict[str, Any]) -> None:
    """Make ``out`` the lab's: its marker first (before any file of the lab), then its
    record, so that whatever ends this command, the same command continues it."""
    out.mkdir(parents=True, exist_ok=True)
    if _lab_marker(out) is None:
        marker = {"kind": MARKER_KIND, "writer": "trainscope", "version": __version__,
                  "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                  "files": [LAB_FILE], "dirs": ["studies", "report"]}  # fmt: skip
        atomic_write_json(out / MARKER, marker)
    atomic_write_json(out / LAB_FILE, record)


def _bounded_study(d: str) -> None:
    """Refuse a ``--from`` study too large for the lab to read (one line naming it)."""
    path = Path(d) / STUDY_FILE
    try:
        size = path.stat().st_size
    except OSError:
        return  # load_study says what is missing
    if size > MAX_FROM_BYTES:
        raise ConfigError(
            f"--from {d}: its {STUDY_FILE} is larger than {MAX_FROM_BYTES >> 20} MiB, more "
            "than the lab reads (a chapter's study plans tens of runs)"
        )
    try:
        runs = read_json_object(path).get("runs")
    except TrainscopeError as e:
        raise ConfigError(f"--from {d}: not a study folder ({e})") from None
    if isinstance(runs, list) and len(runs) > MAX_FROM_RUNS:
        raise ConfigError(
            f"--from {d}: its {STUDY_FILE} lists {len(runs):,} planned runs, more than the "
            f"{MAX_FROM_RUNS:,} the lab reads"
        )


def _refuse_script_run(d: str) -> None:
    """A run of the user's own script given to ``--from``: what reads it instead."""
    summary = try_json_object(Path(d) / "summary.json")
    if summary is not None and is_script_record(summary):
        raise ConfigError(
            f"--from {d}: a run of trainscope profile, not a study folder: the lab's "
            f"chapters measure its reference workloads; for the script's own write-up use "
            f"trainscope report {d} (stage table, memory, LaTeX tables) and trainscope doctor {d}"
        )


def _reusable(from_dirs: Sequence[str]) -> dict[str, list[Path]]:
    """``--from`` folders by their study kind, in the order given (two chapters measure
    with ``precision``: the first such folder goes to the first of them)."""
    out: dict[str, list[Path]] = {}
    for d in from_dirs:
        path = Path(d)
        _refuse_script_run(d)
        _bounded_study(d)
        try:
            kind = load_study(path).plan.kind
        except (TrainscopeError, OSError) as e:  # not a study: one line, naming it
            raise ConfigError(f"--from {d}: not a study folder ({e})") from None
        out.setdefault(str(kind), []).append(path)
    return out


def missing_extra(extra: str) -> str | None:
    """What is missing of an optional extra, with the command that installs it, or None."""
    missing = [m for m in EXTRAS[extra] if importlib.util.find_spec(m) is None]
    if not missing:
        return None
    verb = "is" if len(missing) == 1 else "are"
    return (
        f"needs the {extra} extra ({', '.join(missing)} {verb} not installed): "
        f"pip install 'trainscope[{extra}]'"
    )


def _study_needs(c: Chapter, quick: bool) -> str | None:
    """What this machine lacks for a study chapter (an extra its study or workload
    imports), or None: said before the study runs, as a maker's chapter says it."""
    argv = c.argv(quick, None)
    named = [str(c.study), *(argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "--workload")]
    for what in named:
        extra = NEEDS_EXTRA.get(what)
        lacks = missing_extra(extra) if extra else None
        if lacks:
            return lacks
    return None


_INSTALL = re.compile(r"pip install 'trainscope\[(\w+)\]'")


def _failure_cause(folder: Path, code: int) -> str:
    """Why a chapter's study failed: where a run failed for a missing optional package
    (its error names the extra to install), that extra and its command; else the study's
    exit status."""
    status = f"the study exited with status {code}"
    try:
        failed = load_study(folder).failed()
    except (TrainscopeError, OSError):
        return status  # it failed before writing its plan: its own line said why
    for _, error in failed:
        m = _INSTALL.search(error)
        if m:
            extra = m.group(1)
            return f"needs the {extra} extra: pip install 'trainscope[{extra}]' ({one_line(error)})"
    return status


def run_lab(
    out: Path, chapters: Sequence[Chapter], *, quick: bool, data_root: str | None,
    from_dirs: Sequence[str], run_study: Callable[[list[str]], int],
    say: Callable[[str], None] = lambda _: None,
) -> LabResult:  # fmt: skip
    """Measure every chapter in ``chapters`` (``run_study(argv)`` runs ``trainscope
    study ...``), keeping ``out/lab.json`` up to date after each."""
    t0 = time.perf_counter()
    if data_root is not None and not Path(data_root).is_dir():
        raise ConfigError(f"--data {data_root}: not a folder")
    script = next((list(c.after) for c in chapters if c.after), None)
    record = _check_folder(out, quick, data_root, script)
    reuse = _reusable(from_dirs)
    _claim(out, record)
    result = LabResult(out, quick)
    # The collectives first: their α–β fit predicts the communication of later chapters.
    fit_dir: str | None = None
    for c in sorted(chapters, key=lambda c: (c.study != "collectives", c.number)):
        try:
            state = _one_chapter(c, out, quick, data_root, reuse, run_study, say, fit_dir)
        except (KeyboardInterrupt, Terminated):  # said in lab.json, then the lab stops
            stopped = ChapterState(c.number, "interrupted", reason="stopped by Ctrl-C or a "
                                   "signal: run the same command to continue")  # fmt: skip
            record["chapters"][str(c.number)] = stopped.__dict__
            atomic_write_json(out / LAB_FILE, record)
            raise
        if c.study == "collectives" and state.status in ("measured", "reused"):
            fit_dir = state.study_dir
        record["chapters"][str(c.number)] = state.__dict__
        atomic_write_json(out / LAB_FILE, record)
        result.states.append(state)
    result.states.sort(key=lambda s: s.number)
    result.seconds = time.perf_counter() - t0
    return result


def _one_chapter(
    c: Chapter, out: Path, quick: bool, data_root: str | None, reuse: dict[str, list[Path]],
    run_study: Callable[[list[str]], int], say: Callable[[str], None], fit_dir: str | None,
) -> ChapterState:  # fmt: skip
    if c.elsewhere is not None:
        return ChapterState(c.number, "elsewhere", reason=c.elsewhere)
    if c.study is None and c.maker is None:
        return ChapterState(c.number, "not built", reason="not measured by this version")
    if c.study is not None and reuse.get(c.study):
        return ChapterState(c.number, "reused", str(reuse[c.study].pop(0)), reason="--from")
    missing = [d for d in c.data if data_root is None or not (Path(data_root) / d).is_dir()]
    if missing:
        where = "--data DIR (not given)" if data_root is None else f"--data {data_root}"
        folders = ", ".join(f"{d}/" for d in missing)
        return ChapterState(c.number, "needs data", reason=f"needs {folders} under {where}")
    folder = out / "studies" / f"{c.number:02d}-{c.slug}"
    if c.maker is not None:
        return _made_chapter(c, folder, quick, data_root, run_study, say)
    lacks = _study_needs(c, quick)
    if lacks:
        return ChapterState(c.number, "unavailable", reason=lacks)
    argv = [*c.argv(quick, data_root, fit_dir), "--out", str(folder), "-q"]
    argv += ["--", *c.after] if c.after else []  # the user's script, last
    command = "trainscope " + " ".join(shlex.quote(a) for a in argv)
    say(f"chapter {c.number}: {c.title}: {command}")
    with load_beside(folder / COMMAND_LOAD if c.command else None):  # a command's runs
        code = run_study(argv)  # record no load of their own (a study's do)
    stop = stopped_by(code)
    if stop is not None:
        raise stop
    if code == 0:
        return ChapterState(c.number, "measured", str(folder), command)
    return ChapterState(c.number, "failed", str(folder), command, _failure_cause(folder, code))


def _made_chapter(
    c: Chapter, folder: Path, quick: bool, data_root: str | None,
    run_command: Callable[[list[str]], int], say: Callable[[str], None],
) -> ChapterState:  # fmt: skip
    """A maker's chapter: its commands, each skipped where its output is already there."""
    m = maker(str(c.maker))
    lacks = m.needs()
    if lacks:
        return ChapterState(c.number, "unavailable", reason=lacks)
    say(f"chapter {c.number}: {c.title}")
    folder.mkdir(parents=True, exist_ok=True)
    ctx = MakeContext(folder, quick, data_root, run_command, say)
    try:
        m.make(ctx)
    except TrainscopeError as e:
        record_commands(folder, ctx.commands, "failed")
        return ChapterState(c.number, "failed", str(folder), "\n".join(ctx.commands), str(e))
    record_commands(folder, ctx.commands, "measured")
    return ChapterState(c.number, "measured", str(folder), "\n".join(ctx.commands))


__all__ = [
    "LAB_FILE",
    "MAX_FROM_BYTES",
    "MAX_FROM_RUNS",
    "ChapterState",
    "LabResult",
    "missing_extra",
    "run_lab",
]
