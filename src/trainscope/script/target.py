"""The script a user named, checked before anything is written, and run as Python would.

``trainscope profile -- train.py ARGS`` runs ``train.py`` in this process the way
``python train.py ARGS`` runs it (as ``python -m cProfile`` does): ``sys.argv`` is
``["train.py", *ARGS]``, ``__name__`` is ``"__main__"``, ``sys.path[0]`` is the script's
folder, and ``sys.modules["__main__"]`` is the script's module while it runs (so that
pickling its classes, and multiprocessing's spawn, find them). ``-m MODULE`` runs a module
as ``python -m MODULE`` does: found on ``sys.path`` with the current folder first, which
is what the user asked for by naming it.

What the script does is its own: its output, its files, its exit code. How it ended is
an :class:`Ending`; an exception's traceback is printed with the script's frames only.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import traceback
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainscope.errors import ConfigError
from trainscope.util.textsafe import one_line

MAX_SCRIPT_BYTES = 64 * 1024 * 1024
"""A script larger than this is refused before it is read (no Python program is)."""


@dataclass
class Target:
    """The code to run: a script file or a module, its arguments, its digest."""

    kind: str
    """``script`` or ``module``."""
    name: str
    """The path as given, or the module's name."""
    args: list[str] = field(default_factory=list)
    path: Path | None = None
    """The file that runs (a module's too, where it has one)."""
    code: Any = None
    sha256: str | None = None

    @property
    def stem(self) -> str:
        """A short name for the run directory: ``train`` for ``train.py``."""
        if self.kind == "module":
            return self.name.rsplit(".", 1)[-1]
        return Path(self.name).stem or "script"

    def source_section(self) -> dict[str, Any]:
        """The record's ``source``: what ran, with what arguments, and its digest."""
        return {
            "kind": self.kind,
            "argv": [self.name if self.kind == "script" else f"-m {self.name}", *self.args],
            "path": str(self.path) if self.path is not None else None,
            "module": self.name if self.kind == "module" else None,
            "sha256": self.sha256,
            "cwd": os.getcwd(),
        }


def _compiled(path: Path, shown: str) -> tuple[Any, str]:
    """The file's code object and SHA-256; one clear line for anything Python refuses."""
    try:
        size = path.stat().st_size
        if size > MAX_SCRIPT_BYTES:
            raise ConfigError(f"{shown}: {size} bytes is not a Python script")
        data = path.read_bytes()
    except OSError as e:
        raise ConfigError(f"{shown}: cannot read it ({e.strerror or e})") from None
    try:
        source = importlib.util.decode_source(data)
        code = compile(source, str(path), "exec", dont_inherit=True)
    except SyntaxError as e:
        where = f"line {e.lineno}" if e.lineno else "its text"
        raise ConfigError(
            f"{shown}: not a Python script Python can run: {e.msg} ({where})"
        ) from None
    except (UnicodeDecodeError, ValueError) as e:  # binary data, a NUL byte
        raise ConfigError(f"{shown}: not a Python script ({one_line(str(e))[:120]})") from None
    return code, hashlib.sha256(data).hexdigest()


def script_target(script: str, args: list[str]) -> Target:
    """A script file, checked: present, a file, Python that compiles."""
    path = Path(script)
    if not path.exists():
        raise ConfigError(f"{script}: no such file")
    if path.is_dir():
        raise ConfigError(f"{script}: a directory, not a Python script (name the .py file)")
    code, digest = _compiled(path, script)
    return Target("script", script, list(args), path.resolve(), code, digest)


def module_target(module: str, args: list[str]) -> Target:
    """A module, found as ``python -m`` finds it (the current folder first)."""
    if not module or module.startswith(".") or not all(p.isidentifier() for p in module.split(".")):
        raise ConfigError(f"-m {module!r}: not a module name")
    sys.path.insert(0, os.getcwd())
    try:
        spec = importlib.util.find_spec(module)
        if spec is not None and spec.submodule_search_locations is not None:
            spec = importlib.util.find_spec(f"{module}.__main__")  # a package: its __main__
    except (ImportError, ValueError) as e:
        raise ConfigError(f"-m {module}: cannot be found ({one_line(str(e))})") from None
    finally:
        sys.path.remove(os.getcwd())
    if spec is None:
        raise ConfigError(f"-m {module}: no module of that name (on sys.path, this folder first)")
    origin = spec.origin if spec.has_location and spec.origin else None
    digest = None
    if origin is not None and origin.endswith(".py"):
        _, digest = _compiled(Path(origin), f"-m {module}")
    return Target("module", module, list(args), Path(origin) if origin else None, None, digest)


