"""The α–β (latency–bandwidth) cost model of a collective, and its fit to a sweep
(torch-free).

**The model** (Hockney; the algorithm costs of Thakur, Rabenseifner & Gropp, 2005). A
message of ``m`` bytes between two ranks takes ``α + m·β``: α is the latency (seconds per
message), β the inverse bandwidth (seconds per byte) of one link. A collective is a fixed
pattern of such messages, so on ``n`` ranks it takes

    t(m) = α·L(op, n) + β·W(op, n)·m

where ``m`` is the op's *size* as the sweep defines it
(:mod:`trainscope.collectives.bandwidth`: the in-place buffer, all_gather's whole output,
reduce_scatter's whole input, all_to_all's send buffer) and L, W come from the algorithm
assumed (:data:`ALGORITHMS`):

- all_reduce, **ring** (reduce-scatter then all-gather): L = 2(n-1), W = 2(n-1)/n;
- reduce_scatter and all_gather, **ring**: L = n-1, W = (n-1)/n;
- all_to_all, **pairwise exchange**: L = n-1, W = (n-1)/n;
- broadcast and reduce, **binomial tree**: L = W = ceil(log2 n);
- gather and scatter (used by the gather-scatter strategy; not in the sweep), **flat**: the
  root exchanges a piece of ``m`` bytes with each of the other n-1 ranks in turn:
  L = W = n-1 (``m`` here is one rank's piece).

W is nccl-tests' bus factor for the ring and pairwise ops, which is why busbw approaches
1/β for large messages.

**The fit.** For each op measured, α and β are fitted by least squares on the sweep's
*mean* time per call at each size (its total time over its calls), each point weighted
by 1/t (so the error minimised is *relative*: the 1 KiB points, where latency dominates,
count as much as the 64 MiB ones, where bandwidth does). Both are kept >= 0 (a negative
one is set to 0 and the other refitted). The mean, not the median the bandwidth tables
show: a step makes many calls and pays their sum, and on a shared machine one call's time
is skewed or even bimodal (gloo on this project's 2-vCPU VM: about 0.6 ms or 3.5 ms for
the same small all_reduce), where the median of the calls says little about their sum.
With all points at one world size L and W are constants, so what the data determine is
the line ``t = a + b·m``; α = a/L and β = b/W are that line read through the assumed
algorithm. Whatever gloo or NCCL actually run, the fitted α and β reproduce the measured
times (``max_rel_error`` says how well); they are the link's parameters only as far as
the assumed algorithm is the one run.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

MAX_BYTES = float(1 << 50)
"""Sizes above a pebibyte in a record are damage, not messages."""
MAX_WORLD = 1 << 20
"""World sizes above this in a record are damage (as --predict --world refuses them)."""

ALGORITHMS = {
    "all_reduce": "ring",
    "reduce_scatter": "ring",
    "all_gather": "ring",
    "all_to_all": "pairwise exchange",
    "broadcast": "binomial tree",
    "reduce": "binomial tree",
    "gather": "flat (root exchanges with each rank in turn)",
    "scatter": "flat (root exchanges with each rank in turn)",
}
# Which fitted op stands in for an op the sweep does not time: gather and scatter are
# point-to-point messages to and from the root, as each step of a binomial broadcast is.
STAND_IN = {"gather": "broadcast", "scatter": "broadcast"}


def terms(op: str, n: int) -> tuple[float, float]:
    """(L, W) of ``op`` on ``n`` ranks: ``t = α·L + β·W·m`` (see the module docstring)."""
    if op not in ALGORITHMS:
        raise ValueError(f"no cost formula for {op!r}; known: {', '.join(ALGORITHMS)}")
    if n < 1:
        raise ValueError(f"a world has at least 1 rank, not {n}")
    if n == 1:
        return 0.0, 0.0  # nothing to send
    if op == "all_reduce":
        return 2.0 * (n - 1), 2.0 * (n - 1) / n
    if op in ("reduce_scatter", "all_gather", "all_to_all"):
        return float(n - 1), (n - 1) / n
    if op in ("broadcast", "reduce"):
        steps = float(math.ceil(math.log2(n)))
        return steps, steps
    return float(n - 1), float(n - 1)  # gather, scatter: flat


@dataclass(frozen=True)
class Fit:
    """α and β of one op, and how well they reproduce the points they were fitted to."""

    op: str
    alpha_s: float
    """Latency per message (seconds)."""
    beta_s_per_byte: float
    """Inverse bandwidth of a link (seconds per byte)."""
    world_size: int
    points: int
    max_rel_error: float
    """The largest |predicted - measured| / measured over the points fitted."""
    algorithm: str
    source: str = "fitted"
    """"fitted" (from a sweep) or "given" (--latency/--bandwidth or an interconnect)."""

    @property
    def bandwidth_GBps(self) -> float:  # noqa: N802 - GB/s is the unit people read
        """1/β in GB/s (10^9 bytes per second); inf when β is 0."""
        return 1e-9 / self.beta_s_per_byte if self.beta_s_per_byte > 0 else math.inf

    def time(self, op: str, nbytes: float, n: int) -> float:
        """Predicted seconds of ``op`` moving ``nbytes`` on ``n`` ranks with these α, β."""
        lat, bw = terms(op, n)
        return self.alpha_s * lat + self.beta_s_per_byte * bw * nbytes

    def to_dict(self) -> dict[str, Any]:
        """As study.json keeps it (strict JSON: an infinite bandwidth is null)."""
        d = asdict(self)
        bw = self.bandwidth_GBps
        d["bandwidth_GBps"] = bw if math.isfinite(bw) else None
        return d


def fit_line(sizes: Sequence[float], times: Sequence[float]) -> tuple[float, float]:
    """(a, b) >= 0 minimising sum(((a + b·m - t) / t)^2): least squares weighted by 1/t.

    Raises ValueError for fewer than one usable point or a non-positive time."""
    pts = [(float(m), float(t)) for m, t in zip(sizes, times)]
    if not pts:
        raise ValueError("no points to fit")
    if any(not (t > 0 and math.isfinite(t)) for _, t in pts):
        raise ValueError("every time must be a positive finite number of seconds")
    if any(not (0 <= m < MAX_BYTES) for m, _ in pts):
        raise ValueError(f"every size must be a number of bytes in 0..{MAX_BYTES:g}")
    # Rows (1/t, m/t) · (a, b) ≈ 1: the 2x2 normal equations, solved directly.
    s11 = sum(1 / t**2 for _, t in pts)
    s12 = sum(m / t**2 for m, t in pts)
    s22 = sum(m * m / t**2 for m, t in pts)
    r1 = sum(1 / t for _, t in pts)
    r2 = sum(m / t for m, t in pts)
    det = s11 * s22 - s12 * s12
    if len({m for m, _ in pts}) >= 2 and det > 1e-12 * s11 * s22:
        a = (r1 * s22 - r2 * s12) / det
        b = (s11 * r2 - s12 * r1) / det
        if a >= 0 and b >= 0:
            return a, b
    # One size only, or a negative coefficient: the best fit with one of them at 0.
    a_only = r1 / s11  # b = 0
    b_only = r2 / s22 if s22 > 0 else 0.0  # a = 0

    def cost(a: float, b: float) -> float:
        return sum(((a + b * m - t) / t) ** 2 for m, t in pts)

    return (a_only, 0.0) if cost(a_only, 0.0) <= cost(0.0, b_only) else (0.0, b_only)


def fit_op(op: str, n: int, sizes: Sequence[float], times: Sequence[float]) -> Fit:
    """α, β of ``op`` on ``n`` ranks from message sizes (bytes) and times (seconds)."""
    lat, bw = terms(op, n)
    if lat <= 0 or bw <= 0:
        raise ValueError(f"{op} on {n} rank(s) sends nothing: there is nothing to fit")
    a, b = fit_line(sizes, times)
    alpha, beta = a / lat, b / bw
    fit = Fit(op, alpha, beta, n, len(sizes), 0.0, ALGORITHMS[op])
    worst = max(abs(fit.time(op, m, n) - t) / t for m, t in zip(sizes, times))
    return Fit(op, alpha, beta, n, len(sizes), worst, ALGORITHMS[op])


def real(value: Any, low: float = -math.inf, high: float = math.inf) -> float | None:
    """``value`` as a finite float within [low, high], else None (text, bools, NaN,
    infinities and integers too large for a float, as a tampered record may hold)."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return None
    try:
        x = float(value)
    except OverflowError:
        return None
    return x if math.isfinite(x) and low <= x <= high else None


