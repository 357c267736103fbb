"""Robust statistics of repeated measurements: a median, its spread, n, outliers, and
the one rule by which trainscope claims that two things differ (torch-free).

The rule, everywhere a number is compared (studies, ``compare``, console summaries):

- a figure is the **median** of its repeats with its **spread**: the interquartile range
  (25th–75th percentile, linear interpolation) when n >= 5, the full min–max range when
  n < 5 (a quartile of three numbers means little);
- two figures **differ** only when both have n >= 3 and their spreads do not overlap;
  otherwise there is "no measurable difference at n=…", and more repeats are the answer.
  Below 3 repeats a study is too small to conclude: two repeats of which one is an
  outlier (a 58 s spell among 2 s runs) would otherwise read as a 25x speed-up;
- a repeat is an **outlier** when, among at least 5, it lies more than 3 scaled MADs from
  the median (MAD x 1.4826, which estimates the standard deviation for normal noise). Outliers stay
  in the statistics (the median barely moves for one) and are flagged where shown.

Medians and ranges rather than mean ± standard deviation: timings on a shared machine are
skewed (a slow spell adds, nothing subtracts), and ``mean ± 2 std`` then claims negative
times. The spread of a median is honest about that and needs no distribution.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

# Scale of the median absolute deviation that makes it estimate sigma for normal noise.
MAD_SCALE = 1.4826
OUTLIER_MADS = 3.0
IQR_MIN_N = 5
MIN_N_TO_CLAIM = 3
"""Repeats each side needs before a difference is claimed."""


def finite(values: Iterable[Any]) -> list[float]:
    """The finite real numbers among ``values`` (None, NaN, bools and text dropped)."""
    return [
        float(v)
        for v in values
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    ]


@dataclass(frozen=True)
class Spread:
    """A median with its spread and the number of values it summarises."""

    median: float | None
    low: float | None
    high: float | None
    n: int
    kind: str
    """``"IQR"`` (n >= 5), ``"min–max"`` (2 <= n < 5), ``"single"`` (n = 1), ``"none"``."""
    outliers: tuple[int, ...] = field(default=())
    """Indices (into the finite values, in order) of repeats > 3 scaled MADs away."""

    @property
    def ok(self) -> bool:
        """True when there is at least one value."""
        return self.median is not None

    def scaled(self, factor: float) -> Spread:
        """The same spread with every figure multiplied by ``factor`` (units, per-step)."""
        if self.median is None or self.low is None or self.high is None:
            return self
        lo, hi = sorted((self.low * factor, self.high * factor))
        return Spread(self.median * factor, lo, hi, self.n, self.kind, self.outliers)


NONE = Spread(None, None, None, 0, "none")


def quantile(sorted_xs: Sequence[float], q: float) -> float:
    """The q-quantile of sorted values by linear interpolation (numpy's default method)."""
    if not sorted_xs:
        raise ValueError("quantile of no values")
    pos = q * (len(sorted_xs) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_xs) - 1)
    return sorted_xs[lo] + (sorted_xs[hi] - sorted_xs[lo]) * (pos - lo)


def outlier_indices(xs: Sequence[float]) -> tuple[int, ...]:
    """Indices of values more than 3 scaled MADs from the median (needs n >= 5).

    With three or four values the MAD is one or two distances, and ordinary noise lands
    beyond three of them (0.335 among 0.344 and 0.345 would be "an outlier"): no flags
    below five. When more than half the values are equal the MAD is 0; a tiny floor
    relative to the median then keeps float noise from being flagged while a real outlier
    still is.
    """
    if len(xs) < IQR_MIN_N:
        return ()
    med = statistics.median(xs)
    mad = MAD_SCALE * statistics.median(abs(x - med) for x in xs)
    limit = OUTLIER_MADS * max(mad, 1e-9 * abs(med), 1e-300)
    return tuple(i for i, x in enumerate(xs) if abs(x - med) > limit)


def spread(values: Iterable[Any]) -> Spread:
    """Median, spread (IQR for n >= 5, else min–max), n and outliers of the finite values."""
    xs = finite(values)
    if not xs:
        return NONE
    s = sorted(xs)
    med = statistics.median(s)
    if len(s) == 1:
        return Spread(med, med, med, 1, "single")
    if len(s) >= IQR_MIN_N:
        lo, hi, kind = quantile(s, 0.25), quantile(s, 0.75), "IQR"
    else:
        lo, hi, kind = s[0], s[-1], "min–max"
    return Spread(med, lo, hi, len(s), kind, outlier_indices(xs))


def overlap(a: Spread, b: Spread) -> bool:
    """True when the two spreads share any value (touching ends count as overlapping)."""
    if a.low is None or a.high is None or b.low is None or b.high is None:
        return True
    return a.low <= b.high and b.low <= a.high


def differ(a: Spread, b: Spread) -> bool:
    """The claim rule: both measured at least :data:`MIN_N_TO_CLAIM` times and their
    spreads do not overlap."""
    return min(a.n, b.n) >= MIN_N_TO_CLAIM and not overlap(a, b)


def no_difference_text(a: Spread, b: Spread) -> str:
    """The sentence for a comparison the rule does not allow, with what would help."""
    if min(a.n, b.n) < 2:
        return (
            f"no measurable difference: n={min(a.n, b.n)} has no spread; repeat "
            "(e.g. --repeats 5) to compare"
        )
    if min(a.n, b.n) < MIN_N_TO_CLAIM:
        ns = f"n={a.n}" if a.n == b.n else f"n={a.n} and {b.n}"
        return f"too few repeats to conclude at {ns} ({MIN_N_TO_CLAIM} each needed)"
    ns = f"n={a.n}" if a.n == b.n else f"n={a.n} and {b.n}"
    return f"no measurable difference at {ns} (the spreads overlap); more repeats may separate them"


def ratio_text(a: Spread, b: Spread) -> str | None:
    """``"2.31x"`` for a/b when the rule allows a claim, else None."""
    if not differ(a, b) or not a.median or not b.median:
        return None
    return f"{a.median / b.median:.2f}x"


def indistinguishable_from_best(
    spreads: dict[str, Spread], *, lower_is_better: bool = True
) -> tuple[str | None, list[str]]:
    """The best key and every key whose spread overlaps the best's (the best included).

    A single winner exists only when that list has one element; otherwise the report
    names the whole group as "within noise".
    """
    ok = {k: s for k, s in spreads.items() if s.median is not None}
    if not ok:
        return None, []
    best = (min if lower_is_better else max)(ok, key=lambda k: ok[k].median)  # type: ignore[arg-type, return-value]
    tied = [k for k, s in ok.items() if k == best or not differ(s, ok[best])]
    return best, tied
