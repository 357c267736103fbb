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

from trainscope.records.run_dir import STAGE_LABELS, RunRecord
from trainscope.reports.document import Document, escape_inline, inline_code
from trainscope.reports.tables import Table, fmt_pct, fmt_seconds, fmt_sig
from trainscope.util.spread import Spread, differ, spread

# The stages of one training step, in the order a step runs them (others found in the
# records follow, sorted).
STEP_STAGES = ("data_wait", "h2d", "forward", "backward", "comm", "optimizer")

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


def load_rank_steps(record: RunRecord) -> RankSteps:
    """Every rank's step lines: rank 0's from the record, the others' from ``ranks/``."""
    world = world_size(record.summary)
    out = RankSteps(world_size=world)
    # Listed once: a record may claim far more ranks than wrote a folder (up to 2**20).
    try:
        present = set(os.listdir(record.path / "ranks"))
    except OSError:
        present = set()
    for rank in range(world):
        if rank == 0:
            lines = record.events("step")
            where = "metrics.jsonl"
        else:
            where = f"ranks/rank{rank}/metrics.jsonl"
            path = rank_metrics_path(record.path, rank) if f"rank{rank}" in present else None
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
    if strategy == "ddp" and "backward" in present:
        return SyncStage(("backward",), "in communication (inside backward under DDP)", "backward")
    if strategy == "fsdp" and {"forward", "backward"} <= present:
        return SyncStage(
            ("forward", "backward"),
            "in communication (inside forward and backward under FSDP)",
            "forward+backward",
        )
    return None


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
    sync = sync_stage(strategy, names)

    def times(rank: int, stages: Sequence[str]) -> list[float]:
        return [sum(per_rank[rank][n].get(s, 0.0) for s in stages) for n in steps]

    step_medians = [statistics.median(times(r, names)) for r in ranks if steps]
    floor = MIN_STEP_SHARE * statistics.median(step_medians) if step_medians else 0.0
    analysis = StragglerAnalysis(
        ranks=ranks,
        steps=steps,
        warmup_left_out=k,
        sync=sync,
        stages=[],
        waiting={},
        floor_s=floor,
    )
    for stage in names:
        per_step = {r: spread(times(r, [stage])) for r in ranks}
        slower = next(
            (
                r
                for r in ranks
                if clearly_above(per_step[r], [per_step[o] for o in ranks if o != r], floor)
            ),
            None,
        )
        totals = {r: sum(times(r, [stage])) for r in ranks}
        analysis.stages.append(StageStats(stage, totals, per_step, slower))

    if sync is not None and steps:
        sync_times = {r: times(r, sync.stages) for r in ranks}
        fastest = [min(sync_times[r][i] for r in ranks) for i in range(len(steps))]
        for r in ranks:
            analysis.waiting[r] = WaitStats(
                rank=r,
                sync_per_step=spread(sync_times[r]),
                total_s=sum(t - f for t, f in zip(sync_times[r], fastest)),
                step_total_s=sum(times(r, names)),
            )
    _verdict(analysis)
    return analysis


def _ms(seconds: float) -> str:
    """Milliseconds, one decimal from 1 ms, two significant digits below."""
    ms = 1e3 * seconds
    return f"{ms:.1f}" if abs(ms) >= 1 or ms == 0 else fmt_sig(ms, 2)


def _label(stage: str) -> str:
    # Stage names come from the record: escaped, they stay literal in the findings.
    return escape_inline(STAGE_LABELS.get(stage, stage))


