"""Running a study: every planned run, one after another, each into its own run directory.

Order: the warm-up run first (it pays one-off costs such as lazy imports and allocator
growth, and is kept out of the statistics), then the repeats round-robin: repeat 1 of
every configuration, then repeat 2 of every configuration, and so on. On a noisy machine
a slow spell then spreads over all configurations instead of landing on one of them.

Resuming: a run whose directory already holds a completed summary is not redone. A run
that failed or was interrupted is redone. Rerunning the same command continues a study.
"""

from __future__ import annotations

import functools
import gc
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainscope.config import available_cpus, from_dict, merge
from trainscope.errors import ConfigError, Terminated, TrainscopeError
from trainscope.records.jsonio import try_json_object
from trainscope.records.ownership import OwnedDir, claim_dir
from trainscope.records.study_dir import (
    STUDY_FILE,
    PlannedRun,
    StudyPlan,
    is_study_dir,
    read_study_file,
    write_study,
)
from trainscope.studies.remeasure import MIN_SECONDS, Bound, attempts_wanted, remeasure
from trainscope.studies.script_runs import check_spec, is_script_plan, run_script
from trainscope.train.console import RunConsole
from trainscope.util.load import load_of, loaded
from trainscope.util.textsafe import terminal_text

if TYPE_CHECKING:
    import torch


@dataclass
class StudyResult:
    """What :func:`execute` did."""

    study_dir: Path
    executed: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    """Already completed before this invocation (resumed)."""
    failed: list[str] = field(default_factory=list)
    not_applicable: list[str] = field(default_factory=list)


def execution_order(runs: list[PlannedRun]) -> list[PlannedRun]:
    """Warm-up runs first, then repeats round-robin across configurations."""
    warm = [r for r in runs if r.warmup]
    rest = sorted((r for r in runs if not r.warmup), key=lambda r: r.repeat)  # stable
    return warm + rest


def _completed(run_dir: Path) -> bool:
    summary = try_json_object(run_dir / "summary.json")
    return summary is not None and summary.get("status") == "completed"


def _same_plan(existing: dict[str, Any], plan: StudyPlan, runs: bool = True) -> bool:
    """The same study (an adaptive one's runs grow as it learns: not compared)."""
    new = plan.to_dict()
    keys = ("kind", "options", "base_config", *(("runs",) if runs else ()))
    return all(existing.get(k) == new[k] for k in keys)


Say = Callable[[str], None]


def execute(
    plan: StudyPlan,
    study_dir: str | Path,
    *,
    overwrite: bool = False,
    say: Say | None = None,
    run_fn: Callable[..., dict[str, Any]] | None = None,
    remeasure: int | None = None,
) -> StudyResult:
    """Run every applicable planned run not yet completed; write study.json as it goes.

    An existing study directory must hold the same plan (same kind, options, base config
    and runs) unless ``overwrite`` is set, in which case every run is redone. A failing
    run is recorded and the study goes on; Ctrl-C marks the study interrupted and stops.
    Repeats measured under other load are run again, up to ``remeasure`` more times each
    (:mod:`trainscope.studies.remeasure`; None: its default).
    ``run_fn`` replaces :func:`trainscope.train.run.run` (tests count calls with it).
    """
    say = say or (lambda text: print(terminal_text(text), file=sys.stderr))
    study_dir = Path(study_dir)
    attempts = attempts_wanted(remeasure)
    existing = claim_dir(study_dir, "study", existing="clear" if overwrite else "keep")
    with existing:  # the study's lock, held until it ends
        return _execute(plan, existing, overwrite=overwrite, say=say, run_fn=run_fn,
                        remeasure=attempts)  # fmt: skip


