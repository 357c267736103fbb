"""Studies of the user's own, unchanged script: every configuration is the same command
re-profiled (``trainscope profile --steps N --inject ...``), each in a process of its own,
from the folder the script runs in.

A study's base configuration is then ``{"script": {...}}`` (:func:`script_base`) instead
of a run configuration, and a configuration's overrides are ``--inject`` settings
(``{"script.inject.num_workers": 4}``, :func:`inject_overrides`). The study engine
(:mod:`trainscope.studies.base`) runs such a plan with :func:`run_script`; the record each
re-run leaves is a ``trainscope profile`` record, which the study report reads as it reads
trainscope's own runs.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

from trainscope.errors import ConfigError, TrainscopeError
from trainscope.injections import as_arguments, parse_injections
from trainscope.launch.launcher import WORKER_CODE
from trainscope.records.jsonio import try_json_object
from trainscope.util.textsafe import one_line

SCRIPT = "script"
"""The base configuration's key that makes a study one of a script."""
MAX_STEPS = 100_000


def script_base(argv: list[str], cwd: str, *, steps: int, threads: int | None = None,
                inject: dict[str, Any] | None = None,
                sha256: str | None = None) -> dict[str, Any]:  # fmt: skip
    """The base configuration of a script's study: the command (as ``trainscope profile``
    records it, ``-m NAME`` as one word for a module), the folder it runs from, the steps
    each re-run takes, torch's threads (None: the script's own) and the settings every
    configuration injects; ``sha256``: the script file's digest, for the record."""
    spec = {"argv": [str(a) for a in argv], "cwd": cwd, "steps": steps, "threads": threads,
            "inject": dict(inject or {}), "sha256": sha256}  # fmt: skip
    return {SCRIPT: spec}


def is_script_plan(base_config: dict[str, Any]) -> bool:
    """True for a base configuration made by :func:`script_base`."""
    return isinstance(base_config.get(SCRIPT), dict)


def inject_overrides(settings: dict[str, Any]) -> dict[str, Any]:
    """``{"num_workers": 4}`` as a configuration's overrides of a script's study."""
    return {f"{SCRIPT}.inject.{k}": v for k, v in settings.items()}


def check_spec(spec: dict[str, Any]) -> None:
    """One clear ConfigError for a script configuration that cannot run: no command, no
    folder, steps out of range, or an ``--inject`` setting its key refuses."""
    argv, cwd, steps = spec.get("argv"), spec.get("cwd"), spec.get("steps")
    if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
        raise ConfigError("a script study needs the script's command line")
    if not isinstance(cwd, str) or not Path(cwd).is_dir():
        raise ConfigError(f"the folder the script runs from is not there: {cwd}")
    if not isinstance(steps, int) or not 1 <= steps <= MAX_STEPS:
        raise ConfigError(f"--steps must be 1..{MAX_STEPS}, got {steps}")
    parse_injections(as_arguments(spec.get("inject") or {})[1::2])


def command_words(argv: list[str]) -> list[str]:
    """The recorded command as words again (``-m NAME`` is one word in a record)."""
    words = [str(a) for a in argv]
    if words and words[0].startswith("-m "):
        words = ["-m", words[0][3:], *words[1:]]
    return words


def profile_argv(spec: dict[str, Any], run_dir: Path) -> list[str]:
    """The process that re-profiles the script into ``run_dir``. ``sys.executable`` with
    the launcher's boot code, never ``python -m trainscope``: that would look in the
    script's folder first, and a ``trainscope.py`` there would run instead."""
    import sys

    threads = spec.get("threads")
    return [
        sys.executable, "-c", WORKER_CODE, "profile", "-q", "--overwrite",
        "--out", str(run_dir), "--steps", str(spec["steps"]),
        *(["--threads", str(threads)] if threads else []),
        *as_arguments(spec.get("inject") or {}), "--", *command_words(spec["argv"]),
    ]  # fmt: skip


def run_script(spec: dict[str, Any], run_dir: Path) -> dict[str, Any]:
    """Re-profile the script into ``run_dir`` (see :func:`profile_argv`); its summary.
    A re-run that fails (or leaves no record) raises with its one line, which the study
    records as that run's failure."""
    check_spec(spec)
    proc = subprocess.run(profile_argv(spec, run_dir), cwd=spec["cwd"], stdin=subprocess.DEVNULL,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                          errors="replace", check=False)  # fmt: skip
    summary = try_json_object(run_dir / "summary.json")
    last = (proc.stderr.strip().splitlines() or [""])[-1]
    if summary is None:
        raise TrainscopeError(f"the script left no record (exit {proc.returncode}): "
                              f"{one_line(last)[:300]}")  # fmt: skip
    if proc.returncode != 0 or summary.get("status") != "completed":
        error = summary.get("error") or last or f"exit code {proc.returncode}"
        raise TrainscopeError(f"the script's re-run failed: {one_line(str(error))[:300]}")
    return summary


__all__ = [
    "SCRIPT",
    "check_spec",
    "command_words",
    "inject_overrides",
    "is_script_plan",
    "profile_argv",
    "run_script",
    "script_base",
]
