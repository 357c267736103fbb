"""Statistics of a study's repeats as reports show them (torch-free).

Figures are medians with their spread and n (:mod:`trainscope.util.spread` holds the rule);
:func:`mean_std` remains for the few places a mean is asked for (a run's mean epoch).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from trainscope.records.run_dir import RunRecord
from trainscope.records.view import SummaryView
from trainscope.render.table import MISSING, fmt_float, fmt_pct, fmt_sig
from trainscope.util.spread import Spread, differ, finite, no_difference_text

TRAIN_STAGES = ("data_wait", "h2d", "forward", "backward", "comm", "pipeline_wait", "optimizer")
COMPUTE_STAGES = ("h2d", "forward", "backward", "optimizer")


def mean_std(values: Iterable[Any]) -> tuple[float | None, float | None, int]:
    """(mean, sample standard deviation, n) of the finite numbers; std is 0 for one value."""
    xs = finite(values)
    if not xs:
        return None, None, 0
    m = sum(xs) / len(xs)
    if len(xs) == 1:
        return m, 0.0, 1
    var = sum((x - m) ** 2 for x in xs) / (len(xs) - 1)
    return m, math.sqrt(var), len(xs)


def fmt_mean_std_sig(mean: float | None, std: float | None, n: int, digits: int = 3) -> str:
    """Mean with ``digits`` significant digits and the std at the same decimals."""
    if mean is None:
        return MISSING
    m = fmt_sig(mean, digits)
    if std is None or n == 1:
        return m
    decimals = len(m.split(".")[1]) if "." in m else 0
    return f"{m} ± {std:.{decimals}f}"


SPREAD_NOTE = "median (IQR when n >= 5, else min–max) over repeats"
"""How tables say what their cells are."""


# A figure written as a plain decimal or a percentage: "29.338", "-0.0412", "55.62%".
_DECIMAL = re.compile(r"-?(\d+\.\d+)(%?)")
MEASURED_DIGITS = 3
"""Significant digits of a measured figure (a median or a bound of a spread), as the
README promises: more would claim a precision that repeats do not measure."""


def measured(fmt: Callable[[Any], str], x: Any) -> str:
    """``fmt(x)`` for a measured ``x``, held to :data:`MEASURED_DIGITS` significant
    digits where ``fmt`` wrote more as a plain decimal or percentage (fixed decimals:
    ``29.338`` is ``29.3``, ``55.62%`` is ``55.6%``). Digits left of the point are all
    kept (``1312.5`` is ``1312``), and other text is left as ``fmt`` wrote it: bytes in
    units (counted, exact), thousands separators (rates), fewer digits."""
    text = fmt(x)
    m = _DECIMAL.fullmatch(text)
    if m is None or not _is_number(x) or not x or _significant(m.group(1)) <= MEASURED_DIGITS:
        return text
    # Rounded from x itself, not from the text (no double rounding), at the scale fmt
    # wrote it in: 1, 100 (a percentage) or 1000 (seconds as ms); else from the text.
    shown = float(m.group(0).rstrip("%"))
    scale = 10.0 ** round(math.log10(abs(shown / x))) if shown else 1.0
    value = x * scale if math.isclose(shown, x * scale, rel_tol=1e-3) else shown
    return fmt_sig(value, MEASURED_DIGITS) + m.group(2)


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _significant(digits: str) -> int:
    """Significant digits of a plain decimal (``"0.0632"``: 3)."""
    return len(digits.replace(".", "").lstrip("0"))


def fmt_spread(sp: Spread, fmt: Callable[[Any], str] = fmt_sig) -> str:
    """``"12.3 (11.9–12.8)"``; one value alone; outlier repeats flagged, never hidden.

    Each figure is ``fmt``'s, held to 3 significant digits (:func:`measured`)."""
    if sp.median is None:
        return MISSING
    text = measured(fmt, sp.median)
    if sp.n > 1 and sp.low is not None and sp.high is not None:
        low, high = measured(fmt, sp.low), measured(fmt, sp.high)
        text += " (all equal)" if low == high == text else f" ({low}–{high})"
    if sp.outliers:
        k = len(sp.outliers)
        text += f" [{k} outlier{'s' if k > 1 else ''}]"
    return text


def error_bar(sp: Spread) -> tuple[float, float] | None:
    """(below, above) distances from the median for a plot's error bar; None without one."""
    if sp.median is None or sp.low is None or sp.high is None or sp.n < 2:
        return None
    return sp.median - sp.low, sp.high - sp.median


def rate(summary: dict[str, Any]) -> float | None:
    """A repeat's throughput: its total samples (all ranks) over its total training time,
    as the run computed it; a study takes the median of these, never their mean."""
    return SummaryView(summary).number("samples_per_s")


