"""The figures a diagnosis rests on, read from a run directory only (torch-free).

Every figure is a median with its spread and n, from the run's steady-state steps (the
first ``warmup_steps`` left out, as the run's own summary does). Whatever cannot be read
(a missing stage, a negative or non-finite time, a summary field that does not fit its
schema) is left out and said in :attr:`RunFacts.unread`, so a damaged record gives a
partial diagnosis that says what it could not use, never a traceback.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainscope.records.run_dir import STAGES, RecordWarning, RunRecord, load_run
from trainscope.records.source import is_script_record
from trainscope.records.view import SummaryView
from trainscope.util.spread import Spread, spread

STEP_STAGES = ("data_wait", "h2d", "forward", "backward", "comm", "pipeline_wait", "optimizer")
"""The stages of a training step, in order (the others are outside steps)."""


@dataclass
class RunFacts:
    """What the doctor knows about one run."""

    path: Path
    summary: dict[str, Any]
    config: dict[str, Any]
    step_s: Spread
    """Seconds per steady-state step (the sum of its stages)."""
    stages: dict[str, Spread]
    """Seconds per steady-state step spent in each step stage that was recorded."""
    totals_s: dict[str, float]
    """The run's seconds per stage (``stages_s``: every step, and setup, evaluation...)."""
    wall_s: float | None
    losses: list[tuple[int, float]]
    """(step, loss) of every step record, in order, non-finite ones included."""
    unread: list[str] = field(default_factory=list)
    step_events: list[dict[str, Any]] = field(default_factory=list)
    """The record's ``step`` lines as read (rank 0's, for rules that compare ranks)."""
    env: dict[str, Any] = field(default_factory=dict)
    """env.json: the devices and the machine (their memory)."""
    system: list[dict[str, Any]] = field(default_factory=list)
    """system.jsonl: the system sampler's samples (CPU, memory, GPU utilisation)."""
    memory_limit_bytes: int | None = None
    """A memory limit the user gives (``--memory-limit``); None: the device's own."""
    link_fits: dict[str, Any] = field(default_factory=dict)
    """α–β fits of the link the ranks talk over (``--fit``/``--interconnect``); empty: none."""
    link_where: str = ""
    """Where the fits come from, in a few words."""

    @property
    def view(self) -> SummaryView:
        """The summary's fields, typed (:class:`~trainscope.records.view.SummaryView`)."""
        return SummaryView(self.summary)

    @property
    def is_script(self) -> bool:
        """A run of the user's own code (``trainscope profile``): its fixes are changes
        to that code, not flags."""
        return is_script_record(self.summary)

    def setting(self, section: str, key: str, default: Any = None) -> Any:
        """A value of the run's config.yaml (``default`` when it is not there)."""
        part = self.config.get(section)
        return part.get(key, default) if isinstance(part, dict) else default

    def cuda_index(self) -> int | None:
        """The index of the run's CUDA device (``cuda`` is 0), or None off a GPU."""
        device = self.view.device
        if not device.startswith("cuda"):
            return None
        idx = device.partition(":")[2]
        return int(idx) if idx.isdigit() else 0

    def free_cores(self) -> int | None:
        """Cores this machine has beyond the run's own threads (all its processes on the
        node); None where the record does not say."""
        cpu = self.view.cpu
        cores, threads = cpu.get("cores"), cpu.get("threads")
        procs = cpu.get("processes_on_node", 1)
        if not all(type(x) is int and x > 0 for x in (cores, threads, procs)):
            return None
        return max(0, cores - threads * procs)

    def share(self, stage: str) -> float | None:
        """The stage's median as a share of the median step (None when not recorded)."""
        sp = self.stages.get(stage)
        if sp is None or not sp.ok or not self.step_s.ok or not self.step_s.median:
            return None
        return float(sp.median) / float(self.step_s.median)

    def wall_share(self, stage: str) -> float | None:
        """The stage's total as a share of the run's wall time."""
        total = self.totals_s.get(stage)
        if total is None or not self.wall_s:
            return None
        return total / self.wall_s


