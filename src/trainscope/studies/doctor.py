"""``trainscope doctor RUN_DIR --apply``: the baseline and each proposed fix re-run for the
same number of steps, alternated, as a study (resumable, with a report).

The base configuration is the run's own ``config.yaml`` cut to one epoch of ``steps``
steps (no weights saved, no tracking). Each finding with a fix is one configuration; with
two or more, ``all-fixes`` applies every fix that saves time without changing numerics at
once (memory fixes such as checkpointing trade time for bytes: they stand alone). Repeats
alternate baseline, fix, fix..., baseline, fix...: a slow spell of the machine hits every
configuration alike.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trainscope.config import resolve
from trainscope.diagnosis import Diagnosis
from trainscope.diagnosis.findings import fix_flags, overrides_of
from trainscope.errors import TrainscopeError
from trainscope.injections import as_arguments, for_fix
from trainscope.records.study_dir import PlannedRun, StudyPlan, StudyRecord
from trainscope.records.view import SummaryView
from trainscope.studies.base import finish_plan, plan_options, repeats_of
from trainscope.studies.script_runs import inject_overrides, script_base

BASELINE = "baseline"
ALL_FIXES = "all-fixes"


MAX_EPOCHS = 4
"""Epochs kept when a fix is about what happens between epochs (evaluation)."""


def base_config(run_dir: Path, steps: int, epochs: int = 1) -> dict[str, Any]:
    """The run's configuration, cut to ``steps`` steps over at most ``epochs`` of its
    epochs (one, unless a fix acts between epochs: then what it changes is re-run too)."""
    cfg = resolve(str(run_dir / "config.yaml"), {}).to_dict()
    cfg["out"] = None
    cfg["resume"] = cfg["overwrite"] = False
    epochs = max(1, min(epochs, int(cfg["train"]["epochs"])))
    per_epoch = max(1, -(-steps // epochs))  # ceil: at least ``steps`` in all
    cfg["train"].update(epochs=epochs, max_steps_per_epoch=per_epoch, save_weights=False)
    cfg["runtime"]["track"] = []
    return cfg


def configurations(diagnosis: Diagnosis) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(name, labels, overrides) of the baseline, each fix, and all speed fixes together."""
    out = [(BASELINE, {"fix": "none (the run as it was)", "flags": [], "numerics": False}, {})]
    speed: dict[str, Any] = {}
    speed_flags: list[str] = []
    for f in diagnosis.findings:
        if not f.fix:
            continue
        flags = fix_flags(f.fix)
        labels = {"fix": " ".join(flags), "flags": flags, "rule": f.rule,
                  "numerics": f.numerics, "measure": f.measure}  # fmt: skip
        out.append((f.rule, labels, overrides_of(f.fix)))
        if not f.numerics and f.measure != "memory":  # a memory fix may cost time
            speed.update(overrides_of(f.fix))
            speed_flags += flags
    kept = [lab for _, lab, _ in out[1:] if not lab["numerics"] and lab["measure"] != "memory"]
    if len(kept) >= 2:
        # Judged on the whole run's wall time as soon as one of its fixes saves there.
        measure = "wall" if any(k["measure"] == "wall" for k in kept) else "step"
        labels = {"fix": "every fix that keeps numerics", "flags": speed_flags,
                  "numerics": False, "measure": measure}  # fmt: skip
        out.append((ALL_FIXES, labels, speed))
    return out


def plan_apply(
    diagnosis: Diagnosis, device: Any, *, steps: int = 30, repeats: int = 5
) -> StudyPlan:
    """The study that re-measures ``diagnosis``'s fixes (see the module's docstring)."""
    configs = configurations(diagnosis)
    if len(configs) < 2:
        raise TrainscopeError(f"{diagnosis.run_dir}: nothing to apply (no finding has a fix)")
    per_config = {
        name: repeats_of(name, repeats, labels=labels, overrides=overrides)
        for name, labels, overrides in configs
    }
    runs: list[PlannedRun] = [per_config[name][k] for k in range(repeats) for name in per_config]
    options = plan_options(
        repeats, True, device, run_dir=str(diagnosis.run_dir), steps=steps,
        findings=diagnosis.as_list(),
    )  # fmt: skip
    between = any(f.fix and f.measure == "wall" for f in diagnosis.findings)
    base = base_config(diagnosis.run_dir, steps, MAX_EPOCHS if between else 1)
    # The run's own threads, not a shared budget: a fix may be about the threads.
    return finish_plan("doctor", base, options, runs, True, equal_cores=False)