def compare_text(
    name_a: str,
    a: Spread,
    name_b: str,
    b: Spread,
    what: str,
    *,
    fmt: Callable[[Any], str] = fmt_sig,
    unit: str = "",
) -> str:
    """One sentence comparing two medians, claiming a ratio only where the rule allows."""
    both = f"{measured(fmt, a.median)}{unit} vs {measured(fmt, b.median)}{unit}, n={a.n} and {b.n}"
    if differ(a, b) and a.median and b.median:
        return f"{name_a} vs {name_b}: {what} {a.median / b.median:.2f}x ({both})"
    return f"{name_a} vs {name_b}: {what}: {no_difference_text(a, b)} ({both})"


def count_text(
    name_a: str,
    a: Spread,
    name_b: str,
    b: Spread,
    what: str,
    *,
    fmt: Callable[[Any], str] = fmt_sig,
) -> str:
    """One sentence comparing two *counted* figures (bytes of the tensors a step keeps):
    a count is exact, not a sample of a noisy measurement, so the noise rule of
    :func:`compare_text` does not apply and a ratio is stated at any n. Where the repeats
    counted different values (they should not), the medians are compared and the ranges
    shown."""
    both = f"{fmt(a.median)} vs {fmt(b.median)}"
    varied = [s for s in (a, b) if s.low != s.high]
    detail = (
        "counted, exact"
        if not varied
        else (
            f"medians of counts that varied between repeats: {fmt(a.low)}–{fmt(a.high)} and "
            f"{fmt(b.low)}–{fmt(b.high)}"
        )
    )
    head = f"{name_a} vs {name_b}: {what}"
    if a.median is None or b.median is None:
        return f"{head}: not counted in both"
    if a.median == b.median:
        return f"{head} the same ({fmt(a.median)}, {detail})"
    if not b.median:
        return f"{head} {both} ({detail})"
    return f"{head} {a.median / b.median:.2f}x ({both}, {detail})"


@dataclass(frozen=True)
class Quality:
    """One figure of how well a run learned, as a study's table and findings show it."""

    header: str
    what: str
    """Its name in a finding: "test accuracy", "test MSE"."""
    get: Callable[[dict[str, Any]], Any]
    """The figure of one run's summary."""
    fmt: Callable[[Any], str]
    points: bool = False
    """Compared as a difference in percentage points (accuracies), else in per cent."""
    note: str = ""
    """What it is, for a table's caption (accuracies need none)."""


def step_ms(summary: dict[str, Any]) -> float | None:
    """A run's steady-state step time (median over its steps after warm-up), in ms."""
    step = SummaryView(summary).steady_step_s
    return 1e3 * step if step is not None else None


def _last_epoch(summary: dict[str, Any]) -> dict[str, Any]:
    epochs = SummaryView(summary).epochs
    return epochs[-1] if epochs else {}


def _epoch(key: str) -> Callable[[dict[str, Any]], Any]:
    return lambda s: _last_epoch(s).get(key)


def _test(key: str) -> Callable[[dict[str, Any]], Any]:
    return lambda s: (s.get("test_metrics") or {}).get(key)


def _pct2(x: Any) -> str:
    return fmt_pct(x, 2)


def _sig4(x: Any) -> str:
    return fmt_sig(x, 4)


QUALITY: dict[str, tuple[Quality, ...]] = {
    "classification": (
        Quality("Final val acc", "final val accuracy", _epoch("val_accuracy"), _pct2, True),
        Quality("Test acc", "test accuracy", lambda s: s.get("test_accuracy"), _pct2, True),
    ),
    "regression": (
        Quality(
            "Test MSE", "test MSE", _test("mse"), _sig4, note="the test split's mean squared error"
        ),
        Quality(
            "Test R^2",
            "test R^2",
            _test("r2"),
            fmt_float,
            note="the test split's coefficient of determination",
        ),
    ),
    "language-modelling": (
        Quality(
            "Val loss",
            "final val loss",
            _epoch("val_loss"),
            fmt_float,
            note="the last epoch's per-token loss",
        ),
        Quality(
            "Val perplexity",
            "final val perplexity",
            _epoch("perplexity"),
            _sig4,
            note="the last epoch's exp(loss)",
        ),
    ),
}
"""The quality columns of a study's table, by the workload's task."""
MAIN = {
    "classification": "Test acc",
    "regression": "Test MSE",
    "language-modelling": "Val perplexity",
}
"""The figure of each task that a study compares between settings (and shows where its
table has one quality column)."""


def task_of(summaries: Iterable[dict[str, Any]]) -> str:
    """The task of a study's runs: the ``task`` their summaries record; for records from
    before it was recorded, read from their figures (MSE: regression; perplexity: language
    modelling); else classification."""
    summaries = list(summaries)
    for s in summaries:
        if s.get("task") in QUALITY:
            return str(s["task"])
    for s in summaries:
        found = {**_last_epoch(s), **(s.get("test_metrics") or {})}
        if found.get("mse") is not None or found.get("r2") is not None:
            return "regression"
        if found.get("perplexity") is not None:
            return "language-modelling"
    return "classification"


