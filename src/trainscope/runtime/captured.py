"""What third-party libraries print while they are imported goes to the run's log.

A text workload imports transformers and peft, and through them torchao, which print
lines such as torchao's "Failed to load ..._C_mxfp8...so" (Python logging with no handler
of its own) and torch's ``_pytree`` deprecation warnings (torch's logging); a C library
may write to the file descriptors directly. None of it is trainscope's to show, and on a
console it reads as trainscope's own error. While a run builds its workload
(:func:`import_log`), each such import (:func:`quiet_import`) runs with both output
descriptors (1 and 2) pointed at a file in the run's folder: whatever wrote there, Python
or C, is kept in order and nothing reaches the console. Only imports are redirected: a
download's progress, or a factory's own prints, still show. An empty file is removed.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from trainscope.util.textsafe import one_line

MAX_COUNTED_BYTES = 64 * 1024 * 1024
"""Lines are counted in at most this much of the file (a runaway log costs no more)."""


@dataclass
class Captured:
    """The file the output went to and, once the block ended, what it holds."""

    path: Path
    lines: int = 0
    first: str = ""
    """The first line, made one safe line (what a record may quote)."""


_target: Path | None = None


@contextlib.contextmanager
def import_log(path: Path) -> Iterator[Captured]:
    """Over the block, :func:`quiet_import` sends an import's output to ``path``;
    afterwards the Captured says how many lines it holds (0: the file was removed)."""
    global _target
    captured, previous = Captured(Path(path)), _target
    _target = captured.path
    try:
        yield captured
    finally:
        _target = previous
        _count(captured)


LAZY_PARTS: dict[str, tuple[str, ...]] = {"transformers": ("transformers.modeling_utils",)}
"""Submodules a package loads only when an attribute is first used (transformers' lazy
module): imported with it, since that first use (``AutoModel...``) is where torchao
comes in and prints."""


def quiet_import(name: str) -> ModuleType:
    """``importlib.import_module(name)`` (and its :data:`LAZY_PARTS`), the output sent to
    the run's log inside :func:`import_log` (modules imported already print nothing more:
    imported as they are)."""
    parts = (name, *LAZY_PARTS.get(name, ()))
    if _target is None or all(p in sys.modules for p in parts):
        return importlib.import_module(name)
    with output_to(_target):
        for part in parts[1:]:
            with contextlib.suppress(ImportError):  # a release without it: nothing to load
                importlib.import_module(part)
        return importlib.import_module(name)


@contextlib.contextmanager
def output_to(path: Path) -> Iterator[None]:
    """Point file descriptors 1 and 2 at ``path`` (appended) over the block, then back."""
    _flush()
    saved = [os.dup(1), os.dup(2)]
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        yield
    finally:
        _flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for f in (*saved, fd):
            os.close(f)


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()


def _count(captured: Captured) -> None:
    """Fill in the line count and the first line; remove the file if it is empty."""
    try:
        if not captured.path.is_file():
            return
        if captured.path.stat().st_size == 0:
            captured.path.unlink()
            return
        with captured.path.open("rb") as f:
            head = f.read(MAX_COUNTED_BYTES)
        captured.lines = head.count(b"\n") + (0 if head.endswith(b"\n") else 1)
        first = head[:4096].decode("utf-8", "replace").strip().split("\n", 1)[0]
        captured.first = one_line(first)[:200]
    except OSError:
        pass


__all__ = ["Captured", "import_log", "output_to", "quiet_import"]
