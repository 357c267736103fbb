"""Ranks and stragglers: which rank of a multi-process run the others wait for (torch-free).

Every rank records its own step lines: rank 0 in ``RUN_DIR/metrics.jsonl``, rank ``R`` in
``RUN_DIR/ranks/rank<R>/metrics.jsonl``. From them, per training stage, the spread of the
per-rank totals and the slowest rank; and, as in Holistic Trace Analysis' straggler view,
the time each rank waits at the gradient synchronisation: per step, its time in the
communication-bearing stage minus the fastest rank's time there on the same step. Ranks
meet at every synchronisation, so the rank that waits least is the one the others wait
for (the straggler), and their extra communication time is time spent waiting for it.

Where the communication is timed depends on the strategy: a ``comm`` stage of its own
for the hand-written ones (gather-scatter, allreduce), inside ``backward`` for DDP, inside
``forward`` and ``backward`` for FSDP. The output says which stage it used.

The findings of the analysis are plain text (stage names come from the record as they
are); whoever renders them escapes them for their output. :func:`straggler` is the
doctor's rule built on the same analysis.
"""

from __future__ import annotations

import json
import math
import os
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainscope import registry
from trainscope.diagnosis.facts import STEP_STAGES
from trainscope.records.run_dir import STAGE_LABELS, RunRecord
from trainscope.records.view import SummaryView
from trainscope.util.numfmt import fmt_sig
from trainscope.util.spread import NONE, Spread, differ, spread

# A rank is "slower" only when the difference also matters: at least this share of the
# median step time. Below it, a difference that is consistent (h2d of 20 vs 30 us) is
# real but not worth chasing, and no straggler is claimed for it.
MIN_STEP_SHARE = 0.02

NO_STRAGGLER = "no straggler: per-rank stage times within noise"


# ---------------------------------------------------------------------------------------
# Reading every rank's step lines
# ---------------------------------------------------------------------------------------


@dataclass
class RankSteps:
    """Every rank's step lines as read from one run directory."""

    world_size: int
    steps: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    """rank -> its ``step`` lines, in file order (only ranks that recorded any)."""
    missing: dict[int, tuple[str, str]] = field(default_factory=dict)
    """rank -> (its file, relative to the run directory; why it gave no step lines)."""


def rank_metrics_path(run_dir: Path, rank: int) -> Path:
    """Where rank ``rank`` of a run writes its step lines."""
    if rank == 0:
        return Path(run_dir) / "metrics.jsonl"
    return Path(run_dir) / "ranks" / f"rank{rank}" / "metrics.jsonl"


def _step_lines(path: Path) -> list[dict[str, Any]]:
    # Tolerant like load_run: a killed rank may leave a half-written last line, and a
    # line that is not a JSON object is skipped, never fatal for the report.
    out = []
    for raw in path.read_bytes().splitlines():
        try:
            obj = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            continue
        if isinstance(obj, dict) and obj.get("event") == "step":
            out.append(obj)
    return out


def world_size(summary: Mapping[str, Any]) -> int:
    """The number of ranks a run had (1 for records that do not say)."""
    world = summary.get("world_size")
    if isinstance(world, int) and not isinstance(world, bool) and world >= 1:
        return world
    ranks = summary.get("ranks")
    return len(ranks) if isinstance(ranks, list) and ranks else 1


def read_rank_steps(
    run_dir: Path, summary: Mapping[str, Any], rank0_steps: list[dict[str, Any]]
) -> RankSteps:
    """Every rank's step lines: rank 0's as given (the record's own, already read), the
    others' from ``run_dir/ranks/``."""
    world = world_size(summary)
    out = RankSteps(world_size=world)
    # Listed once: a record may claim far more ranks than wrote a folder (up to 2**20).
    try:
        present = set(os.listdir(Path(run_dir) / "ranks"))
    except OSError:
        present = set()
    for rank in range(world):
        if rank == 0:
            lines = rank0_steps
            where = "metrics.jsonl"
        else:
            where = f"ranks/rank{rank}/metrics.jsonl"
            path = rank_metrics_path(run_dir, rank) if f"rank{rank}" in present else None
            if path is None or not path.is_file():
                out.missing[rank] = (where, "not found")
                continue
            try:
                lines = _step_lines(path)
            except OSError as e:
                out.missing[rank] = (where, f"unreadable ({e.strerror or e})")
                continue
        if lines:
            out.steps[rank] = lines
        else:
            out.missing[rank] = (where, "has no step lines")
    return out


def load_rank_steps(record: RunRecord) -> RankSteps:
    """Every rank's step lines: rank 0's from the record, the others' from ``ranks/``."""
    return read_rank_steps(record.path, record.summary, record.events("step"))


