"""Study directories: the plan (``study.json``) and the run records it points at (torch-free).

A study directory holds::

    study.json              kind, options, base config, every planned run, status
    runs/<config>/warmup    the discarded warm-up run (when the study has one)
    runs/<config>/r1 ...    one ordinary run directory per repeat
    report/                 what ``trainscope report`` builds from the above

Reports read only this: the plan says which run is which, the run records say what happened.
"""

from __future__ import annotations

import os
import re
import warnings
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from trainscope.errors import RecordError, TrainscopeError
from trainscope.records.jsonio import atomic_write_json, read_json_object
from trainscope.records.record_specs import STUDY
from trainscope.records.run_dir import RecordWarning, RunRecord, load_run, output_root
from trainscope.records.schema import check
from trainscope.util.load import loaded

STUDY_FILE = "study.json"
STUDY_SCHEMA_VERSION = 1


@dataclass
class PlannedRun:
    """One run of a study: which configuration, which repeat, and how it differs from the base."""

    config: str
    """Name of the configuration (repeats of one configuration share it); path-safe."""
    repeat: int
    """0 is the warm-up run (discarded from statistics), 1..N the measured repeats."""
    group: str = "main"
    """Which part of the study the run belongs to (a study may hold several sweeps)."""
    labels: dict[str, Any] = field(default_factory=dict)
    """What the report shows for this configuration, e.g. {"num_workers": 2}."""
    overrides: dict[str, Any] = field(default_factory=dict)
    """Dotted config overrides applied to the study's base config."""
    applicable: bool = True
    """False when the configuration cannot run here (the reason says why); never executed."""
    reason: str | None = None

    @property
    def warmup(self) -> bool:
        """True for the discarded warm-up run."""
        return self.repeat == 0

    @property
    def id(self) -> str:
        """Unique name of the run within the study."""
        return f"{self.config}/{'warmup' if self.warmup else f'r{self.repeat}'}"

    @property
    def rel_dir(self) -> str:
        """The run directory, relative to the study directory."""
        return f"runs/{self.id}"