def mean_time(result: dict[str, Any]) -> float | None:
    """A result's mean seconds per call: its repeats' total over their number (``time_s``,
    the median, for a result without its repeats); None when neither is a finite number."""
    times = result.get("times_s")
    if isinstance(times, list) and times:
        values = [real(t, 0.0) for t in times]
        if all(v is not None for v in values):
            return sum(values) / len(values)  # type: ignore[arg-type]
    return real(result.get("time_s"), 0.0)


def fit_sweep(results: Iterable[Any]) -> dict[str, Fit]:
    """One :class:`Fit` per op from a sweep's results (the ``results`` of a collectives
    study): their ``bytes`` and mean time per call (:func:`mean_time`). Results that are
    not a clean measurement (a wrong element, no time) are left out; an op needs 2 sizes."""
    by_op: dict[str, list[tuple[float, float, int]]] = {}
    for r in results:
        if not isinstance(r, dict) or r.get("wrong"):
            continue
        op, t = r.get("op"), mean_time(r)
        m, n = real(r.get("bytes"), 0, MAX_BYTES), real(r.get("world_size"), 2, MAX_WORLD)
        if op in ALGORITHMS and t and m is not None and n is not None and n.is_integer():
            by_op.setdefault(op, []).append((m, t, int(n)))
    fits = {}
    for op, pts in by_op.items():
        worlds = {n for _, _, n in pts}
        if len(worlds) != 1 or len({m for m, _, _ in pts}) < 2:
            continue  # one line per world size; a sweep has one
        fits[op] = fit_op(op, pts[0][2], [m for m, _, _ in pts], [t for _, t, _ in pts])
    return fits