@dataclass
class _Session:
    """One invocation of a study in its claimed directory: what its phases share."""

    plan: StudyPlan
    study_dir: Path
    say: Say
    run_fn: Callable[..., dict[str, Any]]
    started: str
    argv: list[str]
    result: StudyResult
    todo: list[PlannedRun] = field(default_factory=list)
    """The applicable runs, in execution order."""
    done_before: set[str] = field(default_factory=set)
    failures: dict[str, str] = field(default_factory=dict)
    """Errors of runs that failed before writing a summary of their own (e.g. a full disk
    at prepare_run_dir): kept in study.json so the report can name them."""
    durations: list[float] = field(default_factory=list)
    """Of the runs executed so far: the basis of "about ... left"."""
    remeasured: dict[str, Any] | None = None
    """What re-measuring the loaded repeats did (study.json's ``remeasure``)."""

    def write(self, status: str, **extra: Any) -> None:
        """study.json with ``status`` (its keys in the same order every time)."""
        if self.remeasured is not None:
            extra["remeasure"] = self.remeasured
        write_study(
            self.study_dir, self.plan, status, started_at=self.started, **extra, argv=self.argv
        )


More = Callable[[StudyPlan, Path], list[PlannedRun]]
"""An adaptive study's next runs, from the plan so far and the records in its directory
(an empty list: the study is done)."""


def execute_adaptive(
    plan: StudyPlan,
    study_dir: str | Path,
    more: More,
    *,
    overwrite: bool = False,
    say: Say | None = None,
    run_fn: Callable[..., dict[str, Any]] | None = None,
    remeasure: int | None = None,
) -> StudyResult:
    """:func:`execute` for a study whose later runs depend on what earlier ones measured
    (a search): once the planned runs are done, ``more`` adds the next ones, until it
    returns none. study.json lists the runs planned so far. Rerunning the same command
    replays the same decisions from the kept records, so it resumes like any study."""
    say = say or (lambda text: print(terminal_text(text), file=sys.stderr))
    study_dir = Path(study_dir)
    attempts = attempts_wanted(remeasure)
    existing = claim_dir(study_dir, "study", existing="clear" if overwrite else "keep")
    with existing:
        return _execute(plan, existing, overwrite=overwrite, say=say, run_fn=run_fn, more=more,
                        remeasure=attempts)  # fmt: skip


def _extend(session: _Session, owned: OwnedDir, more: More, overwrite: bool) -> bool:
    """Add an adaptive study's next runs to the session (and study.json); False: none."""
    new = more(session.plan, session.study_dir)
    if not new:
        return False
    ids = {r.id for r in session.plan.runs}
    if any(r.id in ids for r in new) or len({r.id for r in new}) != len(new):
        raise AssertionError("an adaptive study planned a run twice")  # a planner's bug
    owned.record(dirs=sorted({"runs", *(r.rel_dir for r in new),
                              *(str(Path(r.rel_dir).parent) for r in new)}))  # fmt: skip
    session.plan.runs.extend(new)
    fresh = [r for r in new if r.applicable]
    session.todo.extend(fresh)
    session.done_before |= {
        r.id for r in fresh if not overwrite and _completed(session.study_dir / r.rel_dir)
    }
    session.write("running")
    return True


def _execute(
    plan: StudyPlan,
    owned: OwnedDir,
    *,
    overwrite: bool,
    say: Say,
    run_fn: Callable[..., dict[str, Any]] | None,
    more: More | None = None,
    remeasure: int = 0,
) -> StudyResult:
    """:func:`execute` in the claimed (locked, marked) study directory."""
    session = _start(plan, owned, overwrite=overwrite, say=say, run_fn=run_fn,
                     adaptive=more is not None)  # fmt: skip
    try:
        i = 0
        while True:
            while i < len(session.todo):
                i += 1
                _run_planned(session, i, session.todo[i - 1])
            if more is None or not _extend(session, owned, more, overwrite):
                break
        if remeasure:
            _remeasure_loaded(session, remeasure)
    except (KeyboardInterrupt, Terminated) as e:
        status = "interrupted" if isinstance(e, KeyboardInterrupt) else f"stopped ({e})"
        done = sum(_completed(session.study_dir / r.rel_dir) for r in session.todo)
        say(f"study {plan.kind} {status} after {done} of {len(session.todo)} runs")
        session.write(status, failures=session.failures)
        raise
    status = "completed" if not session.result.failed else "completed_with_failures"
    finished = datetime.now(timezone.utc).isoformat(timespec="seconds")
    session.write(status, finished_at=finished, failures=session.failures)
    return session.result