@dataclass
class StudyPlan:
    """A named list of run configurations x repeats, with the options that produced it."""

    kind: str
    base_config: dict[str, Any]
    options: dict[str, Any]
    runs: list[PlannedRun]

    def to_dict(self) -> dict[str, Any]:
        """Plain data (what study.json stores, without status fields)."""
        return {
            "kind": self.kind,
            "options": self.options,
            "base_config": self.base_config,
            "runs": [asdict(r) for r in self.runs],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StudyPlan:
        """Inverse of :meth:`to_dict`."""
        return cls(
            kind=data["kind"],
            base_config=data.get("base_config", {}),
            options=data.get("options", {}),
            runs=[PlannedRun(**r) for r in data.get("runs", [])],
        )


def write_study(study_dir: Path, plan: StudyPlan, status: str, **extra: Any) -> None:
    """Write study.json atomically with the plan and a status (running/completed/...)."""
    data = {"schema_version": STUDY_SCHEMA_VERSION, "status": status, **extra, **plan.to_dict()}
    atomic_write_json(Path(study_dir) / STUDY_FILE, data)


def is_study_dir(path: str | os.PathLike[str]) -> bool:
    """True when ``path`` holds a study.json."""
    return (Path(path) / STUDY_FILE).is_file()


def read_study_file(study_dir: Path) -> dict[str, Any]:
    """study.json checked against its schema (:data:`~trainscope.records.record_specs.
    STUDY`), with one-line errors: not an object, no ``kind``, ``runs`` that are not a
    list of planned runs. An optional field that does not fit is left out, with a
    :class:`~trainscope.records.run_dir.RecordWarning` naming it."""
    path = Path(study_dir) / STUDY_FILE
    if not path.is_file():
        raise TrainscopeError(f"{study_dir} is not a study directory (no {STUDY_FILE})")
    try:
        data, left_out = check(read_json_object(path), STUDY, path)
    except RecordError as e:
        what = (
            "holds a damaged plan"
            if e.field.startswith("runs[")
            else "is not a trainscope study file"
        )
        raise RecordError(f"{path} {what}: {e.problem}", path, e.field, e.problem) from None
    for line in left_out:
        warnings.warn(line, RecordWarning, stacklevel=2)
    return data


@dataclass
class StudyRecord:
    """A study read back: its plan, status, and the record of every run that left one."""

    path: Path
    plan: StudyPlan
    status: str
    meta: dict[str, Any]
    records: dict[str, RunRecord]
    """Run id -> record, for runs whose directory holds a summary."""

    def completed(self, planned: PlannedRun) -> RunRecord | None:
        """The run's record if it completed, else None."""
        rec = self.records.get(planned.id)
        return rec if rec is not None and rec.summary.get("status") == "completed" else None

    def configs(self, group: str | None = None) -> list[PlannedRun]:
        """The first planned run of each configuration (in plan order), optionally one group."""
        seen: dict[str, PlannedRun] = {}
        for r in self.plan.runs:
            if (group is None or r.group == group) and r.config not in seen:
                seen[r.config] = r
        return list(seen.values())

    def repeats(self, config: str) -> list[RunRecord]:
        """Completed, non-warm-up runs of one configuration, in repeat order, loaded or not."""
        runs = [r for r in self.plan.runs if r.config == config and not r.warmup]
        return [rec for r in sorted(runs, key=lambda r: r.repeat) if (rec := self.completed(r))]

    def measured(self, config: str) -> list[RunRecord]:
        """The configuration's repeats that are evidence: completed, not the warm-up, and
        not measured under other load (:func:`trainscope.util.load.loaded`). Every
        comparison a report makes reads these."""
        return [rec for rec in self.repeats(config) if not loaded(rec.summary)]

    def loaded(self, config: str) -> list[RunRecord]:
        """The configuration's completed repeats measured under other load: shown as
        such, compared with nothing."""
        return [rec for rec in self.repeats(config) if loaded(rec.summary)]

    @property
    def fresh_processes(self) -> bool:
        """True when every run executed in a process of its own.

        Read from the runs' records (``summary.process.runs_before``: how many runs their
        process had started before them), falling back to the plan for older records.
        """
        before = [rec.view.process.get("runs_before") for rec in self.records.values()]
        known = [b for b in before if isinstance(b, int)]
        if known:
            return all(b == 0 for b in known)
        execution = self.plan.options.get("execution")
        return execution == "process per run" if execution else self.plan.kind == "strategies"

    def failed(self) -> list[tuple[PlannedRun, str]]:
        """Planned applicable runs that ran and did not complete, with their error.

        A run that failed before writing its own summary is known from the ``failures``
        that ``execute`` keeps in study.json.
        """
        early = self.meta.get("failures") or {}
        out = []
        for r in self.plan.runs:
            rec = self.records.get(r.id)
            if rec is not None and rec.summary.get("status") == "running":
                continue  # cut off with the study (see interrupted()), not failed
            if rec is not None and rec.summary.get("status") != "completed":
                out.append((r, str(rec.summary.get("error") or rec.summary.get("status"))))
            elif rec is None and r.id in early:
                out.append((r, str(early[r.id])))
        return out

    def interrupted(self) -> list[PlannedRun]:
        """Runs whose record stops mid-run (summary still ``running``): the study was
        stopped, or killed, while they ran."""
        return [
            r
            for r in self.plan.runs
            if (rec := self.records.get(r.id)) is not None
            and rec.summary.get("status") == "running"
        ]


def _check_planned(r: PlannedRun) -> None:
    """A planned run whose name is one path component: a damaged or hostile study.json
    must not point reports at files outside the study. (Any other text in the name is
    escaped wherever it is shown.)"""
    name = r.config
    if not isinstance(name, str) or name in ("", ".", "..") or re.search(r"[/\\\x00]", name):
        raise ValueError(f"configuration name {name!r}")
    if not isinstance(r.repeat, int) or isinstance(r.repeat, bool) or r.repeat < 0:
        raise ValueError(f"repeat {r.repeat!r}")
    if not isinstance(r.labels, dict) or not isinstance(r.overrides, dict):
        raise ValueError(f"labels or overrides of {r.config!r}")


def load_study(path: str | os.PathLike[str]) -> StudyRecord:
    """Read a study directory and every run record in it."""
    study_dir = Path(path)
    data = read_study_file(study_dir)
    try:
        plan = StudyPlan.from_dict(data)
        for r in plan.runs:
            _check_planned(r)
    except (TypeError, ValueError, KeyError) as e:
        raise TrainscopeError(f"{study_dir / STUDY_FILE} holds a damaged plan: {e}") from None
    records = {}
    for r in plan.runs:
        run_dir = study_dir / r.rel_dir
        if (run_dir / "summary.json").is_file():
            records[r.id] = load_run(run_dir)
    meta = {k: v for k, v in data.items() if k not in ("kind", "options", "base_config", "runs")}
    return StudyRecord(
        path=study_dir, plan=plan, status=str(data.get("status")), meta=meta, records=records
    )


def default_study_out(name: str) -> str:
    """A new study folder under the runs root: ``studies/NAME-<time>``."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    return str(output_root() / "studies" / f"{name}-{stamp}")