def _mean_per_step(stats: StageStats, rank: int, n: int) -> float:
    return stats.totals[rank] / n if n else 0.0


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
    sync_names = set(a.sync.stages) if a.sync else set()
    # The slowest rank of each stage outside the communication, where beyond noise.
    slow: dict[int, list[StageStats]] = {}
    for st in a.stages:
        if st.stage not in sync_names and st.slower_rank is not None:
            slow.setdefault(st.slower_rank, []).append(st)

    def excess(st: StageStats, rank: int) -> float:
        others = [s.median for r, s in st.per_step.items() if r != rank and s.median is not None]
        return (st.per_step[rank].median or 0.0) - max(others)

    def slow_text(st: StageStats, rank: int) -> str:
        mine = _mean_per_step(st, rank, n)
        best = min(_mean_per_step(st, r, n) for r in a.ranks if r != rank)
        return (
            f"its {_label(st.stage)} is {_ms(mine)} ms/step against {_ms(best)} ms on the "
            "fastest rank"
        )

    waited_for = None
    if a.waiting:
        least = min(a.waiting, key=lambda r: a.waiting[r].sync_per_step.median or 0.0)
        others = [a.waiting[r].sync_per_step for r in a.ranks if r != least]
        if all(clearly_above(o, [a.waiting[least].sync_per_step], a.floor_s) for o in others):
            waited_for = least

    if waited_for is not None and a.sync is not None:
        r = waited_for
        a.straggler = r
        waits = [a.waiting[o].total_s / n for o in a.ranks if o != r]
        who = (
            "the other rank waits"
            if len(waits) == 1
            else f"the other {len(waits)} ranks wait on average"
        )
        wait_text = f"{who} {_ms(sum(waits) / len(waits))} ms/step for it {a.sync.where}"
        mine = slow.get(r, [])
        if mine:
            st = max(mine, key=lambda s: excess(s, r))
            a.slow_stage = st.stage
            a.findings.append(f"rank {r} is the straggler: {slow_text(st, r)}; {wait_text}")
        else:
            hidden = (
                ", or inside backward, which under DDP also holds the communication"
                if a.sync.stages == ("backward",)
                else ""
            )
            a.findings.append(
                f"rank {r} is the straggler: {wait_text}, but no single stage of its own is "
                f"clearly slower (its delay is spread over several stages{hidden})"
            )
        return

    for r, stats in sorted(slow.items()):
        st = max(stats, key=lambda s: excess(s, r))
        if a.sync is None:
            tail = "this run has no gradient communication, so no rank waits for it"
        else:
            tail = (
                f"the other ranks do not measurably wait for it {a.sync.where}, so it is "
                "not claimed as a straggler"
            )
        a.findings.append(f"rank {r} is slower: {slow_text(st, r)}; {tail}")
    if not slow:
        a.findings.append(NO_STRAGGLER)


# ---------------------------------------------------------------------------------------
# Tables
# ---------------------------------------------------------------------------------------


def _steps_text(a: StragglerAnalysis) -> str:
    k = a.warmup_left_out
    left = f", the first {k} warm-up step{'s' if k > 1 else ''} left out" if k else ""
    return f"over the {len(a.steps)} steps every rank recorded{left}"


def rank_stage_table(a: StragglerAnalysis) -> Table:
    """Stage | min / median / max of the per-rank totals (s and ms/step) | slowest rank |
    spread (max − min as a share of the median)."""
    n = len(a.steps)
    rows: list[list[object]] = []
    for st in a.stages:
        totals = sorted(st.totals.values())
        lo, med, hi = totals[0], statistics.median(totals), totals[-1]
        slowest = max(st.totals, key=lambda r: st.totals[r])
        rows.append(
            [
                STAGE_LABELS.get(st.stage, st.stage),
                fmt_seconds(lo),
                fmt_seconds(med),
                fmt_seconds(hi),
                _ms(lo / n) if n else None,
                _ms(med / n) if n else None,
                _ms(hi / n) if n else None,
                str(slowest) if st.slower_rank == slowest else f"{slowest} (within noise)",
                fmt_pct((hi - lo) / med) if med > 0 else None,
            ]
        )
    sync = (
        f" In the communication-bearing stage ({a.sync.name}) the slowest rank is the one "
        "that waits, not the one that is slow."
        if a.sync
        else ""
    )
    return Table(
        [
            "Stage",
            "min (s)",
            "median (s)",
            "max (s)",
            "min (ms/step)",
            "median (ms/step)",
            "max (ms/step)",
            "Slowest rank",
            "Spread",
        ],
        rows,
        f"Per-stage time across {len(a.ranks)} ranks {_steps_text(a)}: min, median and max "
        "of the per-rank totals, spread = (max − min) / median. A slowest rank is named "
        "without '(within noise)' only when its per-step times lie above every other "
        f"rank's beyond their interquartile ranges.{sync}",
        "tab:rank-stages",
        align="lrrrrrrlr",
    )