def _start(
    plan: StudyPlan,
    owned: OwnedDir,
    *,
    overwrite: bool,
    say: Say,
    run_fn: Callable[..., dict[str, Any]] | None,
    adaptive: bool = False,
) -> _Session:
    """Check and mark the study directory, write study.json as running, and say what is
    about to run."""
    study_dir = owned.path
    if is_study_dir(study_dir) and not overwrite:
        if not _same_plan(read_study_file(study_dir), plan, runs=not adaptive):
            raise TrainscopeError(
                f"{study_dir} holds a different study (other kind, options or config); "
                "pass --overwrite to replace it or choose another --out"
            )
    # Listed before they exist: --overwrite may remove them later, and nothing else.
    folders = {
        "runs",
        *(r.rel_dir for r in plan.runs),
        *(str(Path(r.rel_dir).parent) for r in plan.runs),
    }
    owned.record(STUDY_FILE, dirs=sorted(folders))
    if run_fn is None and is_script_plan(plan.base_config):
        run_fn = run_script  # the user's script, re-profiled in a process of its own
    elif run_fn is None:
        from trainscope.train.run import run as run_fn

    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    if is_study_dir(study_dir) and not overwrite:  # resuming: keep the first start time
        started = read_study_file(study_dir).get("started_at") or started
    # The command itself: runs launched in processes of their own cannot tell the report.
    argv = list(sys.argv)
    session = _Session(plan, study_dir, say, run_fn, started, argv, StudyResult(study_dir))
    session.write("running")
    order = execution_order(plan.runs)
    session.todo = [r for r in order if r.applicable]
    # Read once: the runs kept from an earlier invocation take no time in this one.
    session.done_before = {
        r.id for r in session.todo if not overwrite and _completed(study_dir / r.rel_dir)
    }
    session.result.not_applicable = [r.id for r in order if not r.applicable]
    for r in plan.runs:
        if not r.applicable and not r.warmup and r.repeat == 1:
            say(f"{r.config}: not applicable here ({r.reason})")
    say(plan_line(plan))
    return session


def _run_planned(session: _Session, i: int, planned: PlannedRun, again: bool = False) -> None:
    """Run the ``i``-th of the session's runs into its directory (or keep it, done before;
    ``again``: re-measured). A failing run is recorded and said, and the study goes on;
    Ctrl-C is raised."""
    todo, result, say = session.todo, session.result, session.say
    run_dir = session.study_dir / planned.rel_dir
    tag = f"[{i}/{len(todo)}] {planned.id}{' again' * again}"
    if planned.id in session.done_before:
        result.skipped.append(planned.id)
        say(f"{tag}: already done, kept")
        return
    t0 = time.perf_counter()
    try:
        summary = _one_run(session, planned, run_dir)
    except KeyboardInterrupt:
        raise
    except Exception as e:  # recorded in the run's summary; the study goes on
        result.failed.append(planned.id)
        session.failures[planned.id] = f"{type(e).__name__}: {e}"
        say(f"{tag}: failed: {type(e).__name__}: {e}")
        return
    finally:
        # A run in this process can leave its DataLoader iterators in reference cycles;
        # collected later inside a worker that a next run forks, each would print a
        # traceback ("can only test a child process"). Collected here, in their parent.
        gc.collect()
    if planned.id not in result.executed:
        result.executed.append(planned.id)
    session.durations.append(time.perf_counter() - t0)
    note = " (warm-up, discarded)" if planned.warmup else ""
    if loaded(summary):
        note += f" (under other load: {load_of([summary])} busy)"
    rest = [] if again else [r for r in todo[i:] if r.id not in session.done_before]
    left = _time_left(session.durations, rest)
    say(f"{tag}: {summary.get('status')} in {session.durations[-1]:.2f} s{note}{left}")


