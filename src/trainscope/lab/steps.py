"""What a chapter made of several commands (not one study) is given and keeps.

A maker runs its chapter's trainscope commands (through the command line's own entry
point, as the lab runs studies) into the chapter's folder, step by step: a step whose
output is already there is not run again, so an interrupted lab continues. Its section
builder reads only that folder's records back. The makers' registry is
:mod:`trainscope.lab.makers`.
"""

from __future__ import annotations

import contextlib
import io
import json
import shlex
import signal
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from trainscope.config import available_cpus
from trainscope.errors import Terminated, TrainscopeError
from trainscope.records.jsonio import MAX_RECORD_JSON_BYTES, atomic_write_json, read_json_object
from trainscope.render.document import Document
from trainscope.reports.section import Section
from trainscope.runtime.threads import LoadReading

STEPS_FILE = "chapter.json"
COMMAND_LOAD = "lab-load.json"
"""The other load beside a chapter's command (``collectives``), whose runs record none."""


def stopped_by(code: int) -> BaseException | None:
    """What stopped a command that exited with ``code``: Ctrl-C (130) or an ending signal
    (128 + SIGTERM, SIGHUP or SIGQUIT), to raise again so that the lab stops too; else
    None. (trainscope's entry point turns both into an exit status.)"""
    if code == 130:
        return KeyboardInterrupt()
    if code - 128 in (signal.SIGTERM, signal.SIGHUP, getattr(signal, "SIGQUIT", -1)):
        return Terminated(code - 128)
    return None


@dataclass
class MakeContext:
    """What a maker is given: its folder, the budget, the data and how to run commands."""

    folder: Path
    quick: bool
    data_root: str | None
    run_command: Callable[[list[str]], int]
    say: Callable[[str], None] = lambda _: None
    commands: list[str] = field(default_factory=list)
    """The command lines it ran (or found done), for the chapter's "Reproduce"."""

    def has(self, name: str) -> bool:
        """Whether ``--data`` holds the folder ``name`` (for a chapter's optional part)."""
        return self.data_root is not None and (Path(self.data_root) / name).is_dir()

    def data(self, name: str) -> str:
        """The folder ``name`` under ``--data`` (the runner checked that it exists)."""
        return f"{str(self.data_root).rstrip('/')}/{name}"

    def run(
        self, argv: list[str], *, skip: bool, capture: Path | None = None,
        load: Path | None = None,
    ) -> None:  # fmt: skip
        """Run ``trainscope ARGV`` unless ``skip`` (its output is already there); with
        ``capture``, its standard output (a ``--json`` answer) is kept in that file; with
        ``load``, the other load beside the command (a ``cpu`` section, as runs record:
        trainscope.util.load) goes to that file, for a command that times something but
        records no load of its own."""
        self.commands.append("trainscope " + " ".join(shlex.quote(a) for a in argv))
        if skip:
            return
        self.say(f"  {self.commands[-1]}")
        out = io.StringIO()
        with contextlib.redirect_stdout(out) if capture else contextlib.nullcontext():
            with load_beside(load):
                code = self.run_command(argv)
        stop = stopped_by(code)
        if stop is not None:
            raise stop
        if code != 0:
            raise TrainscopeError(f"`{self.commands[-1]}` exited with status {code}")
        if capture is not None:
            capture.write_text(out.getvalue(), encoding="utf-8")


@contextlib.contextmanager
def load_beside(path: Path | None) -> Iterator[None]:
    """Over the block (a command run by the lab, its processes this one's children), the
    cores other processes kept busy, written to ``path`` as the ``cpu`` section runs have
    (trainscope.util.load reads it); nothing where ``path`` is None."""
    start = LoadReading.take(psutil.Process(), None) if path is not None else None
    yield
    if path is not None and start is not None and path.parent.is_dir():
        other = LoadReading.take(psutil.Process(), None).other_since(start)
        atomic_write_json(path, {"cpu": {"other_cores": other, "cores": available_cpus()}})


def read_load(path: Path) -> dict[str, Any] | None:
    """What :func:`load_beside` wrote (None where nothing was)."""
    data = read_json(path) if path.is_file() else None
    return data if isinstance(data, dict) else None


@dataclass(frozen=True)
class Maker:
    """A chapter's ``make(ctx)`` (raises TrainscopeError on a failed step) and its
    ``section(folder, doc, plots) -> Section`` (the document's blocks and findings)."""

    make: Callable[[MakeContext], None]
    section: Callable[[Path, Document, Path], Section]
    needs: Callable[[], str | None] = lambda: None
    """What this machine lacks to make it (a missing extra), or None."""


def record_commands(folder: Path, commands: list[str], status: str) -> None:
    """Keep what a maker ran in its folder's ``chapter.json``."""
    atomic_write_json(folder / STEPS_FILE, {"kind": "trainscope-lab-chapter",
                                             "status": status, "commands": commands})  # fmt: skip


def read_commands(folder: Path) -> list[str]:
    """The commands a maker recorded in ``folder`` (none where it recorded nothing)."""
    path = folder / STEPS_FILE
    if not path.is_file():
        return []
    data = read_json_object(path)
    commands = data.get("commands") if isinstance(data, dict) else None
    return [str(c) for c in commands] if isinstance(commands, list) else []


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def read_json(path: Path) -> Any:
    """A JSON value a step wrote (strict: no NaN), read within the records' size bound;
    TrainscopeError (one line) when it is missing, too large or not JSON."""
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_RECORD_JSON_BYTES + 1)
        if len(raw) > MAX_RECORD_JSON_BYTES:
            raise ValueError(f"larger than {MAX_RECORD_JSON_BYTES >> 20} MiB")
        return json.loads(raw.decode("utf-8"), parse_constant=_no_constant)
    except (OSError, ValueError, RecursionError) as e:
        raise TrainscopeError(f"{path}: not a JSON record ({str(e).splitlines()[0]})") from None


__all__ = ["MakeContext", "Maker", "read_commands", "read_json", "record_commands", "stopped_by"]
