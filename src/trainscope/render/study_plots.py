"""Figures for study reports, drawn from plain data (numbers and labels, no run records).

Same conventions as :mod:`trainscope.render.plots`: matplotlib is imported inside the
functions (importing this module stays light and never pulls in torch), figures live on
an Agg canvas, and every function writes a PNG plus an SVG with the same stem and returns
the paths written, or [] when there is nothing to draw.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainscope.render.plots import new_figure, plain_text_figure, save_figure, stage_color
from trainscope.util.numfmt import fmt_sig
from trainscope.util.textsafe import plot_text

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

# Fixed colours per DataLoader variant, so a variant looks the same in every figure.
_VARIANT_COLORS = {
    "default": "tab:blue",
    "persistent_workers": "tab:orange",
    "pin_memory": "tab:green",
}
_OTHER_COLORS = ("tab:purple", "tab:brown", "tab:pink", "tab:olive", "tab:cyan", "tab:gray")

# Legend text of the sweep's variants (the keys stay short: they name configurations).
SERIES_LABELS = {
    "default": "DataLoader",
    "persistent_workers": "DataLoader, persistent_workers=True",
    "pin_memory": "DataLoader, pin_memory=True",
}
COMPUTE_LABEL = "compute (h2d+forward+backward+optimizer)"
FAST_PATH_LABEL = "fast path (tensors on device)"


def write_figure(fig: Figure, png_path: str | Path) -> list[Path]:
    """Write a study figure as ``png_path`` and an SVG beside it; the paths written."""
    import matplotlib

    png = Path(png_path)
    # Text stays <text> in the SVG (searchable, selectable), and a fixed hash salt makes
    # the SVG element ids, hence the file, identical when a report is rebuilt.
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "trainscope"}):
        return save_figure(fig, png, png.with_suffix(".svg"))


def _finite(value: float | None, default: float = 0.0) -> float:
    if isinstance(value, (int, float)) and math.isfinite(value):
        return float(value)
    return default


def _err(e: float | tuple[float, float] | None) -> tuple[float, float]:
    """An error bar as (below, above) distances: a median's spread is not symmetric."""
    if isinstance(e, tuple):
        return _finite(e[0]), _finite(e[1])
    x = _finite(e)
    return x, x


def _fmt(value: float) -> str:
    return fmt_sig(value)


def _variant_color(label: str, others: list[str]) -> str:
    if label in _VARIANT_COLORS:
        return _VARIANT_COLORS[label]
    if label not in others:
        others.append(label)
    return _OTHER_COLORS[others.index(label) % len(_OTHER_COLORS)]


def error_line(
    ax: Axes,
    points: Sequence[tuple[float, float, tuple[float, float]]],
    color: Any,
    label: str,
    *,
    markersize: float = 5,
    capsize: float = 3,
    linewidth: float = 1.5,
) -> None:
    """Points ``(x, median, (below, above))`` joined by a line, each with its spread as
    an error bar (not symmetric: a median's)."""
    xs, ys, es = zip(*points)
    ax.errorbar(
        xs,
        ys,
        yerr=[[e[0] for e in es], [e[1] for e in es]],
        marker="o",
        markersize=markersize,
        capsize=capsize,
        linewidth=linewidth,
        color=color,
        label=label,
    )


