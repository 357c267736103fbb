"""Re-measuring the repeats of a study that other load contaminated.

A repeat is *loaded* when other processes kept enough of the CPU busy while it ran that
its timings say more about them than about its configuration (the rule:
:mod:`trainscope.util.load`). Reports compare only repeats that were not loaded; this
phase, after the planned runs, runs the loaded ones again, round-robin across the
configurations (one pass over every loaded repeat, then the next pass), so that a quiet
spell benefits all of them rather than the first. It is bounded: at most
``attempts`` more runs of each repeat and ``seconds`` in all, both shown. What each
replaced attempt measured stays in study.json (``remeasure.attempts``), and the repeats
still loaded at the end are listed there: their configuration's finding then says "not a
finding" instead of a ratio.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainscope.errors import ConfigError
from trainscope.records.jsonio import try_json_object
from trainscope.records.study_dir import PlannedRun
from trainscope.records.view import SummaryView
from trainscope.util.load import loaded, other_cores

REMEASURE_ENV = "TRAINSCOPE_REMEASURE"
"""The default number of re-runs per loaded repeat where the command gives none."""
DEFAULT_ATTEMPTS = 2
MIN_SECONDS = 60.0
"""The time bound is what the planned runs took, and at least this."""


@dataclass(frozen=True)
class Bound:
    """How much re-measuring a study may do."""

    attempts: int
    """More runs of each loaded repeat, at most (0: none)."""
    seconds: float
    """Wall time of the whole phase, at most."""

    def text(self) -> str:
        """``"at most 2 more runs of each, 60 s in all"``."""
        runs = f"{self.attempts} more run{'s' * (self.attempts != 1)}"
        return f"at most {runs} of each, {self.seconds:.0f} s in all"


def attempts_wanted(given: int | None) -> int:
    """The re-runs per loaded repeat: ``given`` (``--remeasure``), else
    :data:`REMEASURE_ENV`, else :data:`DEFAULT_ATTEMPTS`."""
    if given is None:
        text = os.environ.get(REMEASURE_ENV, "").strip()
        if not text:
            return DEFAULT_ATTEMPTS
        if not text.isdigit():
            raise ConfigError(f"{REMEASURE_ENV} must be a whole number >= 0, got {text!r}")
        given = int(text)
    if given < 0 or given > 100:
        raise ConfigError(f"--remeasure must be between 0 and 100, got {given}")
    return given


def _summary(study_dir: Path, r: PlannedRun) -> dict[str, Any] | None:
    s = try_json_object(study_dir / r.rel_dir / "summary.json")
    return s if s is not None and s.get("status") == "completed" else None


def loaded_repeats(runs: list[PlannedRun], study_dir: Path) -> list[PlannedRun]:
    """The completed, measured (not warm-up) runs whose record says they were loaded."""
    return [
        r for r in runs if not r.warmup and (s := _summary(study_dir, r)) is not None and loaded(s)
    ]


def _figures(summary: dict[str, Any]) -> dict[str, Any]:
    """What a replaced attempt measured, kept in study.json."""
    view = SummaryView(summary)
    return {
        "other_cores": other_cores(summary),
        "threads": view.cpu.get("threads"),
        "train_time_s": view.train_time_s,
        "step_s_median": view.steady_step_s,
    }


Rerun = Callable[[PlannedRun], dict[str, Any] | None]
"""Runs one planned run again into its directory; its summary, or None if it failed."""


def remeasure(
    runs: list[PlannedRun],
    study_dir: Path,
    rerun: Rerun,
    say: Callable[[str], None],
    bound: Bound,
) -> dict[str, Any] | None:
    """Run the loaded repeats among ``runs`` again within ``bound``; what study.json keeps
    of it (None: nothing was loaded)."""
    pending = loaded_repeats(runs, study_dir)
    if not pending:
        return None
    history: dict[str, list[dict[str, Any]]] = {}
    say(
        f"{len(pending)} repeat{'s' * (len(pending) != 1)} measured under other load "
        f"(other processes kept the cores busy): re-measuring, {bound.text()}"
    )
    deadline = time.perf_counter() + bound.seconds
    out_of_time = False
    for _ in range(bound.attempts):
        still: list[PlannedRun] = []
        for r in pending:
            if time.perf_counter() > deadline:
                out_of_time = True
                still.append(r)
                continue
            old = _summary(study_dir, r)
            history.setdefault(r.id, []).append(_figures(old or {}))
            new = rerun(r)
            if new is None or new.get("status") != "completed" or loaded(new):
                still.append(r)
        pending = still
        if not pending or out_of_time:
            break
    if pending:
        say(
            f"still measured under other load after re-measuring: "
            f"{', '.join(r.id for r in pending)}{' (out of time)' * out_of_time}"
        )
    return {
        "bound": {"attempts": bound.attempts, "seconds": round(bound.seconds, 1)},
        "attempts": history,
        "still_loaded": [r.id for r in pending],
        "out_of_time": out_of_time,
    }
