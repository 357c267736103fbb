"""Running a lab: each chapter's study into the lab's folder, resumably, then the document.

The lab's folder holds ``lab.json`` (what was asked: the chapters, the budget, each
chapter's study folder and state), ``studies/NN-slug/`` (one study per chapter, made by
``trainscope study``: interrupted, the same command continues it) and ``report/`` (the
document). Rerunning the same ``trainscope lab`` command continues where it stopped: a
finished study is read again, not rerun. ``--from DIR`` reuses a study made elsewhere
for the chapter that measures with its kind; nothing in it is changed.
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainscope.errors import ConfigError, Terminated, TrainscopeError
from trainscope.lab.chapters import Chapter
from trainscope.lab.makers import maker
from trainscope.lab.steps import MakeContext, record_commands, stopped_by
from trainscope.records.jsonio import atomic_write_json, read_json_object
from trainscope.records.study_dir import load_study

LAB_FILE = "lab.json"
KIND = "trainscope-lab"


@dataclass
class ChapterState:
    """Where a chapter stands: its study folder, the command that made it, its status."""

    number: int
    status: str
    """measured | reused | not built | needs data | unavailable | failed | interrupted"""
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


def _check_folder(out: Path, quick: bool, data_root: str | None) -> dict[str, Any]:
    """The lab folder's record (a new one for an empty or new folder); refuse a folder
    that holds something else, or a lab made with another budget."""
    record = out / LAB_FILE
    if record.is_file():
        old = read_json_object(record)
        if not isinstance(old, dict) or old.get("kind") != KIND:
            raise ConfigError(f"{record} is not a trainscope lab record")
        if bool(old.get("quick")) != quick:
            was = "with" if old.get("quick") else "without"
            raise ConfigError(
                f"the lab in {out} was made {was} --quick: run the same command to continue "
                "it, or give another --out"
            )
        return old
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ConfigError(f"--out {out} holds other files: give a new or empty folder")
    return {"kind": KIND, "quick": quick, "data": data_root, "chapters": {}}


def _reusable(from_dirs: Sequence[str]) -> dict[str, list[Path]]:
    """``--from`` folders by their study kind, in the order given (two chapters measure
    with ``precision``: the first such folder goes to the first of them)."""
    out: dict[str, list[Path]] = {}
    for d in from_dirs:
        path = Path(d)
        try:
            kind = load_study(path).plan.kind
        except (TrainscopeError, OSError) as e:  # not a study: one line, naming it
            raise ConfigError(f"--from {d}: not a study folder ({e})") from None
        out.setdefault(str(kind), []).append(path)
    return out


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
    record = _check_folder(out, quick, data_root)
    reuse = _reusable(from_dirs)
    out.mkdir(parents=True, exist_ok=True)
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
    argv = [*c.argv(quick, data_root, fit_dir), "--out", str(folder), "-q"]
    command = "trainscope " + " ".join(shlex.quote(a) for a in argv)
    say(f"chapter {c.number}: {c.title}: {command}")
    code = run_study(argv)
    stop = stopped_by(code)
    if stop is not None:
        raise stop
    status = "measured" if code == 0 else "failed"
    reason = None if code == 0 else f"the study exited with status {code}"
    return ChapterState(c.number, status, str(folder), command, reason)


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


__all__ = ["LAB_FILE", "ChapterState", "LabResult", "run_lab"]