@plain_text_figure
def workers_sweep_plot(
    series: dict[str, list[tuple[int, float, Any]]],
    png_path: Path,
    *,
    default_workers: int = 0,
    fast: tuple[float, Any] | None = None,
    fastest: tuple[str, int] | None = None,
    tied: int = 0,
    title: str = "",
) -> list[Path]:
    """Data-only epoch time against DataLoader ``num_workers``, one line per variant.

    ``series`` maps a variant label to ``(num_workers, median_s, error)`` points, the error
    a symmetric number or (below, above) distances (a median's spread). PyTorch's default
    ``num_workers`` is ringed on the "default" line; ``fastest`` = (variant, workers) is
    starred, given only when the caller found one setting faster beyond the noise;
    otherwise ``tied`` settings are said to be within noise of the lowest. ``fast`` =
    (median, error) of the in-memory path is a dashed line with its spread as a band.
    Points with a non-finite value are not drawn.
    """
    cleaned: dict[str, list[tuple[int, float, tuple[float, float]]]] = {}
    for label, points in series.items():
        pts = sorted(
            (int(x), float(m), _err(s))
            for x, m, s in points
            if isinstance(m, (int, float)) and math.isfinite(m)
        )
        if pts:
            cleaned[label] = pts
    if not cleaned:
        return []

    fig = new_figure(8.0, 4.8)
    ax = fig.add_subplot()
    others: list[str] = []
    for label, pts in cleaned.items():
        color = _variant_color(label, others)
        error_line(ax, pts, color, plot_text(SERIES_LABELS.get(label, label)))

    if fast is not None and math.isfinite(fast[0]):
        mid, (below, above) = fast[0], _err(fast[1])
        ax.axhline(mid, linestyle="--", color="0.3", linewidth=1.2, label=FAST_PATH_LABEL)
        if below + above > 0:
            ax.axhspan(mid - below, mid + above, color="0.3", alpha=0.12, linewidth=0)

    from matplotlib.ticker import FixedLocator

    # The swept worker counts and the default as ticks: whole numbers, no 2.5 workers.
    ticks = {x for pts in cleaned.values() for x, _, _ in pts} | {default_workers}
    ax.xaxis.set_major_locator(FixedLocator(sorted(ticks)))
    _, top = ax.get_ylim()
    ax.set_ylim(0, top * 1.12)  # head room for the annotations above the lines
    # Marked after the limits are fixed: the fastest label is placed from them.
    _mark_default(ax, cleaned, default_workers)
    if fastest is not None:
        _mark_fastest(ax, cleaned, fastest)
    elif tied > 1:
        # Above the axes, under the title: inside them it would sit on the legend or data.
        ax.set_title(
            f"no single fastest: {tied} settings within noise of the lowest",
            fontsize=9,
            color="0.25",
        )
    ax.set_xlabel("DataLoader num_workers")
    ax.set_ylabel("seconds per epoch")
    ax.grid(True, alpha=0.3)
    ax.legend(frameon=False, fontsize=9)
    if title:
        fig.suptitle(plot_text(title), fontsize=11)
    return write_figure(fig, png_path)


def _ring(ax: Axes, x: float, y: float, marker: str, size: float, face: str, **style: Any) -> None:
    """One black-edged marker drawn over a curve's point (the default, the fastest)."""
    style.setdefault("zorder", 5)
    ax.plot(
        [x],
        [y],
        linestyle="none",
        marker=marker,
        markersize=size,
        markerfacecolor=face,
        markeredgecolor="black",
        **style,
    )


def _mark_default(
    ax: Axes, series: dict[str, list[tuple[int, float, tuple[float, float]]]], default_workers: int
) -> None:
    label = f"PyTorch default (num_workers={default_workers})"
    # The "default" variant is what PyTorch gives out of the box; any other line with a
    # point at that x is a fallback so the default setting is always marked.
    order = ["default"] + [k for k in series if k != "default"]
    for key in order:
        hit = [m for x, m, _ in series.get(key, []) if x == default_workers]
        if hit:
            _ring(ax, default_workers, hit[0], "o", 15, "none", markeredgewidth=1.6, label=label)
            ax.annotate(
                "PyTorch default",
                (default_workers, hit[0]),
                xytext=(12, 14),
                textcoords="offset points",
                fontsize=8,
                arrowprops={"arrowstyle": "-", "color": "black", "linewidth": 0.8},
            )
            return
    ax.axvline(default_workers, color="black", linestyle=":", linewidth=1.0, label=label)


def _mark_fastest(
    ax: Axes,
    series: dict[str, list[tuple[int, float, tuple[float, float]]]],
    fastest: tuple[str, int],
) -> None:
    label, x = fastest
    hit = [m for px, m, _ in series.get(label, []) if px == x]
    if not hit:
        return
    y = hit[0]
    _ring(ax, x, y, "*", 17, "gold", zorder=6)
    text = f"fastest: {x} workers, {_fmt(y)} s"
    if len(series) > 1:
        text += f" ({plot_text(label)})"
    # The fastest point is the lowest one, so the space under it is free of lines; the
    # text goes there unless the point sits near the floor, and leans away from the edges.
    bottom, top = ax.get_ylim()
    left, right = ax.get_xlim()
    below = (y - bottom) / (top - bottom) > 0.16
    where = (x - left) / (right - left)
    ha = "left" if where < 0.35 else "right" if where > 0.65 else "center"
    dx = {"left": -10, "right": 10, "center": 0}[ha]
    ax.annotate(
        text,
        (x, y),
        xytext=(dx, -28 if below else 26),
        textcoords="offset points",
        ha=ha,
        va="top" if below else "bottom",
        fontsize=9,
        fontweight="bold",
        bbox={"boxstyle": "round,pad=0.25", "facecolor": "white", "edgecolor": "0.6"},
        arrowprops={"arrowstyle": "->", "color": "black", "linewidth": 0.8},
        zorder=7,
    )


