"""Report figures drawn from run records with matplotlib's Agg canvas.

matplotlib is imported inside each function (``import trainscope.reports`` stays light),
and figures are built as ``matplotlib.figure.Figure`` objects on a ``FigureCanvasAgg``
rather than through pyplot: no global backend switch, no figure registry to leak, and it
works on a headless machine without a display.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from trainscope.records.attempts import resumes
from trainscope.records.run_dir import STAGE_LABELS, STAGES, RunRecord
from trainscope.records.source import stage_labels
from trainscope.records.view import SummaryView
from trainscope.render.table import fmt_pct, fmt_seconds
from trainscope.util.textsafe import plot_text

P = ParamSpec("P")
R = TypeVar("R")

if TYPE_CHECKING:
    from matplotlib.figure import Figure

PNG_DPI = 150

# Stages under this share of the drawn total get no text on their wedge (it would not
# fit and would overlap its neighbours); the legend names every stage with its share.
_MIN_WEDGE_LABEL_SHARE = 0.04


def new_figure(width: float, height: float) -> Figure:
    """An empty figure of that size (inches) on its own Agg canvas (no pyplot)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def save_figure(fig: Figure, path_png: str | Path, path_svg: str | Path | None) -> list[Path]:
    """Write the figure as a PNG (and an SVG when ``path_svg`` is given); the paths."""
    written = []
    png = Path(path_png)
    png.parent.mkdir(parents=True, exist_ok=True)
    # No timestamps in the metadata: rebuilding a report gives byte-identical files.
    fig.savefig(png, dpi=PNG_DPI, format="png", metadata={"Software": None})
    written.append(png)
    if path_svg is not None:
        svg = Path(path_svg)
        svg.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(svg, format="svg", metadata={"Date": None})
        written.append(svg)
    return written


def plain_text_figure(draw: Callable[P, R]) -> Callable[P, R]:
    """Run a drawing function with LaTeX text rendering off, whatever matplotlibrc says.

    With ``text.usetex`` on, every title and label is handed to LaTeX, where a run named
    ``\\input{/etc/passwd}`` would be read into the figure. Record text is made plain
    for mathtext by ``plot_text``; this keeps it away from LaTeX (ticks and legends are
    laid out at save time, so the whole function runs under it, not only the text calls).
    """

    @functools.wraps(draw)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        import matplotlib

        with matplotlib.rc_context({"text.usetex": False}):
            return draw(*args, **kwargs)

    return wrapper


def stage_color(name: str) -> Any:
    """The stage's colour in every figure."""
    # A fixed colour per stage, so the same stage looks the same in every report.
    from matplotlib import colormaps

    if name == "other":  # the 11th stage: tab10 would give it setup's blue again
        return "#c7c7c7"  # light grey (tab20's), apart from the optimizer's darker grey
    if name == "pipeline_wait":  # beyond tab10 too: tab20's light red, beside comm's
        return "#ff9896"
    palette = colormaps["tab10"]
    order = [s for s in STAGES if s != "pipeline_wait"]  # the colours stages always had
    index = order.index(name) if name in order else len(order) + len(name) % 2
    return palette(index % 10)


def run_heading(summary: dict[str, Any]) -> str:
    """A figure title's name of the run: workload / model (device, precision)."""
    name = " / ".join(str(summary[k]) for k in ("workload", "model") if summary.get(k))
    where = ", ".join(str(summary[k]) for k in ("device", "precision") if summary.get(k))
    head = name or "run"
    if where:
        head += f" ({where})"
    return plot_text(head)