def rank_hosts(summary: Mapping[str, Any]) -> dict[int, str]:
    """rank -> the host it ran on, where the summary says."""
    out = {}
    for entry in summary.get("ranks") or []:
        if isinstance(entry, dict) and isinstance(entry.get("rank"), int) and entry.get("host"):
            out[entry["rank"]] = str(entry["host"])
    return out


def warmup_of(summary: Mapping[str, Any]) -> int:
    """The warm-up steps the run's steady state leaves out (0 where it does not say)."""
    k = SummaryView(summary).steady_state.get("warmup_steps")
    return k if isinstance(k, int) and not isinstance(k, bool) and k > 0 else 0


def strategy_of(summary: Mapping[str, Any]) -> str | None:
    """The run's distributed strategy, where the summary names one."""
    parallel = summary.get("parallel")
    strategy = summary.get("strategy") or (
        parallel.get("strategy") if isinstance(parallel, dict) else None
    )
    return strategy if isinstance(strategy, str) else None


# ---------------------------------------------------------------------------------------
# Where the communication is timed
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SyncStage:
    """The stage(s) holding the gradient communication, and how to say so."""

    stages: tuple[str, ...]
    where: str
    """E.g. ``"in communication (inside backward under DDP)"``."""
    name: str
    """Short column name, e.g. ``"comm"`` or ``"forward+backward"``."""


def sync_stage(strategy: str | None, stages: Iterable[str]) -> SyncStage | None:
    """The communication-bearing stage(s) of a run, or None where there is none.

    A ``comm`` stage (hand-written strategies) holds all of it; otherwise DDP communicates
    inside ``backward`` and FSDP inside ``forward`` and ``backward``. A run without any
    (``--data-only``, an unknown strategy) has no place where ranks visibly wait.
    """
    present = set(stages)
    if "comm" in present:
        return SyncStage(("comm",), "in communication (the comm stage)", "comm")
    inside = registry.capabilities(strategy).comm_in  # where the strategy communicates
    if not inside or "comm" in inside or not set(inside) <= present:
        return None
    where = " and ".join(inside)
    return SyncStage(inside, f"in communication (inside {where} under {str(strategy).upper()})",
                     "+".join(inside))  # fmt: skip


# ---------------------------------------------------------------------------------------
# The analysis
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StageStats:
    """One stage across ranks over the analysed steps."""

    stage: str
    totals: dict[int, float]
    """rank -> seconds summed over the analysed steps."""
    per_step: dict[int, Spread]
    """rank -> median and IQR of its per-step seconds."""
    slower_rank: int | None
    """The rank clearly slower than every other here (see :func:`clearly_above`)."""


@dataclass(frozen=True)
class WaitStats:
    """One rank's waiting at the gradient synchronisation over the analysed steps."""

    rank: int
    sync_per_step: Spread
    """Its per-step seconds in the communication-bearing stage(s)."""
    total_s: float
    """Seconds it spent beyond the fastest rank's time in that stage, summed over steps."""
    step_total_s: float
    """Its step time (every stage) summed over the same steps."""
    wait_per_step: Spread = NONE
    """Median and IQR of its per-step waiting (the seconds summed in ``total_s``)."""


@dataclass
class StragglerAnalysis:
    """What :func:`analyze_stragglers` found; tables and findings are built from it."""

    ranks: list[int]
    steps: list[int]
    """The step numbers analysed (recorded by every rank, warm-up left out)."""
    warmup_left_out: int
    sync: SyncStage | None
    stages: list[StageStats]
    waiting: dict[int, WaitStats]
    floor_s: float
    """The smallest difference (seconds per step) counted as mattering."""
    straggler: int | None = None
    slow_stage: str | None = None
    findings: list[str] = field(default_factory=list)
    """Plain text (stage names as the record has them): escape where it is rendered."""


def clearly_above(slow: Spread, others: Sequence[Spread], floor_s: float) -> bool:
    """The claim rule: ``slow`` lies above every one of ``others`` beyond noise.

    True when each spread has n >= 2 and ``slow``'s interquartile range (min–max below 5
    steps, as everywhere in trainscope: :mod:`trainscope.util.spread`) lies entirely above every
    other one's, and its median exceeds the highest other median by at least ``floor_s``
    (so a consistent but negligible difference is not a finding).
    """
    if not others or slow.median is None:
        return False
    for o in others:
        if o.median is None or not differ(slow, o) or slow.median <= o.median:
            return False
    return slow.median - max(o.median for o in others if o.median is not None) >= floor_s