def _one_run(session: _Session, planned: PlannedRun, run_dir: Path) -> dict[str, Any]:
    """One planned run into ``run_dir``: trainscope's own run of the configuration, or
    the user's script re-profiled with the configuration's settings; its summary."""
    merged = merge(session.plan.base_config, planned.overrides)
    if is_script_plan(merged):
        return session.run_fn(merged["script"], run_dir)
    cfg = from_dict(merged)
    cfg.out, cfg.overwrite = str(run_dir), True
    cfg.runtime.progress = False
    with warnings.catch_warnings():
        # A sweep asks for more workers than CPUs on purpose; torch's warning about it
        # would repeat on every run of the sweep.
        warnings.filterwarnings("ignore", message="This DataLoader will create")
        return session.run_fn(cfg, RunConsole(enabled=False))


def _remeasure_loaded(session: _Session, attempts: int) -> None:
    """Run the repeats measured under other load again (bounded: at most ``attempts``
    more runs each, and as long again as the study's runs took, at least a minute)."""
    bound = Bound(attempts, max(MIN_SECONDS, sum(session.durations)))

    def rerun(planned: PlannedRun) -> dict[str, Any] | None:
        session.done_before.discard(planned.id)
        n = len(session.result.failed)
        _run_planned(session, session.todo.index(planned) + 1, planned, again=True)
        if len(session.result.failed) > n:
            return None
        return try_json_object(session.study_dir / planned.rel_dir / "summary.json")

    session.remeasured = remeasure(session.todo, session.study_dir, rerun, session.say, bound)


def plan_line(plan: StudyPlan) -> str:
    """What a study is about to do, in one line: runs planned, and of what."""
    runs = [r for r in plan.runs if r.applicable]
    warm = sum(r.warmup for r in runs)
    configs = len({r.config for r in runs if not r.warmup})
    repeats = max((r.repeat for r in runs if not r.warmup), default=0)
    skipped = len({r.config for r in plan.runs if not r.applicable})
    parts = [
        f"{configs} configuration{'s' * (configs != 1)} x {repeats} repeat{'s' * (repeats != 1)}"
    ]
    if warm:
        parts.insert(0, f"{warm} warm-up")
    na = f"; {skipped} not applicable here" if skipped else ""
    return f"study {plan.kind}: {len(runs)} runs planned ({' + '.join(parts)}){na}"


def _time_left(durations: list[float], remaining: list[PlannedRun]) -> str:
    """ "; about N left" from the median duration of the runs so far (a rough guide: the
    configurations differ), or "" when nothing remains."""
    if not remaining or not durations:
        return ""
    import statistics

    secs = statistics.median(durations) * len(remaining)
    when = f"{secs / 60:.0f} min" if secs >= 90 else f"{secs:.0f} s"
    return f"; about {when} left for {len(remaining)} run{'s' * (len(remaining) != 1)}"


def repeats_of(
    config: str,
    repeats: int,
    *,
    group: str = "main",
    labels: dict[str, Any] | None = None,
    overrides: dict[str, Any] | None = None,
    applicable: bool = True,
    reason: str | None = None,
) -> list[PlannedRun]:
    """Planned runs 1..``repeats`` of one configuration."""
    if repeats < 1:
        raise TrainscopeError(f"repeats must be at least 1, got {repeats}")
    return [
        PlannedRun(
            config=config,
            repeat=k,
            group=group,
            labels=dict(labels or {}),
            overrides=dict(overrides or {}),
            applicable=applicable,
            reason=reason,
        )
        for k in range(1, repeats + 1)
    ]


def warmup_of(first: PlannedRun) -> PlannedRun:
    """The discarded warm-up run: a copy of the study's first applicable configuration."""
    return PlannedRun(
        config=first.config,
        repeat=0,
        group=first.group,
        labels=dict(first.labels),
        overrides=dict(first.overrides),
    )


def name_list(flag: str, text: str, allowed: Sequence[str]) -> list[str]:
    """A study flag's comma-separated names, each one of ``allowed`` (one clear error if
    not)."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    bad = [n for n in names if n not in allowed]
    if bad or not names:
        raise ConfigError(
            f"--{flag}: unknown {', '.join(bad) or '(empty)'}; choose from {', '.join(allowed)}"
        )
    return names


def positive(flag: str, value: int) -> int:
    """A study flag's count, at least 1 (one clear error if not)."""
    if value < 1:
        raise ConfigError(f"--{flag} must be at least 1, got {value}")
    return value


