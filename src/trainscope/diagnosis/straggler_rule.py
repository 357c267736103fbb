"""The doctor's straggler rule: in a multi-rank run, the rank the others wait for, and
whether its data, its compute or its host is slow (torch-free; the analysis is
:mod:`trainscope.diagnosis.stragglers`)."""

from __future__ import annotations

from typing import Any

from trainscope.diagnosis.facts import RunFacts
from trainscope.diagnosis.findings import Finding, ms, pct, severity_of
from trainscope.diagnosis.stragglers import (
    RankSteps,
    StageStats,
    StragglerAnalysis,
    analyze_stragglers,
    per_step_ms,
    rank_hosts,
    read_rank_steps,
    slow_stages,
    slowest_stage,
    stage_excess,
    stage_label,
    strategy_of,
    warmup_of,
    world_size,
)
from trainscope.util.spread import spread

# What is slow on a rank slow in these stages: its data, or its compute.
SLOW_PARTS = {"data_wait": "data", "h2d": "data", "forward": "compute", "backward": "compute",
              "optimizer": "compute"}  # fmt: skip


def _suspect(a: StragglerAnalysis) -> tuple[int, StageStats | None] | None:
    """The rank to report and its slow stage: the straggler, else the rank most clearly
    slower than the others (None: every rank within noise)."""
    if a.straggler is not None:
        return a.straggler, slowest_stage(a, a.straggler)
    slower = [(r, st) for r in slow_stages(a) if (st := slowest_stage(a, r)) is not None]
    return max(slower, key=lambda p: (stage_excess(p[1], p[0]), -p[0])) if slower else None


def _problem(a: StragglerAnalysis, r: int, st: StageStats | None) -> str:
    others = len(a.ranks) - 1
    who = "the other rank waits" if others == 1 else f"the other {others} ranks wait"
    slow = "its host is slow (no single stage of its own is clearly slower)"
    if st is not None:
        mine = st.per_step[r].median or 0.0
        best = min(s.median for o, s in st.per_step.items() if o != r and s.median is not None)
        part = SLOW_PARTS.get(st.stage, f"{stage_label(st.stage)} stage")
        slow = (f"its {part} is slow ({stage_label(st.stage)} {per_step_ms(mine)} ms/step "
                f"against {per_step_ms(best)} ms on the fastest other rank)")  # fmt: skip
    if a.straggler == r and a.sync is not None:
        return f"Rank {r} is the straggler: {slow}, and {who} for it {a.sync.where}."
    if a.sync is None:
        return (f"Rank {r} is slower than the others: {slow}, but this run has no gradient "
                "communication, so no rank waits for it.")  # fmt: skip
    return (f"Rank {r} is slower than the others: {slow}, but the other ranks do not "
            f"measurably wait for it {a.sync.where}.")  # fmt: skip


def _evidence(a: StragglerAnalysis, r: int, st: StageStats | None) -> list[str]:
    """The rank's per-step time against the fastest other's, and the others' waiting."""
    out = []
    if st is not None:
        label = stage_label(st.stage)
        others = [o for o in st.per_step if o != r and st.per_step[o].ok]
        fastest = min(others, key=lambda o: st.per_step[o].median or 0.0)
        out.append(ms(st.per_step[r], f"rank {r} {label} per step"))
        out.append(ms(st.per_step[fastest], f"rank {fastest} (the fastest other) {label} per step"))
    elif r in a.waiting and a.sync is not None:
        out.append(ms(a.waiting[r].sync_per_step, f"rank {r} {a.sync.name} per step"))
    waiting = [o for o in a.ranks if o != r and o in a.waiting]
    out += [ms(a.waiting[o].wait_per_step, f"rank {o} waiting per step") for o in waiting[:3]]
    if len(waiting) > 3:  # thousands of ranks: their medians as one figure
        more = spread(a.waiting[o].wait_per_step.median for o in waiting[3:])
        out.append(ms(more, f"median waiting per step of {len(waiting) - 3} more ranks"))
    return out


def _notes(summary: dict[str, Any], loaded: RankSteps, a: StragglerAnalysis, r: int) -> list[str]:
    notes = []
    hosts = rank_hosts(summary)
    if r in hosts:
        others = sorted({h for o, h in hosts.items() if o != r and o in a.ranks})
        on = (", as did the others" if others == [hosts[r]]
              else f"; the others on {', '.join(others)}" if others else "")  # fmt: skip
        notes.append(f"rank {r} ran on host {hosts[r]}{on}")
    if loaded.missing:
        missing = sorted(loaded.missing)
        more = f" and {len(missing) - 8} more" if len(missing) > 8 else ""
        notes.append(f"rank(s) {', '.join(map(str, missing[:8]))}{more} left no step records: "
                     f"only the {len(a.ranks)} ranks that did are compared, and a missing rank "
                     "may be the straggler")  # fmt: skip
    return notes


def _gain(a: StragglerAnalysis, r: int, stage: str | None) -> tuple[str, float | None]:
    """What the others would save once rank ``r`` keeps up, and that share of their step."""
    if stage == "data_wait":
        remedy = f"more DataLoader workers hide rank {r}'s slow input (--num-workers auto)"
    else:
        remedy = (f"no flag fixes a slow machine: move rank {r} off the slow host or give it "
                  "the same hardware")  # fmt: skip
    others = [a.waiting[o] for o in a.ranks if o != r and o in a.waiting]
    count = len(a.steps) * len(others)
    step_s = sum(w.step_total_s for w in others) / count if count else 0.0
    if step_s <= 0:
        return f"not estimated from this record (no rank's waiting is measured); {remedy}", None
    wait_s = sum(w.total_s for w in others) / count
    share = wait_s / step_s
    figures = f"{per_step_ms(wait_s)} ms of their {per_step_ms(step_s)} ms step"
    if a.straggler != r:
        return (f"little for the step time: the other ranks wait {pct(share)} of their step "
                f"for it ({figures}, within noise); {remedy}", share)  # fmt: skip
    return (f"the other ranks lose {pct(share)} of their step waiting for rank {r} "
            f"({figures}): up to that once it keeps up (the waiting removed, an upper "
            f"bound); {remedy}", share)  # fmt: skip


def straggler(f: RunFacts) -> Finding | None:
    """A rank the others wait for (or one clearly slower than them) in a multi-rank run:
    which rank, and whether its data, its compute or its host is slow.

    Reads every rank's step lines (``ranks/rank<R>/metrics.jsonl``) and applies the rule
    of :func:`analyze_stragglers`: silent for one rank, for ranks within noise, and where
    fewer than two ranks left step records.
    """
    if world_size(f.summary) < 2:
        return None
    loaded = read_rank_steps(f.path, f.summary, f.step_events)
    if len(loaded.steps) < 2:
        return None  # nothing to compare (the run report says which files are missing)
    a = analyze_stragglers(loaded.steps, strategy_of(f.summary), warmup_of(f.summary))
    suspect = _suspect(a)
    if suspect is None:
        return None
    r, st = suspect
    stage = st.stage if st is not None else None
    gain, share = _gain(a, r, stage)
    return Finding(
        "straggler",
        severity_of(share, default="minor"),
        _problem(a, r, st),
        _evidence(a, r, st),
        gain,
        {"--num-workers": "auto"} if stage == "data_wait" else {},
        gain_share=share,
        notes=_notes(f.summary, loaded, a, r),
    )