def _stage_order(names: Iterable[str]) -> list[str]:
    names = set(names)
    return [s for s in STEP_STAGES if s in names] + sorted(names - set(STEP_STAGES))


def _seconds(value: Any) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def _by_step(lines: Sequence[Mapping[str, Any]]) -> dict[int, dict[str, float]]:
    """step number -> finite stage seconds (a repeated step number keeps its last line)."""
    out: dict[int, dict[str, float]] = {}
    for line in lines:
        step, stages = line.get("step"), line.get("stages")
        if not isinstance(step, int) or isinstance(step, bool) or not isinstance(stages, dict):
            continue
        out[step] = {str(k): s for k, v in stages.items() if (s := _seconds(v)) is not None}
    return out


def analyze_stragglers(
    steps_by_rank: Mapping[int, Sequence[Mapping[str, Any]]],
    strategy: str | None,
    warmup_steps: int = 0,
) -> StragglerAnalysis:
    """Per-stage spread across ranks, each rank's waiting time, and the straggler verdict.

    Only steps every rank recorded are compared, step by step; the first ``warmup_steps``
    of them are left out (the first collective also waits for the slowest start-up),
    unless that would leave fewer than two.

    The rule for naming a straggler (medians and interquartile ranges of per-step times,
    see :func:`clearly_above`; the floor is 2% of the median step time):

    - the **straggler** is the rank whose per-step time in the communication-bearing stage
      lies below every other rank's beyond noise: the others clearly wait for it there;
    - its **slow stage** is the stage outside the communication-bearing one in which its
      per-step times lie above every other rank's beyond noise (the largest excess if
      several): what makes the others wait;
    - a rank slower in some stage whom the others do not measurably wait for is reported
      as slower, not as a straggler; with neither, there is no straggler ("within noise").

    Under DDP a straggler slow in its own backward computation is invisible here: its
    backward (slow compute, little waiting) and the others' (fast compute, more waiting)
    take about the same time, because the communication is inside backward.
    """
    per_rank = {r: _by_step(lines) for r, lines in sorted(steps_by_rank.items())}
    ranks = [r for r, steps in per_rank.items() if steps]
    common = sorted(set.intersection(*(set(per_rank[r]) for r in ranks))) if ranks else []
    k = max(warmup_steps, 0)
    if len(common) - k < 2:
        k = 0  # too few steady steps: compare them all rather than nothing
    steps = common[k:]
    names = _stage_order({s for r in ranks for n in steps for s in per_rank[r][n]})

    def times(rank: int, stages: Sequence[str]) -> list[float]:
        return [sum(per_rank[rank][n].get(s, 0.0) for s in stages) for n in steps]

    step_medians = [statistics.median(times(r, names)) for r in ranks if steps]
    floor = MIN_STEP_SHARE * statistics.median(step_medians) if step_medians else 0.0
    sync = sync_stage(strategy, names)
    analysis = StragglerAnalysis(
        ranks=ranks,
        steps=steps,
        warmup_left_out=k,
        sync=sync,
        stages=[
            _stage_stats(stage, {r: times(r, [stage]) for r in ranks}, floor) for stage in names
        ],
        waiting={},
        floor_s=floor,
    )
    if sync is not None and steps:
        analysis.waiting = _waiting(
            {r: times(r, sync.stages) for r in ranks}, {r: sum(times(r, names)) for r in ranks}
        )
    _verdict(analysis)
    return analysis


def _stage_stats(stage: str, times: dict[int, list[float]], floor: float) -> StageStats:
    """One stage's totals and per-step spreads, and the rank clearly slower there."""
    per_step = {r: spread(t) for r, t in times.items()}
    slower = next(
        (
            r
            for r in times
            if clearly_above(per_step[r], [per_step[o] for o in times if o != r], floor)
        ),
        None,
    )
    return StageStats(stage, {r: sum(t) for r, t in times.items()}, per_step, slower)


def _waiting(
    sync_times: dict[int, list[float]], step_totals: dict[int, float]
) -> dict[int, WaitStats]:
    """Each rank's waiting: per step, its sync time minus the fastest rank's."""
    n = min(len(t) for t in sync_times.values())
    fastest = [min(t[i] for t in sync_times.values()) for i in range(n)]
    out = {}
    for r, mine in sync_times.items():
        waits = [t - f for t, f in zip(mine, fastest)]
        out[r] = WaitStats(r, spread(mine), sum(waits), step_totals[r], spread(waits))
    return out


# ---------------------------------------------------------------------------------------
# The verdict
# ---------------------------------------------------------------------------------------