def core_budget(base_config: dict[str, Any]) -> int:
    """The cores every configuration of a study shares out: the base config's
    ``runtime.threads`` (``--threads``), or with ``auto`` the cores this process may use."""
    threads = (base_config.get("runtime") or {}).get("threads", "auto")
    return available_cpus() if threads == "auto" else int(threads)


def share_core_budget(base_config: dict[str, Any], runs: list[PlannedRun]) -> int:
    """Give every run the same core budget: intra-op threads = budget / processes, set
    explicitly (single-process runs too), so that configurations compare like with like.
    A configuration whose process count does not divide the budget is labelled as not
    keeping it (``budget_kept``), and reports compare no finding with it. Returns the
    budget."""
    budget = core_budget(base_config)
    base_procs = (base_config.get("dist") or {}).get("nproc", 1)
    for r in runs:
        procs = int(r.overrides.get("dist.nproc", base_procs) or 1)
        threads, kept = max(1, budget // procs), budget % procs == 0 and procs <= budget
        r.overrides["runtime.threads"] = threads
        r.labels.update(threads=threads, processes=procs, budget_kept=kept)
    return budget


@dataclass(frozen=True)
class PlanRequest:
    """What every study's planner is given: the run settings it starts from (plain config
    data), the device, the repeats of each configuration and whether an untimed warm-up
    run comes first."""

    base_config: dict[str, Any]
    device: torch.device
    repeats: int = 3
    warmup: bool = True


PlanResult = tuple[list[PlannedRun], dict[str, Any]]
"""What a study's plan body returns: its runs and its own options as study.json keeps them."""
PlanBody = Callable[..., PlanResult]
"""``body(request, **own) -> PlanResult``."""


def study_planner(kind: str) -> Callable[[PlanBody], Callable[..., StudyPlan]]:
    """Make a study's ``plan(base_config, device, *, repeats=3, warmup=True, **own)`` (the
    registry's planner) from its body, which only lists its configurations: the arguments
    every study takes, the options they add to study.json and the checks of
    :func:`finish_plan` are here, once."""

    def wrap(body: PlanBody) -> Callable[..., StudyPlan]:
        @functools.wraps(body, assigned=("__module__", "__name__", "__qualname__", "__doc__"))
        def plan(
            base_config: dict[str, Any],
            device: torch.device,
            *,
            repeats: int = 3,
            warmup: bool = True,
            **own: Any,
        ) -> StudyPlan:
            runs, options = body(PlanRequest(base_config, device, repeats, warmup), **own)
            options = plan_options(repeats, warmup, device, **options)
            return finish_plan(kind, base_config, options, runs, warmup)

        return plan

    return wrap


def plan_options(repeats: int, warmup: bool, device: torch.device, **own: Any) -> dict[str, Any]:
    """A study's options as its study.json keeps them, in this order: ``repeats``,
    ``warmup``, the study's ``own`` options (as given), then ``device``."""
    return {"repeats": repeats, "warmup": warmup, **own, "device": str(device)}


def finish_plan(
    kind: str,
    base_config: dict[str, Any],
    options: dict[str, Any],
    runs: list[PlannedRun],
    warmup: bool,
    *,
    equal_cores: bool = True,
) -> StudyPlan:
    """Add the warm-up run (if wanted) and check configuration names are unique and valid."""
    applicable = [r for r in runs if r.applicable]
    if not applicable:
        raise TrainscopeError(f"study {kind}: no configuration can run on this machine")
    ids = [r.id for r in runs]
    if len(set(ids)) != len(ids):
        raise AssertionError(f"duplicate run ids in study {kind}")  # a bug in a planner
    if equal_cores:  # (the doctor measures the run's own threads against a fix of them)
        options = {**options, "core_budget": share_core_budget(base_config, runs)}
    # Validate every configuration before the first run starts, not halfway through.
    for r in applicable:
        if r.repeat == 1 and is_script_plan(base_config):
            check_spec(merge(base_config, r.overrides)["script"])
        elif r.repeat == 1:
            from_dict(merge(base_config, r.overrides))
    if warmup:
        runs = [warmup_of(applicable[0]), *runs]
    return StudyPlan(kind=kind, base_config=base_config, options=options, runs=runs)
