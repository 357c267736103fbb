"""How launched processes say how they ended, and the one line the launcher prints
(torch-free).

``trainscope run --nproc N`` (and a study's run in a process of its own) starts its
processes with ``TRAINSCOPE_LAUNCH_DIR`` pointing at a private folder. Each process
writes ``rank<R>.json`` there when it ends with an error (the message, its kind and the
time), rank 0 writes ``run_dir`` as soon as it has one, and the torchrun agent writes
``agent.json`` with the exit code or signal of each failed rank. After every process has
ended, :func:`conclude` turns that into one line — the earliest real failure, not the
ranks that were stopped because of it — and completes run records that a killed process
left at ``running``.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainscope.records.jsonio import atomic_write_json, try_json_object

LAUNCH_DIR_VAR = "TRAINSCOPE_LAUNCH_DIR"
# Errors that are consequences of another rank's failure, not causes: chosen last.
_CONSEQUENCES = (
    "terminated by SIG",
    "interrupted by the user",
    "lost the connection to another rank",
    "Connection closed by peer",
    "Connection reset by peer",
)


@dataclass
class LaunchResult:
    """How a launch ended: the exit status and, when it failed, one line saying why."""

    code: int
    error: str | None = None
    run_dir: Path | None = None


def launched() -> Path | None:
    """The launch folder when a trainscope launcher started this process, else None."""
    value = os.environ.get(LAUNCH_DIR_VAR)
    return Path(value) if value and Path(value).is_dir() else None


def _rank() -> int:
    try:
        return int(os.environ.get("RANK", "0"))
    except ValueError:
        return 0


def report_end(message: str, kind: str = "error") -> bool:
    """Leave this process's failure for the launcher; False when not launched (the caller
    prints the message itself)."""
    folder = launched()
    if folder is None:
        return False
    data = {"rank": _rank(), "kind": kind, "error": message, "time": time.time()}
    try:
        # The first word stands: a stalled rank's verdict, not the SIGTERM that followed.
        with open(folder / f"rank{_rank()}.json", "x") as f:
            f.write(json.dumps(data))
    except FileExistsError:
        pass
    except OSError:
        return False
    return True


def note_run_dir(path: Path) -> None:
    """Rank 0 tells the launcher where the run record is (the default --out is made here)."""
    folder = launched()
    if folder is not None and _rank() == 0:
        (folder / "run_dir").write_text(str(Path(path).resolve()))


def _read(path: Path) -> dict[str, Any] | None:
    return try_json_object(path)


def _is_consequence(text: str) -> bool:
    return any(mark in text for mark in _CONSEQUENCES)


def first_failure(launch_dir: Path) -> str | None:
    """The earliest failure a rank reported, preferring causes over consequences."""
    reports = [r for p in sorted(launch_dir.glob("rank*.json")) if isinstance(r := _read(p), dict)]
    reports = [r for r in reports if isinstance(r.get("error"), str)]
    if not reports:
        return None
    # Causes before consequences; among stall verdicts rank 0's (the run record's).
    reports.sort(
        key=lambda r: (
            _is_consequence(r["error"]),
            r.get("kind") != "stalled" or r.get("rank") != 0,
            float(r.get("time") or 0),
        )
    )
    first = reports[0]
    if first.get("kind") == "stalled" or all(r["error"] == first["error"] for r in reports):
        # Every rank refused the same input, or a stall verdict (it names the ranks)
        return first["error"]
    return f"rank {first.get('rank')}: {first['error']}"


def conclude(launch_dir: Path, code: int) -> LaunchResult:
    """The launch's result once every process has ended: one line, records completed.

    Only a run directory that rank 0 claimed (and noted) is touched: a launch refused
    before that must not write into whatever its ``--out`` names.
    """
    run_dir_file = launch_dir / "run_dir"
    run_dir = Path(run_dir_file.read_text()) if run_dir_file.is_file() else None
    agent = _read(launch_dir / "agent.json")
    failures: dict[str, Any] = agent.get("failures", {}) if isinstance(agent, dict) else {}
    if code == 0:
        return LaunchResult(0, None, run_dir)
    error = first_failure(launch_dir)
    silent = [r for r in failures if not (launch_dir / f"rank{r}.json").is_file()]
    if silent:
        # A rank that ended without a word was killed from outside (SIGKILL, the OOM
        # killer): that is the cause, whatever the stopped ranks said afterwards.
        rank = min(silent, key=lambda r: failures[r].get("time") or 0)
        cause = f"rank {rank} {failures[rank]['text']} without recording why"
        error = cause if error is None or _is_consequence(error) else error
    if error is None:
        error = f"the launched processes exited with code {code}"
    if run_dir is not None:
        complete_records(run_dir, error)
    return LaunchResult(code, error, run_dir)


def complete_records(run_dir: Path, cause: str) -> None:
    """Mark every summary a dead process left at ``running`` as failed, and note in each
    failed one what ended the launch (``launch_error``)."""
    paths = [run_dir / "summary.json", *sorted(run_dir.glob("ranks/rank*/summary.json"))]
    for path in paths:
        summary = _read(path)
        if not isinstance(summary, dict) or summary.get("status") not in ("running", "failed"):
            continue
        if summary["status"] == "running":
            summary["status"] = "failed"
            summary["error"] = f"the process ended without recording why; the launch: {cause}"
        elif _is_consequence(str(summary.get("error") or "")) and not _is_consequence(cause):
            # This rank was stopped because another failed ("terminated by SIGTERM" from
            # the agent, a lost connection): its record names the cause first.
            summary["error"] = f"{cause} (then this process: {summary['error']})"
        # What ended the whole launch, beside what this rank saw (often only the effect).
        summary["launch_error"] = cause
        try:
            atomic_write_json(path, summary)
        except OSError:
            pass