def _seconds(value: Any) -> float | None:
    """A recorded duration, or None where it is not a finite number >= 0."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) and value >= 0 else None


def _steady_steps(record: Any, unread: list[str]) -> list[dict[str, float]]:
    """Each steady-state step's stage seconds (warm-up left out). A script's step holds
    its ``other`` too: the script's own code inside the step (a get_batch(), a closure's
    logging) is part of its step time, as the run's steady step time counts it; without
    it a Lightning step's optimizer looked like a third of the step, not a sixth."""
    steps = [e for e in record.events("step") if isinstance(e.get("stages"), dict)]
    names = (*STEP_STAGES, "other") if is_script_record(record.summary) else STEP_STAGES
    warm = record.view.steady_state.get("warmup_steps")
    warm = warm if isinstance(warm, int) and 0 <= warm < len(steps) else 0
    out, bad = [], 0
    for event in steps[warm:]:
        stages = {k: _seconds(v) for k, v in event["stages"].items() if k in names}
        bad += sum(v is None for v in stages.values())
        out.append({k: v for k, v in stages.items() if v is not None})
    if bad:
        unread.append(f"{bad} stage time(s) in metrics.jsonl that are not seconds >= 0")
    if not out:
        unread.append("no step records with stage times (metrics.jsonl)")
    return out


def _losses(record: Any) -> list[tuple[int, float]]:
    """(step, loss) of each step line. Strict JSON writes a NaN or infinite loss as null,
    so a null loss of a training step is non-finite (a data-only run has none at all)."""
    data_only = record.view.data_only
    out = []
    for event in record.events("step"):
        step, loss = event.get("step"), event.get("loss")
        if not isinstance(step, int) or isinstance(loss, bool):
            continue
        if isinstance(loss, (int, float)):
            out.append((step, float(loss)))
        elif loss is None and "loss" in event and not data_only:
            out.append((step, math.nan))
    return out


def read_facts(run_dir: str | Path) -> RunFacts:
    """Read ``run_dir``'s record; a directory that is not a run is one clear
    :class:`~trainscope.errors.TrainscopeError`."""
    with warnings.catch_warnings():  # what is left out is listed in ``unread`` instead
        warnings.simplefilter("ignore", RecordWarning)
        return facts_of(load_run(run_dir))


def script_config(summary: dict[str, Any]) -> dict[str, Any]:
    """What a script run's hooks saw, in config.yaml's terms, for the rules that read a
    setting: its first optimizer (name, fused or foreach) and its training DataLoader."""
    script = SummaryView(summary).script
    optimizers = [o for o in script.get("optimizers") or [] if isinstance(o, dict)]
    loaders = [x for x in script.get("loaders") or [] if isinstance(x, dict) and x.get("training")]
    train: dict[str, Any] = {}
    if optimizers:
        first = optimizers[0]
        impl = "fused" if first.get("fused") else "foreach" if first.get("foreach") else "auto"
        train = {"optimizer": str(first.get("name", "")).lower(), "optimizer_impl": impl}
    data: dict[str, Any] = {"loader": "torch" if loaders else "script"}
    if loaders:
        data["pin_memory"] = bool(loaders[0].get("pin_memory"))
    return {"train": train, "data": data}


def facts_of(record: RunRecord) -> RunFacts:
    """The figures of a run record already read (the run report's)."""
    run_dir = record.path
    unread = list(record.left_out)
    steps = _steady_steps(record, unread)
    stage_names = [s for s in STEP_STAGES if any(s in st for st in steps)]
    stages = {s: spread(st.get(s, 0.0) for st in steps) for s in stage_names}
    step_s = spread(sum(st.values()) for st in steps)
    totals_s = {}
    for name, value in record.view.stages_s.items():
        if name in STAGES and (seconds := _seconds(value)) is not None:
            totals_s[name] = seconds
    if not totals_s:
        unread.append("the run's stage totals (summary.json stages_s)")
    wall = _seconds(record.view.wall_time_s)
    if wall is None:
        unread.append("the run's wall time (summary.json wall_time_s)")
    config = record.config
    if not config and is_script_record(record.summary):
        config = script_config(record.summary)
    return RunFacts(
        Path(run_dir), record.summary, config, step_s, stages, totals_s, wall,
        _losses(record), unread, record.events("step"), record.env, record.system,
    )  # fmt: skip