@plain_text_figure
def per_iteration_plot(
    rows: list[tuple[str, float, Any, float, Any]], png_path: Path, *, title: str = ""
) -> list[Path]:
    """Horizontal stacked bars of data wait + compute milliseconds per iteration.

    ``rows`` are ``(label, data_ms, data_err, compute_ms, compute_err)``, first row on top,
    each error a number or (below, above) distances. Each segment carries an error bar at
    its end; non-finite numbers are drawn as 0.
    """
    if not rows:
        return []
    labels = [plot_text(r[0]) for r in rows]
    data = [_finite(r[1]) for r in rows]
    data_e = [_err(r[2]) for r in rows]
    comp = [_finite(r[3]) for r in rows]
    comp_e = [_err(r[4]) for r in rows]
    ys = list(range(len(rows)))
    ends = [d + c + ce[1] for d, c, ce in zip(data, comp, comp_e)]
    span = max(max(ends), max(d + e[1] for d, e in zip(data, data_e)), 1e-9)

    fig = new_figure(8.5, max(2.8, 0.55 * len(rows) + 1.8))
    ax = fig.add_subplot()
    err_kw = {"capsize": 3, "ecolor": "0.2", "error_kw": {"linewidth": 1.0}}
    data_xerr = [[e[0] for e in data_e], [e[1] for e in data_e]]
    ax.barh(ys, data, xerr=data_xerr, color=stage_color("data_wait"), label="data wait", **err_kw)
    ax.barh(
        ys,
        comp,
        left=data,
        xerr=[[e[0] for e in comp_e], [e[1] for e in comp_e]],
        color=stage_color("forward"),
        label=COMPUTE_LABEL,
        **err_kw,
    )

    for y, d, c, end in zip(ys, data, comp, ends):
        narrow = []
        for left, width, name in ((0.0, d, "data"), (d, c, "compute")):
            # A value only goes inside its segment when the text fits there.
            if width / span >= 0.18:
                ax.text(
                    left + width / 2,
                    y,
                    f"{_fmt(width)} ms",
                    ha="center",
                    va="center",
                    fontsize=8,
                    color="white",
                    fontweight="bold",
                )
            else:
                narrow.append(f"{name} {_fmt(width)} ms")
        total = f"{_fmt(d + c)} ms" + (f" ({', '.join(narrow)})" if narrow else "")
        ax.text(end + span * 0.02, y, total, ha="left", va="center", fontsize=8)

    ax.set_yticks(ys, labels)
    ax.invert_yaxis()  # first row on top, in the order given
    ax.set_xlim(0, span * 1.45)  # room for the totals right of the bars
    ax.set_xlabel("milliseconds per iteration")
    ax.grid(True, axis="x", alpha=0.3)
    fig.legend(loc="outside lower center", ncols=2, frameon=False, fontsize=9)
    if title:
        fig.suptitle(plot_text(title), fontsize=11)
    return write_figure(fig, png_path)