def given(
    alpha_s: float, bandwidth_GBps: float, n: int, ops: Iterable[str] = ALGORITHMS
) -> dict[str, Fit]:  # noqa: N803
    """The same link parameters for every op (from --latency/--bandwidth or an
    interconnect's figures), as fits marked ``given``."""
    beta = 1e-9 / bandwidth_GBps
    return {op: Fit(op, alpha_s, beta, n, 0, 0.0, ALGORITHMS[op], source="given") for op in ops}


def fit_for(fits: dict[str, Fit], op: str) -> Fit | None:
    """The fit to use for ``op``: its own, or its stand-in's (gather, scatter: broadcast)."""
    return fits.get(op) or fits.get(STAND_IN.get(op, ""))


def fits_from_dict(data: Any) -> dict[str, Fit]:
    """Fits as study.json keeps them (``cost_model.fits``); malformed entries dropped."""
    out: dict[str, Fit] = {}
    if not isinstance(data, dict):
        return out
    for op, d in data.items():
        if op not in ALGORITHMS or not isinstance(d, dict):
            continue
        alpha, beta = real(d.get("alpha_s"), 0.0, 1e3), real(d.get("beta_s_per_byte"), 0.0, 1.0)
        world, points = real(d.get("world_size"), 2, MAX_WORLD), real(d.get("points"), 0, 1e9)
        error = real(d.get("max_rel_error"), 0.0)
        if None in (alpha, beta, world, points, error) or not (world.is_integer()):  # type: ignore[union-attr]
            continue  # a damaged entry: dropped, never trusted
        source = d.get("source")
        out[op] = Fit(
            op,
            alpha,  # type: ignore[arg-type]
            beta,  # type: ignore[arg-type]
            int(world),  # type: ignore[arg-type]
            int(points),  # type: ignore[arg-type]
            error,  # type: ignore[arg-type]
            ALGORITHMS[op],
            source if source in ("fitted", "given") else "fitted",
        )
    return out
