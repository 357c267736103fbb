"""Physical bounds a speed-up must respect before a report may state it (torch-free).

A speed-up from more processes or more DataLoader workers has a ceiling that physics
sets, whatever the noise: ``n`` processes do at most ``n`` times the work of one (a
strong-scaling efficiency of at most 100%), ``w`` workers fetch at most ``w`` times as
fast as the main process alone, and neither can be faster than the cores they ran on
allow. A measurement beyond its bound *even at the most favourable reading of its
spreads* (the slowest baseline repeat against the fastest new one) is not a surprising
result: it is an invalid measurement (one side ran slowed by other load, or timed
something else), and reports say so with the reason instead of stating the ratio.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from trainscope.util.spread import Spread

SLACK = 1.05
"""Room above a bound before a speed-up counts as beyond it: caches and a smaller
per-process working set can legitimately give a few per cent of super-linear scaling."""


def speedup_floor(base: Spread, new: Spread) -> float | None:
    """The smallest speed-up of ``new`` over ``base`` (times: lower is faster) that the
    spreads allow: the fastest baseline repeat against the slowest new one."""
    if base.low is None or new.high is None or not new.high:
        return None
    return base.low / new.high


def beyond(base: Spread, new: Spread, bound: float) -> float | None:
    """The least speed-up the spreads allow when even it exceeds ``bound`` (times, lower
    is faster), else None."""
    floor = speedup_floor(base, new)
    return floor if floor is not None and floor > bound * SLACK else None


def invalid_text(what: str, floor: float, bound: float, why: str) -> str:
    """The sentence that replaces a ratio beyond its bound."""
    return (
        f"invalid measurement, not a finding: {what} is at least {floor:.2f}x (the slowest "
        f"of its repeats against the fastest baseline), beyond the {bound:g}x that {why}; "
        "one side was slowed by something else (other load, a cold start): re-measure it"
    )


def cores_bound(processes: int, cores: float | None) -> float:
    """What ``processes`` processes can give over one: at most their count, and at most
    the cores they had (None: unknown, the count alone)."""
    if cores is None or cores <= 0:
        return float(processes)
    return float(max(1.0, min(processes, cores)))


def recorded_cores(summaries: Iterable[dict[str, Any]]) -> float | None:
    """The fewest cores any of the runs recorded it could use (None: not recorded)."""
    seen = [
        float(c)
        for s in summaries
        if isinstance(c := (s.get("cpu") or {}).get("cores"), int | float)
        and not isinstance(c, bool)
    ]
    return min(seen) if seen else None


def workers_bound(workers: int, cores: float | None) -> float:
    """What ``workers`` DataLoader workers can give over loading in the main process: the
    workers and the main process form a pipeline of at most ``workers + 1`` stages working
    at once, and no more than the cores."""
    return cores_bound(workers + 1, cores)
