"""The cost model as tables: the fitted α, β per op, and the predicted communication of
each strategy (torch-free; cells are plain text, escaped by every renderer)."""

from __future__ import annotations

from collections.abc import Sequence

from trainscope.comm.cost_model import Fit
from trainscope.comm.predict import Prediction
from trainscope.render.table import MISSING, Table, fmt_bytes, fmt_sig

FORMULA = "t(m) = α·L + β·W·m"


def _us(seconds: float | None) -> str:
    return MISSING if seconds is None else fmt_sig(seconds * 1e6)


def _ms(seconds: float | None) -> str:
    return MISSING if seconds is None else fmt_sig(seconds * 1e3)


def _gbps(fit: Fit) -> str:
    bw = fit.bandwidth_GBps
    return "∞" if bw == float("inf") else fmt_sig(bw)


def fit_table(fits: dict[str, Fit]) -> Table:
    """One row per op: the algorithm assumed, α, 1/β and how well the line fits."""
    rows: list[list[object]] = []
    for op, fit in fits.items():
        rows.append(
            [
                op,
                fit.algorithm,
                _us(fit.alpha_s),
                _gbps(fit),
                str(fit.points) if fit.source == "fitted" else "given",
                f"{100 * fit.max_rel_error:.1f}%" if fit.source == "fitted" else MISSING,
            ]
        )
    world = next(iter(fits.values())).world_size if fits else "?"
    return Table(
        ["Op", "Algorithm assumed", "α (µs)", "1/β (GB/s)", "Points", "Max error"],
        rows,
        f"The α–β model {FORMULA} on {world} ranks (L, W from the algorithm: ring all_reduce "
        "L = 2(n-1), W = 2(n-1)/n; ring/pairwise L = n-1, W = (n-1)/n; binomial tree L = W = "
        "ceil(log2 n)), fitted by least squares weighted by 1/t to the mean time per call (a "
        "step pays the sum of its calls); max error: the largest |model - mean| / mean over "
        "the sizes.",
        "tab:collectives-fit",
        "llrrrr",
    )


def prediction_table(preds: Sequence[Prediction], title: str) -> Table:
    """One row per strategy: collectives and bytes per step, predicted time, exposed part."""
    rows = [
        [
            p.strategy,
            str(p.collectives),
            fmt_bytes(p.bytes_sent),
            _ms(p.comm_s),
            _ms(p.exposed_s),
            p.how,
        ]
        for p in preds
    ]
    return Table(
        ["Strategy", "Collectives/step", "Sent/step", "Comm (ms)", "Exposed (ms)", "How"],
        rows,
        title,
        "tab:collectives-predicted",
        "lrrrrl",
    )