def per_step_ms(seconds: float) -> str:
    """Milliseconds, one decimal from 1 ms, two significant digits below."""
    value = 1e3 * seconds
    return f"{value:.1f}" if abs(value) >= 1 or value == 0 else fmt_sig(value, 2)


def stage_label(stage: str) -> str:
    """A stage as a reader knows it (``data wait``); a name of the record's own as it is."""
    return STAGE_LABELS.get(stage, stage)


def _mean_per_step(stats: StageStats, rank: int, n: int) -> float:
    return stats.totals[rank] / n if n else 0.0


def slow_stages(a: StragglerAnalysis) -> dict[int, list[StageStats]]:
    """rank -> the stages outside the communication where it is clearly slower than every
    other rank."""
    sync_names = set(a.sync.stages) if a.sync else set()
    out: dict[int, list[StageStats]] = {}
    for st in a.stages:
        if st.stage not in sync_names and st.slower_rank is not None:
            out.setdefault(st.slower_rank, []).append(st)
    return out


def stage_excess(st: StageStats, rank: int) -> float:
    """Seconds per step by which ``rank``'s median exceeds the highest other rank's."""
    others = [s.median for r, s in st.per_step.items() if r != rank and s.median is not None]
    return (st.per_step[rank].median or 0.0) - max(others, default=0.0)


def slowest_stage(a: StragglerAnalysis, rank: int) -> StageStats | None:
    """The stage in which ``rank`` is most clearly slower than the others (None: none)."""
    stats = slow_stages(a).get(rank)
    return max(stats, key=lambda s: stage_excess(s, rank)) if stats else None


def _waited_for(a: StragglerAnalysis) -> int | None:
    """The rank every other one clearly waits for at the synchronisation, if any."""
    if not a.waiting:
        return None
    least = min(a.waiting, key=lambda r: a.waiting[r].sync_per_step.median or 0.0)
    others = [a.waiting[r].sync_per_step for r in a.ranks if r != least]
    if all(clearly_above(o, [a.waiting[least].sync_per_step], a.floor_s) for o in others):
        return least
    return None


def _slow_text(a: StragglerAnalysis, st: StageStats, rank: int) -> str:
    n = len(a.steps)
    mine = _mean_per_step(st, rank, n)
    best = min(_mean_per_step(st, r, n) for r in a.ranks if r != rank)
    return (
        f"its {stage_label(st.stage)} is {per_step_ms(mine)} ms/step against "
        f"{per_step_ms(best)} ms on the fastest rank"
    )


def _straggler_text(a: StragglerAnalysis, sync: SyncStage, r: int) -> str:
    """The finding on the rank ``r`` the others wait for; sets its slow stage."""
    n = len(a.steps)
    waits = [a.waiting[o].total_s / n for o in a.ranks if o != r]
    who = (
        "the other rank waits"
        if len(waits) == 1
        else f"the other {len(waits)} ranks wait on average"
    )
    wait_text = f"{who} {per_step_ms(sum(waits) / len(waits))} ms/step for it {sync.where}"
    st = slowest_stage(a, r)
    if st is not None:
        a.slow_stage = st.stage
        return f"rank {r} is the straggler: {_slow_text(a, st, r)}; {wait_text}"
    hidden = (
        ", or inside backward, which under DDP also holds the communication"
        if sync.stages == ("backward",)
        else ""
    )
    return (
        f"rank {r} is the straggler: {wait_text}, but no single stage of its own is "
        f"clearly slower (its delay is spread over several stages{hidden})"
    )


def _verdict(a: StragglerAnalysis) -> None:
    """Fill ``straggler``, ``slow_stage`` and ``findings`` by the rule of the analysis."""
    n = len(a.steps)
    if len(a.ranks) < 2:
        a.findings.append("only one rank recorded step times: nothing to compare")
        return
    if n < 2:
        a.findings.append(
            f"too few steps recorded by every rank ({n}) to tell a straggler from noise"
        )
        return
    waited_for = _waited_for(a)
    if waited_for is not None and a.sync is not None:
        a.straggler = waited_for
        a.findings.append(_straggler_text(a, a.sync, waited_for))
        return
    slow = slow_stages(a)
    for r in sorted(slow):
        st = slowest_stage(a, r)
        if st is None:  # never: r is in ``slow`` for at least one stage
            continue
        if a.sync is None:
            tail = "this run has no gradient communication, so no rank waits for it"
        else:
            tail = (
                f"the other ranks do not measurably wait for it {a.sync.where}, so it is "
                "not claimed as a straggler"
            )
        a.findings.append(f"rank {r} is slower: {_slow_text(a, st, r)}; {tail}")
    if not slow:
        a.findings.append(NO_STRAGGLER)