@plain_text_figure
def stage_pie(
    summary: dict[str, Any], path_png: str | Path, path_svg: str | Path | None = None
) -> list[Path]:
    """Pie of where the wall time went; returns the files written ([] without timings).

    Only positive stages become wedges. A negative ``other`` (asynchronous GPU timing
    overlapping the host clock) is listed in the legend as "not drawn", never hidden.
    Shares in the text are of the wall time, as in the stage table.
    """
    stages: dict[str, Any] = SummaryView(summary).stages_s
    names = [s for s in STAGES if s in stages] + [s for s in stages if s not in STAGES]
    values = {n: stages[n] for n in names if isinstance(stages[n], (int, float))}
    drawn = [n for n in names if n in values and values[n] > 0 and math.isfinite(values[n])]
    if not drawn:
        return []
    wall = summary.get("wall_time_s")
    if not isinstance(wall, (int, float)) or wall <= 0:
        wall = sum(values[n] for n in drawn)
    drawn_total = sum(values[n] for n in drawn)

    fig = new_figure(8.0, 4.8)
    ax = fig.add_subplot()
    wedges, _ = ax.pie(
        [values[n] for n in drawn],
        colors=[stage_color(n) for n in drawn],
        startangle=90,
        counterclock=False,
        wedgeprops={"linewidth": 1.0, "edgecolor": "white"},
    )
    # Percent text inside the big wedges only, placed at 70% of the radius.
    for wedge, name in zip(wedges, drawn):
        if values[name] / drawn_total < _MIN_WEDGE_LABEL_SHARE:
            continue
        angle = math.radians((wedge.theta1 + wedge.theta2) / 2)
        ax.text(
            0.7 * math.cos(angle),
            0.7 * math.sin(angle),
            fmt_pct(values[name] / wall),
            ha="center",
            va="center",
            fontsize=9,
            color="white",
            fontweight="bold",
        )
    ax.set_aspect("equal")

    handles = list(wedges)
    # Stage names not in STAGE_LABELS are the record's own text.
    words = stage_labels(summary, STAGE_LABELS)
    labels = [
        plot_text(f"{words.get(n, n)}: {fmt_seconds(values[n])} s ({fmt_pct(values[n] / wall)})")
        for n in drawn
    ]
    from matplotlib.patches import Patch

    for n in names:
        if n in drawn:
            continue
        handles.append(Patch(facecolor="none", edgecolor="none"))
        shown = fmt_seconds(values.get(n, stages[n]))
        labels.append(plot_text(f"{words.get(n, n)}: {shown} s (not positive, not drawn)"))
    # A figure legend placed "outside" gets room from the constrained layout (an axes
    # legend anchored beyond the axes would be clipped at the figure edge).
    fig.legend(handles, labels, loc="outside right center", frameon=False, fontsize=9)
    wall_text = fmt_seconds(SummaryView(summary).wall_time_s)
    fig.suptitle(
        f"Where the time went: {run_heading(summary)}, wall time {wall_text} s", fontsize=11
    )
    return save_figure(fig, path_png, path_svg)


def _epoch_end_steps(steps: list[dict[str, Any]]) -> dict[int, int]:
    # The global step at which each epoch ended: where its per-epoch points are drawn.
    ends: dict[int, int] = {}
    for ev in steps:
        ep, st = ev.get("epoch"), ev.get("step")
        if isinstance(ep, int) and isinstance(st, (int, float)):
            ends[ep] = max(ends.get(ep, 0), int(st))
    return ends


@plain_text_figure
def loss_curve(
    record: RunRecord, path_png: str | Path, path_svg: str | Path | None = None
) -> list[Path]:
    """Per-step training loss with per-epoch train/val loss overlaid.

    Reads ``{"event": "step", "step", "epoch", "loss"}`` lines from metrics.jsonl and
    ``summary["epochs"]``. Returns the files written, or [] when there are no step events
    with a finite loss (nothing to draw).
    """
    steps = [
        ev
        for ev in record.events("step")
        if isinstance(ev.get("step"), (int, float)) and isinstance(ev.get("loss"), (int, float))
    ]
    points = [(ev["step"], ev["loss"]) for ev in steps if math.isfinite(ev["loss"])]
    if not points:
        return []
    non_finite = len(steps) - len(points)
    xs, ys = zip(*points)

    fig = new_figure(8.0, 4.5)
    ax = fig.add_subplot()
    ax.plot(xs, ys, color="tab:blue", linewidth=0.9, alpha=0.6, label="train loss (step)")

    ends = _epoch_end_steps(steps)
    epochs = record.view.epochs
    all_y = list(ys)
    for key, color, label in (
        ("train_loss", "tab:blue", "train loss (epoch mean)"),
        ("val_loss", "tab:orange", "val loss"),
    ):
        pts = [
            (ends[ep["epoch"]], ep[key])
            for ep in epochs
            if ep.get("epoch") in ends
            and isinstance(ep.get(key), (int, float))
            and math.isfinite(ep[key])
        ]
        if pts:
            ex, ey = zip(*pts)
            all_y += ey
            ax.plot(ex, ey, "o-", color=color, linewidth=1.8, markersize=5, label=label)
    for end in sorted(ends.values())[:-1]:
        ax.axvline(end + 0.5, color="0.85", linewidth=0.8, zorder=0)
    for i, resume in enumerate(resumes(record.metrics)):  # where a resumed run went on
        at = resume.get("from_step")
        if isinstance(at, int) and not isinstance(at, bool):
            ax.axvline(at + 0.5, color="tab:red", linestyle="--", linewidth=1.0, zorder=1,
                       label="resumed from a checkpoint" if i == 0 else None)  # fmt: skip

    # Losses often fall by orders of magnitude; a log axis keeps the tail readable.
    if min(all_y) > 0 and max(all_y) / min(all_y) > 20:
        ax.set_yscale("log")
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole numbers
    ax.set_xlabel("global step")
    ax.set_ylabel("loss")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(frameon=False, fontsize=9)
    title = f"Training loss: {run_heading(record.summary)}"
    if non_finite:
        title += f"  [{non_finite} non-finite step losses not drawn]"
    fig.suptitle(title, fontsize=11)
    return save_figure(fig, path_png, path_svg)