def smoothing_window(n: int) -> int:
    """Steps averaged per point of a loss curve of ``n`` steps: 1 (none) up to 100 steps,
    then about n / 50, odd so the window is centred."""
    if n <= 100:
        return 1
    w = max(3, n // 50)
    return w if w % 2 else w + 1


def running_mean(values: Sequence[float], window: int) -> list[float]:
    """Centred running mean; near the ends the window shrinks to what exists."""
    half = window // 2
    prefix = [0.0]
    for v in values:
        prefix.append(prefix[-1] + v)
    out = []
    for i in range(len(values)):
        lo, hi = max(0, i - half), min(len(values), i + half + 1)
        out.append((prefix[hi] - prefix[lo]) / (hi - lo))
    return out


@plain_text_figure
def loss_curves_plot(
    curves: dict[str, tuple[list[int], list[float]]],
    png_path: Path,
    *,
    title: str = "",
    ylabel: str = "training loss",
) -> list[Path]:
    """One loss line per label against optimizer step (smoothed beyond 100 steps, see
    :func:`smoothing_window`, with the raw curve faint behind it).

    A curve is drawn up to its first nan/inf and its legend says where it went
    non-finite. The y axis is logarithmic when all drawn losses are positive and span
    more than a factor of 20.
    """
    present = {k: v for k, v in curves.items() if len(v[0]) and len(v[1])}
    if not present:
        return []

    fig = new_figure(8.0, 4.5)
    ax = fig.add_subplot()
    drawn: list[float] = []
    for label, (steps, losses) in present.items():
        pairs = list(zip(steps, losses))
        bad = next((i for i, (_, v) in enumerate(pairs) if not math.isfinite(v)), None)
        text = plot_text(label)
        if bad is not None:
            text += f" (non-finite from step {pairs[bad][0]})"
            pairs = pairs[:bad]
        xs = [p[0] for p in pairs]
        ys = [float(p[1]) for p in pairs]
        drawn += ys
        window = smoothing_window(len(ys))
        if window > 1:
            # Per-step losses of small batches are noisy: the raw curve stays, faint, and
            # a centred running mean over `window` steps shows the trend in the legend.
            line = ax.plot(xs, ys, linewidth=0.6, alpha=0.25)[0]
            ax.plot(
                xs,
                running_mean(ys, window),
                linewidth=1.6,
                color=line.get_color(),
                label=f"{text} (mean of {window} steps)",
            )
            continue
        # Drawn even when empty, so a run that diverged at once still has a legend entry.
        ax.plot(xs, ys, linewidth=1.3, marker="o" if len(xs) == 1 else None, label=text)

    # Losses often fall by orders of magnitude; a log axis keeps the tail readable.
    if drawn and min(drawn) > 0 and max(drawn) / min(drawn) > 20:
        ax.set_yscale("log")
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole numbers
    ax.set_xlabel("optimizer step")
    ax.set_ylabel(plot_text(ylabel))
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(frameon=False, fontsize=9)
    if title:
        fig.suptitle(plot_text(title), fontsize=11)
    return write_figure(fig, png_path)


@plain_text_figure
def bar_plot(
    labels: list[str],
    values: list[float | None],
    errors: list[Any],
    png_path: Path,
    *,
    ylabel: str,
    title: str = "",
    value_fmt: Callable[[float], str] = fmt_sig,
    na_text: str = "n/a",
) -> list[Path]:
    """Vertical bars with error bars and value labels.

    Each error is a number, (below, above) distances (a median's spread), or None (no
    error bar). A None (or non-finite) value gets no bar but ``na_text`` at its base, so a
    configuration that does not apply still shows on the axis.
    """
    if not (len(labels) == len(values) == len(errors)):
        raise ValueError("labels, values and errors must have the same length")
    if not labels:
        return []
    xs = list(range(len(labels)))
    shown = [
        (x, float(v), _err(e))
        for x, v, e in zip(xs, values, errors)
        if isinstance(v, (int, float)) and math.isfinite(v)
    ]

    fig = new_figure(max(5.0, 0.9 * len(labels) + 2.5), 4.5)
    ax = fig.add_subplot()
    if shown:
        bx, bv, be = zip(*shown)
        ax.bar(bx, bv, color="tab:blue", width=0.65)
        with_err = [(x, v, e) for x, v, e in shown if e[0] + e[1] > 0]
        if with_err:
            ex, ev, ee = zip(*with_err)
            yerr = [[e[0] for e in ee], [e[1] for e in ee]]
            ax.errorbar(ex, ev, yerr=yerr, fmt="none", ecolor="0.2", capsize=4, linewidth=1.0)
        for x, v, e in shown:
            # Above the error bar (below it for negative bars), so the two never overlap.
            tip = v + e[1] if v >= 0 else v - e[0]
            ax.annotate(
                value_fmt(v),
                (x, tip),
                xytext=(0, 3 if v >= 0 else -3),
                textcoords="offset points",
                ha="center",
                va="bottom" if v >= 0 else "top",
                fontsize=8,
            )
    for x in sorted(set(xs) - {s[0] for s in shown}):
        ax.annotate(
            plot_text(na_text),
            (x, 0),
            xytext=(0, 3),
            textcoords="offset points",
            ha="center",
            va="bottom",
            fontsize=9,
            color="0.4",
            style="italic",
        )

    _scale_bar_axis(ax, [(v, e) for _, v, e in shown])
    long_labels = len(labels) > 6 or any(len(lab) > 12 for lab in labels)
    ax.set_xticks(
        xs,
        [plot_text(lab) for lab in labels],
        rotation=25 if long_labels else 0,
        ha="right" if long_labels else "center",
    )
    ax.set_xlim(-0.6, len(labels) - 0.4)
    ax.set_ylabel(plot_text(ylabel))
    ax.grid(True, axis="y", alpha=0.3)
    if title:
        fig.suptitle(plot_text(title), fontsize=11)
    return write_figure(fig, png_path)


def _scale_bar_axis(ax: Axes, bars: Sequence[tuple[float, tuple[float, float]]]) -> None:
    # Bars start at 0; leave head room for the value labels above the tallest error bar.
    high = max([v + e[1] for v, e in bars] + [0.0])
    low = min([v - e[0] for v, e in bars] + [0.0])
    if high == low:
        high = 1.0
    pad = 0.15 * (high - low)
    ax.set_ylim(low - pad if low < 0 else 0.0, high + pad if high > 0 else 0.0)


__all__ = [
    "bar_plot",
    "loss_curves_plot",
    "per_iteration_plot",
    "workers_sweep_plot",
]