def waiting_table(a: StragglerAnalysis, hosts: Mapping[int, str] | None = None) -> Table:
    """Rank | (host) | its per-step time in the communication-bearing stage | waiting per
    step, in total and as a share of its step time. Empty without such a stage."""
    n = len(a.steps)
    show_hosts = bool(hosts) and len(set((hosts or {}).values())) > 1
    rows: list[list[object]] = []
    for r in a.ranks:
        w = a.waiting.get(r)
        if w is None:
            continue
        med = w.sync_per_step.median
        row: list[object] = [str(r)]
        if show_hosts:
            row.append((hosts or {}).get(r))
        row += [
            _ms(med) if med is not None else None,
            _ms(w.total_s / n) if n else None,
            fmt_seconds(w.total_s),
            fmt_pct(w.total_s / w.step_total_s) if w.step_total_s > 0 else None,
        ]
        rows.append(row)
    name = a.sync.name if a.sync else "comm"
    where = a.sync.where if a.sync else ""
    columns = ["Rank", *(["Host"] if show_hosts else [])]
    columns += [
        f"{name} (ms/step, median)",
        "waiting (ms/step)",
        "waiting (s)",
        "waiting / step time",
    ]
    return Table(
        columns,
        rows,
        f"Time each rank waits for the others {where}, {_steps_text(a)}: per step, its "
        f"time in {name} minus the fastest rank's on the same step. The rank that waits "
        "least is the one the others wait for.",
        "tab:rank-waiting",
        align="l" + ("l" if show_hosts else "") + "rrrr",
    )


# ---------------------------------------------------------------------------------------
# The report section
# ---------------------------------------------------------------------------------------


def _hosts(summary: Mapping[str, Any]) -> dict[int, str]:
    out = {}
    for entry in summary.get("ranks") or []:
        if isinstance(entry, dict) and isinstance(entry.get("rank"), int) and entry.get("host"):
            out[entry["rank"]] = str(entry["host"])
    return out


def _warmup_steps(summary: Mapping[str, Any]) -> int:
    k = (summary.get("steady_state") or {}).get("warmup_steps")
    return k if isinstance(k, int) and not isinstance(k, bool) and k > 0 else 0


def _strategy(summary: Mapping[str, Any]) -> str | None:
    strategy = summary.get("strategy") or (summary.get("parallel") or {}).get("strategy")
    return strategy if isinstance(strategy, str) else None


def straggler_section(record: RunRecord, doc: Document) -> list[str]:
    """Add "Ranks and stragglers" (tables and findings) to ``doc``; return the findings.

    Adds nothing to a one-rank run. When ranks' step files are missing it says which and
    why, and compares the ranks that remain (if at least two).
    """
    summary = record.summary
    if world_size(summary) < 2:
        return []
    doc.heading("Ranks and stragglers")
    loaded = load_rank_steps(record)
    findings: list[str] = []
    if loaded.missing:
        missing = sorted(loaded.missing.items())
        what = "; ".join(
            f"rank {r}: {inline_code(file)} {escape_inline(why)}" for r, (file, why) in missing[:8]
        )
        if len(missing) > 8:  # a record may claim thousands of ranks that left nothing
            what += f"; and {len(missing) - 8} more ranks"
        if len(loaded.steps) < 2:
            text = (
                f"no straggler analysis: per-rank step records are missing ({what}); it "
                "needs the step times of at least two ranks"
            )
        else:
            text = (
                f"per-rank step records are missing ({what}): only ranks "
                f"{', '.join(map(str, sorted(loaded.steps)))} are compared, and a missing "
                "rank may be the straggler"
            )
        doc.note(text)
        findings.append(text)
        if len(loaded.steps) < 2:
            return findings
    strategy = _strategy(summary)
    analysis = analyze_stragglers(loaded.steps, strategy, _warmup_steps(summary))
    if analysis.sync is not None:
        how = (
            f"Waiting is measured {escape_inline(analysis.sync.where)}: per step, each "
            "rank's time there minus the fastest rank's; ranks meet at every gradient "
            "synchronisation, so the rank that waits least is the one the others wait for."
        )
    else:
        how = "This run has no timed gradient communication, so waiting is not measured."
    doc.paragraph(
        "Step times of every rank, compared step by step "
        f"({escape_inline(_steps_text(analysis))}). {how} A straggler is named only when "
        "the difference is beyond noise: the ranks' per-step times do not overlap in their "
        f"interquartile ranges and differ by at least {fmt_pct(MIN_STEP_SHARE, 0)} of a step."
    )
    if analysis.steps:
        doc.table(rank_stage_table(analysis))
        if analysis.waiting:
            doc.table(waiting_table(analysis, _hosts(summary)))
    doc.bullets(analysis.findings)
    return findings + analysis.findings