def quality_note(columns: Iterable[Quality]) -> str:
    """What a caption adds about its quality columns (" Test MSE: ...; ..."), or ""."""
    notes = [f"{q.header}: {q.note}" for q in columns if q.note]
    return f" {'; '.join(notes)}." if notes else ""


def main_quality(task: str) -> Quality:
    """The figure of ``task`` that a study compares between settings."""
    return next(q for q in QUALITY[task] if q.header == MAIN[task])


def quality_text(a: Spread, b: Spread, q: Quality) -> str | None:
    """A quality figure of one setting against another's, claimed only beyond the noise:
    accuracies in percentage points, other figures as a relative change; None without
    both."""
    if a.median is None or b.median is None:
        return None
    if q.points and not differ(a, b):
        return f"{q.what}: {no_difference_text(a, b)}"
    ns = f"n={a.n} and {b.n}"
    both = f"{measured(q.fmt, a.median)} vs {measured(q.fmt, b.median)}"
    if not differ(a, b):
        return f"{q.what}: {no_difference_text(a, b)} ({both}, {ns})"
    if a.low == a.high and b.low == b.high:
        # Every repeat reused the seed and the data order: the runs are deterministic,
        # so the difference is this seed's, not a spread over seeds.
        ns += "; identical in every repeat, one seed"
    if q.points:
        return f"{q.what} {100 * (a.median - b.median):+.2f} points ({ns})"
    if b.median:  # relative: never "1.00x" for a small real change
        d = 100 * (a.median / b.median - 1)
        change = f"{'-' if d < 0 else '+'}{fmt_sig(abs(d))}%"
    else:
        d = a.median - b.median
        change = f"{'-' if d < 0 else '+'}{fmt_sig(abs(d), 4)}"
    return f"{q.what} {change} ({both}, {ns})"


def fmt_mean_std(
    mean: float | None, std: float | None, fmt: Callable[[Any], str], n: int | None = None
) -> str:
    """``"0.123 ± 0.004"``; a single value shows without the ±."""
    if mean is None:
        return MISSING
    if std is None or n == 1:
        return fmt(mean)
    m, s = fmt(mean), fmt(std)
    if len(s) > len(m) + 2:  # a tiny std in many decimals: one significant digit is enough
        s = fmt_sig(std, 1)
    return f"{m} ± {s}"


def epoch_seconds(record: RunRecord) -> float | None:
    """Mean duration of a run's epochs (each includes its DataLoader start-up)."""
    m, _, _ = mean_std(e.get("duration_s") for e in record.view.epochs)
    return m


def loader_start_seconds(record: RunRecord) -> float | None:
    """Mean per-epoch iterator start-up (worker processes) of a run."""
    m, _, _ = mean_std(e.get("loader_start_s") for e in record.view.epochs)
    return m


def per_step_stages(record: RunRecord) -> dict[str, float]:
    """Mean seconds per optimizer step of each training stage, from the step records.

    Steady state: the run's first ``steady_state.warmup_steps`` steps are left out, and
    the iterator start-up of each epoch is counted in the run's data wait total but not in
    any step, see :func:`loader_start_seconds`.
    """
    warm = record.view.steady_state.get("warmup_steps") or 0
    steps = record.events("step")
    if len(steps) > warm:
        steps = steps[warm:]  # steady state: the warm-up steps are reported apart
    out: dict[str, float] = {}
    for stage in TRAIN_STAGES:
        if stage in ("comm", "pipeline_wait") and not any(
            stage in (s.get("stages") or {}) for s in steps
        ):
            continue  # only hand-written sync (and a pipeline) have these stages
        m, _, _ = mean_std((s.get("stages") or {}).get(stage) for s in steps)
        out[stage] = m if m is not None else 0.0
    return out


def step_losses(record: RunRecord) -> tuple[list[int], list[float]]:
    """(steps, losses) of a run's step records, skipping steps without a loss."""
    xs, ys = [], []
    for s in record.events("step"):
        if s.get("loss") is not None and s.get("step") is not None:
            xs.append(int(s["step"]))
            ys.append(float(s["loss"]))
    return xs, ys


def mean_curve(curves: list[tuple[list[int], list[float]]]) -> tuple[list[int], list[float]]:
    """Average several (steps, values) curves over the steps they all share."""
    if not curves:
        return [], []
    common = set(curves[0][0])
    for steps, _ in curves[1:]:
        common &= set(steps)
    steps = sorted(common)
    maps = [dict(zip(s, v)) for s, v in curves]
    return steps, [sum(m[k] for m in maps) / len(maps) for k in steps]