@dataclass
class Ending:
    """How the script ended."""

    code: int
    """The exit code ``python SCRIPT`` would have had."""
    error: BaseException | None = None
    """The exception that ended it (None: it returned, or exited with ``sys.exit``)."""
    exit_message: str | None = None
    """``sys.exit("text")``: the text Python prints to stderr."""


def _exit_code(e: SystemExit) -> tuple[int, str | None]:
    """The exit code and message Python gives ``sys.exit(value)``."""
    value = e.code
    if value is None:
        return 0, None
    if isinstance(value, int) and not isinstance(value, bool):
        return value & 0xFF if value >= 0 else value % 256, None
    return 1, str(value)


def run_target(target: Target, stop: tuple[type[BaseException], ...]) -> Ending:
    """Run ``target`` as Python would; exceptions in ``stop`` (trainscope's own ends:
    ``--steps``, a stop signal) propagate to the caller, anything else becomes the
    :class:`Ending`."""
    saved_argv, saved_path = sys.argv, list(sys.path)
    main = sys.modules.get("__main__")
    try:
        if target.kind == "script":
            return _run_script(target)
        return _run_module(target)
    except stop:
        raise
    except SystemExit as e:
        code, message = _exit_code(e)
        return Ending(code, None, message)
    except BaseException as e:  # the script's own failure, Ctrl-C included
        return Ending(130 if isinstance(e, KeyboardInterrupt) else 1, e)
    finally:
        sys.argv = saved_argv
        sys.path[:] = saved_path
        if main is not None:
            sys.modules["__main__"] = main


def _entry_first() -> bool:
    """Whether ``sys.path[0]`` is the folder of the program that started this process
    (the ``trainscope`` console script's), which ``python SCRIPT`` would not have."""
    entry = sys.argv[0] if sys.argv else ""
    if not entry or entry == "-c" or not sys.path[0]:
        return False
    try:
        return os.path.samefile(sys.path[0], os.path.dirname(os.path.abspath(entry)))
    except OSError:
        return False


def _run_script(target: Target) -> Ending:
    assert target.path is not None
    module = types.ModuleType("__main__")
    module.__dict__.update(
        __file__=str(target.path), __cached__=None, __loader__=None, __spec__=None,
        __package__=None, __builtins__=__builtins__,
    )  # fmt: skip
    sys.argv = [target.name, *target.args]
    folder = str(target.path.parent)
    if sys.path and _entry_first():
        sys.path[0] = folder  # in place of trainscope's own entry, as python would have it
    else:
        # Launched with its entry already taken off (a study's re-run: ``python -c``
        # drops '' itself): sys.path[0] is PYTHONPATH's first folder, which must stay.
        sys.path.insert(0, folder)
    sys.modules["__main__"] = module
    exec(target.code, module.__dict__)
    return Ending(0)


def _run_module(target: Target) -> Ending:
    import runpy

    sys.argv = [str(target.path or target.name), *target.args]
    if sys.path:
        sys.path[0] = os.getcwd()
    else:
        sys.path.append(os.getcwd())
    runpy.run_module(target.name, run_name="__main__", alter_sys=True)
    return Ending(0)


_OWN = str(Path(__file__).resolve().parent.parent)  # frames of trainscope's own code


def _script_frames(stack: traceback.StackSummary) -> traceback.StackSummary:
    kept = [f for f in stack if not (f.filename or "").startswith(_OWN)
            and not (f.filename or "").endswith(("<frozen runpy>", "runpy.py"))]  # fmt: skip
    return traceback.StackSummary.from_list(kept)


def print_script_traceback(e: BaseException, file: Any = None) -> None:
    """The exception's traceback as ``python SCRIPT`` prints it: the script's frames and
    the libraries' it called, not trainscope's (its runner and its hooks)."""
    te = traceback.TracebackException.from_exception(e)
    seen: set[int] = set()
    node: traceback.TracebackException | None = te
    while node is not None and id(node) not in seen:  # the chain of causes too
        seen.add(id(node))
        node.stack = _script_frames(node.stack)
        node = node.__cause__ or node.__context__
    print("".join(te.format()), end="", file=file if file is not None else sys.stderr)


__all__ = [
    "MAX_SCRIPT_BYTES",
    "Ending",
    "Target",
    "module_target",
    "print_script_traceback",
    "run_target",
    "script_target",
]