def script_configurations(
    diagnosis: Diagnosis,
) -> tuple[list[tuple[str, dict[str, Any], dict[str, Any]]], list[str]]:
    """A script run's configurations, as :func:`configurations` (the baseline, each fix,
    every numerics-keeping speed fix together), each fix as ``--inject`` settings; and the
    rules left out, whose fix is a change to the script's code."""
    out = [(BASELINE, {"fix": "none (the run as it was)", "flags": [], "numerics": False}, {})]
    speed: dict[str, Any] = {}
    left_out: list[str] = []
    for f in diagnosis.findings:
        injected = for_fix(f.fix) if f.fix else None
        if f.fix and injected is None:
            left_out.append(f.rule)
        if not injected:
            continue
        flags = as_arguments(injected)
        labels = {"fix": " ".join(flags), "flags": flags, "rule": f.rule,
                  "numerics": f.numerics, "measure": f.measure}  # fmt: skip
        out.append((f.rule, labels, inject_overrides(injected)))
        if not f.numerics and f.measure != "memory":
            speed.update(injected)
    kept = [lab for _, lab, _ in out[1:] if not lab["numerics"] and lab["measure"] != "memory"]
    if len(kept) >= 2:
        measure = "wall" if any(k["measure"] == "wall" for k in kept) else "step"
        labels = {"fix": "every fix that keeps numerics", "flags": as_arguments(speed),
                  "numerics": False, "measure": measure}  # fmt: skip
        out.append((ALL_FIXES, labels, inject_overrides(speed)))
    return out, left_out


def plan_apply_script(diagnosis: Diagnosis, summary: dict[str, Any], device: Any, *,
                      steps: int = 30, repeats: int = 5) -> StudyPlan:  # fmt: skip
    """The study that re-measures a script run's fixes: the same command re-profiled for
    ``steps`` steps, the baseline with the run's own ``--inject`` settings and each fix
    with its own on top, alternated (see the module's docstring)."""
    configs, left_out = script_configurations(diagnosis)
    if len(configs) < 2:
        raise TrainscopeError(
            f"{diagnosis.run_dir}: nothing to apply: every fix is a change to the script's "
            f"code ({', '.join(left_out) or 'no finding has a fix'})"
        )
    source = SummaryView(summary).source
    per_config = {
        name: repeats_of(name, repeats, labels=labels, overrides=overrides)
        for name, labels, overrides in configs
    }
    runs = [per_config[name][k] for k in range(repeats) for name in per_config]
    options = plan_options(
        repeats, True, device, run_dir=str(Path(diagnosis.run_dir).absolute()), steps=steps,
        findings=diagnosis.as_list(), code_changes=left_out,
    )  # fmt: skip
    base = script_base(
        source["argv"], source["cwd"], steps=steps, threads=_given_threads(summary),
        inject=source.get("injected") or {}, sha256=source.get("sha256"),
    )  # fmt: skip
    return finish_plan("doctor", base, options, runs, True, equal_cores=False)


def _given_threads(summary: dict[str, Any]) -> int | None:
    """The ``--threads N`` the run was profiled with (None: the script's own threads;
    ``--inject threads=N`` comes back with the run's other injected settings)."""
    source = SummaryView(summary).cpu.get("threads_source")
    words = source.split() if isinstance(source, str) else []
    if len(words) == 2 and words[0] == "--threads" and words[1].isdigit():
        return int(words[1])
    return None


def record_code(cfg: dict[str, Any]) -> str | None:
    """The workload factory (``pkg.module:factory``) a run's configuration names, or None
    for a built-in workload: re-running the run would import that module."""
    name = (cfg.get("workload") or {}).get("name")
    return name if isinstance(name, str) and ":" in name else None


def failed_runs(study: StudyRecord) -> str | None:
    """``"N of M re-runs failed: <the first one's error>"``, or None where none failed."""
    failed = study.failed()
    if not failed:
        return None
    planned = sum(r.applicable for r in study.plan.runs)
    first = (failed[0][1].strip().splitlines() or ["(no error recorded)"])[0]  # not a traceback
    return f"{len(failed)} of {planned} re-runs failed: {first}"


def nothing_compared(study: StudyRecord) -> bool:
    """True when the baseline, or every fix, has no completed measured run: then no fix
    was compared with anything, whatever the report's verdicts would say."""
    measured = {c.config: bool(study.measured(c.config)) for c in study.configs()}
    fixes = [ok for name, ok in measured.items() if name != BASELINE]
    return not measured.get(BASELINE) or not any(fixes)
