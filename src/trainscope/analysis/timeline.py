"""One timeline of a run: where the loop was, and what the machine did, on one time axis.

Read from the run record alone (no torch): step lines carry ``t``, the host time at which
the step began, and ``stages``, the seconds of each stage in the order they ran; epoch,
test, checkpoint and setup lines carry their own times; system samples carry ``mono``. All
are seconds since the run's clock origin (a monotonic clock), and
``summary["clock"]["unix_at_origin"]`` puts that origin on the calendar.

A multi-rank run keeps rank R's files in ``ranks/rank<R>/`` with its own origin; ranks are
put on rank 0's axis by the difference of their ``unix_at_origin``. On one machine that is
exact to the clock reading; across machines it is only as good as their clock sync (NTP is
typically good to a millisecond or so, which is longer than a short stage).

Records written before steps carried ``t`` have no timeline: :func:`load_timeline` returns
one without steps and :func:`timeline_section` says so instead of drawing a guess.
"""

from __future__ import annotations

import math
import os
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainscope.errors import TrainscopeError
from trainscope.records.run_dir import STAGE_LABELS, STAGES, RunRecord, load_run
from trainscope.records.view import SummaryView
from trainscope.render.document import Document, escape_inline
from trainscope.render.plots import (
    new_figure,
    plain_text_figure,
    run_heading,
    save_figure,
    stage_color,
)
from trainscope.util.textsafe import plot_text

if TYPE_CHECKING:
    from matplotlib.axes import Axes

# A system series: (metric, GPU index or None for the process) -> [(time, value), ...].
SeriesKey = tuple[str, int | None]

# Process metrics first, then per-GPU ones, in the order the panels are drawn.
PROCESS_METRICS = ("cpu_percent", "rss_bytes")
GPU_METRICS = ("util_percent", "memory_used_bytes", "power_w")

# Stage rows drawn at most (the figure would grow without bound); the report says so, and
# the system panels still show every rank.
MAX_DRAWN_RANKS = 16

# Time bins across the stage rows: about one per pixel of the saved PNG. Steps shorter than
# two bins are drawn as the share of each stage per bin (exact at that resolution, and a
# 30k-step run stays a few thousand polygons); longer steps as one bar per stage.
_BINS = 1600


def _num(value: Any) -> float | None:
    # A finite number from a record, or None (bools are not numbers here).
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


@dataclass(slots=True, frozen=True)
class Chunk:
    """One microbatch's forward (F), backward (B) or loss (L) on a pipeline stage."""

    kind: str
    stage: int
    microbatch: int
    start: float
    end: float


CHUNK_KINDS = {"F": "forward", "B": "backward", "L": "loss"}
CHUNK_STAGES = {"F": "forward", "B": "backward", "L": "backward"}
"""The step stage a microbatch's part belongs to (the loss is in "loss + backward")."""
SCHEDULED_STAGES = ("forward", "backward", "pipeline_wait")
"""A pipeline step's stages that its microbatches show as they ran."""


def _chunks(raw: Any, offset: float) -> tuple[Chunk, ...]:
    """A step record's ``microbatches`` as chunks on the common axis (bad entries skipped)."""
    out = []
    for item in raw if isinstance(raw, list) else ():
        if not isinstance(item, list) or len(item) != 5 or item[0] not in CHUNK_KINDS:
            continue
        stage, mb = item[1], item[2]
        start, end = _num(item[3]), _num(item[4])
        if not all(isinstance(x, int) and not isinstance(x, bool) for x in (stage, mb)):
            continue
        if start is not None and end is not None and end >= start:
            out.append(Chunk(item[0], stage, mb, start + offset, end + offset))
    return tuple(out)


@dataclass(slots=True)
class Step:
    """One training step on the common axis: start ``t`` and its stages in run order."""

    step: int | None
    epoch: int | None
    t: float
    stages: tuple[tuple[str, float], ...]
    loss: float | None = None
    batch_size: int | None = None
    chunks: tuple[Chunk, ...] = ()
    """A pipeline rank's microbatches in this step, at their own times."""

    @property
    def duration(self) -> float:
        """Seconds of all its stages (they ran one after another)."""
        return sum(d for _, d in self.stages)


@dataclass(slots=True)
class Span:
    """A stretch of time outside the step loop: ``setup``, ``validation``, ``test`` or
    ``checkpoint`` (``step``: the step the checkpoint was taken after)."""

    name: str
    start: float
    duration: float
    epoch: int | None = None
    step: int | None = None


@dataclass(slots=True)
class Epoch:
    """An epoch's start and end on the common axis."""

    epoch: int | None
    start: float
    end: float


@dataclass
class RankTimeline:
    """What one rank did, on the common axis (rank 0's clock origin)."""

    rank: int
    offset_s: float
    """Added to this rank's own times to put them on the common axis."""
    steps: list[Step] = field(default_factory=list)
    epochs: list[Epoch] = field(default_factory=list)
    spans: list[Span] = field(default_factory=list)
    system: dict[SeriesKey, list[tuple[float, float]]] = field(default_factory=dict)
    steps_without_t: int = 0


@dataclass
class Timeline:
    """Every rank of one run on one axis; ``notes`` say what could not be placed."""

    path: Path
    summary: dict[str, Any]
    ranks: list[RankTimeline]
    origin_unix: float | None
    notes: list[str] = field(default_factory=list)

    @property
    def has_steps(self) -> bool:
        """True when at least one step has a start time (there is something to draw)."""
        return any(r.steps for r in self.ranks)

    def bounds(self) -> tuple[float, float]:
        """Earliest and latest time of anything on the axis (0, 0 when empty)."""
        lo, hi = 0.0, 0.0
        for r in self.ranks:
            if r.steps:
                lo = min(lo, r.steps[0].t)
                hi = max(hi, max(s.t + s.duration for s in r.steps))
            for e in r.epochs:
                lo, hi = min(lo, e.start), max(hi, e.end)
            for sp in r.spans:
                lo, hi = min(lo, sp.start), max(hi, sp.start + sp.duration)
            for points in r.system.values():
                lo, hi = min(lo, points[0][0]), max(hi, points[-1][0])
        return lo, hi


def _clock(summary: dict[str, Any]) -> float | None:
    return _num(SummaryView(summary).section("clock").get("unix_at_origin"))


def _steps(record: RunRecord, offset: float) -> tuple[list[Step], int]:
    steps, without_t = [], 0
    for ev in record.metrics:
        if ev.get("event") != "step":
            continue
        t = _num(ev.get("t"))
        if t is None:
            without_t += 1
            continue
        raw = ev.get("stages")
        # Dict order is the order the stages ran in (json keeps the key order written).
        stages = tuple(
            (str(k), d)
            for k, v in (raw.items() if isinstance(raw, dict) else ())
            if (d := _num(v)) is not None and d >= 0
        )
        step, epoch, bs = ev.get("step"), ev.get("epoch"), ev.get("batch_size")
        steps.append(
            Step(
                step=step if isinstance(step, int) and not isinstance(step, bool) else None,
                epoch=epoch if isinstance(epoch, int) and not isinstance(epoch, bool) else None,
                t=t + offset,
                stages=stages,
                loss=_num(ev.get("loss")),
                batch_size=bs if isinstance(bs, int) and not isinstance(bs, bool) else None,
                chunks=_chunks(ev.get("microbatches"), offset),
            )
        )
    steps.sort(key=lambda s: s.t)  # lines are written in order; a merged file might not be
    return steps, without_t


def _epochs_and_spans(record: RunRecord, offset: float) -> tuple[list[Epoch], list[Span]]:
    epochs: list[Epoch] = []
    spans: list[Span] = []
    for ev in record.metrics:
        kind = ev.get("event")
        if kind == "setup" and (s := _num(ev.get("seconds"))) is not None and s >= 0:
            spans.append(Span("setup", offset, s))
        elif kind == "epoch":
            n = ev.get("epoch") if isinstance(ev.get("epoch"), int) else None
            start, end = _num(ev.get("t_start")), _num(ev.get("t_end"))
            if start is not None and end is not None and end >= start:
                epochs.append(Epoch(n, start + offset, end + offset))
            vt, vs = _num(ev.get("val_t")), _num(ev.get("val_s"))
            if vt is not None and vs is not None and vs >= 0:
                spans.append(Span("validation", vt + offset, vs, n))
        elif kind in ("test", "checkpoint"):
            t, s = _num(ev.get("t")), _num(ev.get("seconds"))
            if t is not None and s is not None and s >= 0:
                step = ev.get("step")
                step = step if isinstance(step, int) and not isinstance(step, bool) else None
                spans.append(Span(kind, t + offset, s, step=step))
    return epochs, spans


def _system(
    samples: list[dict[str, Any]], own_origin: float | None, offset: float
) -> tuple[dict[SeriesKey, list[tuple[float, float]]], int]:
    series: dict[SeriesKey, list[tuple[float, float]]] = {}
    unplaced = 0
    for sample in samples:
        local = _num(sample.get("mono"))
        if local is None and own_origin is not None and (unix := _num(sample.get("t"))) is not None:
            local = unix - own_origin  # an older sample: wall clock, aligned by the origin
        if local is None:
            unplaced += 1
            continue
        x = local + offset
        for metric in PROCESS_METRICS:
            if (v := _num(sample.get(metric))) is not None:
                series.setdefault((metric, None), []).append((x, v))
        gpus = sample.get("gpus")
        for gpu in gpus if isinstance(gpus, list) else ():
            # An entry may be {"index", "error"}: it has no numbers and is skipped.
            index = gpu.get("index") if isinstance(gpu, dict) else None
            if not isinstance(index, int) or isinstance(index, bool):
                continue
            for metric in GPU_METRICS:
                if (v := _num(gpu.get(metric))) is not None:
                    series.setdefault((metric, index), []).append((x, v))
    for points in series.values():
        points.sort()
    return series, unplaced


def _rank_records(run: RunRecord, notes: list[str]) -> list[tuple[int, RunRecord]]:
    # Rank 0 is the run directory itself; rank R>=1 lives in ranks/rank<R>/.
    found: dict[int, Path] = {}
    ranks_dir = run.path / "ranks"
    if ranks_dir.is_dir():
        for child in ranks_dir.iterdir():
            if (m := re.fullmatch(r"rank(\d+)", child.name)) and child.is_dir():
                if int(m.group(1)) >= 1:
                    found[int(m.group(1))] = child
    world = run.view.world_size
    expected = range(1, world) if world is not None else ()
    missing = [r for r in expected if r not in found]
    if missing:
        shown = ", ".join(str(r) for r in missing[:8]) + (", ..." if len(missing) > 8 else "")
        notes.append(f"no record of rank(s) {shown} in ranks/: not on the timeline")
    out = [(0, run)]
    for rank in sorted(found):
        try:
            out.append((rank, load_run(found[rank])))
        except TrainscopeError as e:
            notes.append(f"rank {rank} left out: {e}")
    return out


def load_timeline(run: RunRecord | str | os.PathLike[str]) -> Timeline:
    """Every rank's steps, epochs, setup/evaluation/checkpoint spans and system samples on
    one axis.

    The axis is seconds since rank 0's clock origin. Rank R's times are shifted by
    ``unix_at_origin(R) - unix_at_origin(0)``: exact on one machine, as good as the clock
    sync across machines. A rank without a recorded origin stays unshifted (and says so
    in ``notes``). Step lines without ``t`` (older records) are counted, never placed.
    """
    record = run if isinstance(run, RunRecord) else load_run(run)
    notes: list[str] = []
    origin0 = _clock(record.summary)
    ranks = []
    for rank, rec in _rank_records(record, notes):
        own = _clock(rec.summary)
        offset = 0.0
        if rank and own is not None and origin0 is not None:
            offset = own - origin0
        elif rank:
            notes.append(f"rank {rank}: no clock origin recorded on both ranks; drawn unshifted")
        steps, without_t = _steps(rec, offset)
        epochs, spans = _epochs_and_spans(rec, offset)
        system, unplaced = _system(rec.system, own, offset)
        if unplaced:
            notes.append(
                f"rank {rank}: {unplaced} system sample(s) have no time on the run's clock"
                " (no mono time and no clock origin): left out"
            )
        if without_t and steps:
            notes.append(f"rank {rank}: {without_t} step line(s) have no start time: left out")
        ranks.append(RankTimeline(rank, offset, steps, epochs, spans, system, without_t))
    return Timeline(record.path, record.summary, ranks, origin0, notes)


def no_timeline_reason(timeline: Timeline) -> str | None:
    """Why there is nothing to draw (one line), or None when there is a timeline."""
    if timeline.has_steps:
        return None
    if any(r.steps_without_t for r in timeline.ranks):
        return (
            "No timeline: the step records carry no start times (`t`); they were written"
            " before trainscope recorded them, and a timeline is not guessed from durations."
        )
    return "No timeline: the run recorded no training steps."


# ---------------------------------------------------------------------------------------
# Drawing
# ---------------------------------------------------------------------------------------

_PANEL_LABELS = {
    "cpu_percent": "process CPU %",
    "rss_bytes": "RSS",
    "util_percent": "GPU util %",
    "memory_used_bytes": "GPU memory",
    "power_w": "GPU power (W)",
}

# Spans outside the loop are drawn in the colour of the stage they count towards.
_SPAN_STAGE = {
    "setup": "setup",
    "validation": "evaluation",
    "test": "evaluation",
    "checkpoint": "checkpoint",
}


def _line_color(i: int) -> Any:
    # Dark2, not tab10: system lines must not look like stage bands.
    from matplotlib import colormaps

    return colormaps["Dark2"](i % 8)


def _draw_background(
    ax: Axes, ref: RankTimeline | None, label_epochs: bool, spans: bool = True
) -> None:
    # Epoch boundaries and setup/evaluation/checkpoint spans of the reference rank, behind
    # the data.
    if ref is None:
        return
    for sp in ref.spans if spans else ():
        color = stage_color(_SPAN_STAGE.get(sp.name, sp.name))
        ax.axvspan(sp.start, sp.start + sp.duration, color=color, alpha=0.12, lw=0, zorder=0)
    edges = sorted({e.start for e in ref.epochs} | {e.end for e in ref.epochs})
    for x in edges:
        ax.axvline(x, color="0.55", linestyle="--", linewidth=0.7, zorder=0.5)
    if label_epochs:
        # At most ~10 labels: thirty epochs labelled one by one run into each other.
        every = max(1, math.ceil(len(ref.epochs) / 10))
        for i, e in enumerate(ref.epochs):
            if e.epoch is not None and i % every == 0:
                ax.text(
                    e.start,
                    1.0,
                    f" epoch {e.epoch}",
                    transform=ax.get_xaxis_transform(),
                    ha="left",
                    va="bottom",
                    fontsize=7,
                    color="0.35",
                    clip_on=False,
                )


def _bytes_scale(points: list[list[tuple[float, float]]]) -> tuple[float, str]:
    top = max((v for pts in points for _, v in pts), default=0.0)
    return (2.0**30, "GiB") if top >= 2**30 else (2.0**20, "MiB")


def _draw_system_panel(
    ax: Axes, metric: str, series: list[tuple[str, list[tuple[float, float]]]]
) -> None:
    scale, unit = 1.0, ""
    if metric.endswith("_bytes"):
        scale, unit = _bytes_scale([pts for _, pts in series])
    for i, (label, pts) in enumerate(series):
        xs = [x for x, _ in pts]
        ys = [v / scale for _, v in pts]
        # Few samples get markers, so a lone sample is visible as a point.
        marker = "." if len(pts) < 60 else None
        ax.plot(xs, ys, color=_line_color(i), lw=0.9, marker=marker, ms=3, label=label, zorder=2)
    ylabel = _PANEL_LABELS[metric] + (f" ({unit})" if unit else "")
    ax.set_ylabel(ylabel, fontsize=8)
    ax.tick_params(labelsize=7)
    # Plain tick values: an offset ("+2.861e2") reads as a different quantity.
    ax.ticklabel_format(axis="y", style="plain", useOffset=False)
    ax.grid(True, axis="y", alpha=0.3)
    if metric.endswith("percent"):
        ax.set_ylim(bottom=0)
    if 1 < len(series) <= 8:
        ax.legend(frameon=False, fontsize=7, loc="upper right", ncols=min(len(series), 4))


def _stage_intervals(steps: list[Step]) -> dict[str, tuple[list[float], list[float]]]:
    # Per stage: (starts, durations). Stages ran back to back from the step's start; a
    # pipeline step's forward and backward are its microbatches, where they ran (the gaps
    # between them are its wait: not drawn).
    out: dict[str, tuple[list[float], list[float]]] = {}

    def add(name: str, start: float, duration: float) -> None:
        starts, durs = out.setdefault(name, ([], []))
        starts.append(start)
        durs.append(duration)

    for s in steps:
        t = s.t
        for name, d in s.stages:
            if not (s.chunks and name in SCHEDULED_STAGES):
                add(name, t, d)
            t += d
        for c in s.chunks:
            add(CHUNK_STAGES[c.kind], c.start, c.end - c.start)
    return out


def _occupancy(starts: Any, durs: Any, edges: Any) -> Any:
    """Seconds of the intervals inside each bin between ``edges`` (exact, overlaps count
    twice): the integral of the interval count, from sorted starts and sorted ends."""
    import numpy as np

    s = np.sort(starts)
    e = np.sort(starts + durs)
    cs = np.concatenate(([0.0], np.cumsum(s)))
    ce = np.concatenate(([0.0], np.cumsum(e)))
    ns = np.searchsorted(s, edges, side="right")
    ne = np.searchsorted(e, edges, side="right")
    covered = (ns * edges - cs[ns]) - (ne * edges - ce[ne])
    return np.diff(covered)


def _drawn_as_shares(rank: RankTimeline, lo: float, hi: float) -> bool:
    """True when this rank's steps are too short to see one by one (under two bins)."""
    if not rank.steps or hi <= lo:
        return False
    return statistics.median(s.duration for s in rank.steps) < 2 * (hi - lo) / _BINS


def _draw_stage_row(ax: Axes, rank: RankTimeline, y: float, lo: float, hi: float) -> set[str]:
    """One rank's row centred on ``y``; returns the stage names drawn (for the legend)."""
    import numpy as np
    from matplotlib.collections import PolyCollection

    half = 0.4
    drawn: set[str] = set()
    by_stage: dict[str, list[tuple[float, float]]] = {}
    for sp in rank.spans:
        by_stage.setdefault(_SPAN_STAGE.get(sp.name, sp.name), []).append((sp.start, sp.duration))
    for name, bars in by_stage.items():
        ax.broken_barh(bars, (y - half, 2 * half), facecolors=stage_color(name), lw=0)
        drawn.add(name)

    intervals = _stage_intervals(rank.steps)
    if not intervals:
        return drawn
    names = [n for n in STAGES if n in intervals] + [n for n in intervals if n not in STAGES]
    drawn |= set(names)
    width = (hi - lo) / _BINS if hi > lo else 1.0
    if not _drawn_as_shares(rank, lo, hi):
        # Steps are wide enough to see: one bar per stage and step, as it happened.
        for name in names:
            starts, durs = intervals[name]
            bars = list(zip(starts, durs))
            ax.broken_barh(bars, (y - half, 2 * half), facecolors=stage_color(name), lw=0)
        return drawn
    # Many steps per pixel: stack each stage's share of every bin, in run order, so a
    # bin that is 70% backward is 70% backward-coloured (drawing bars would let the last
    # stage drawn paint over the rest).
    edges = np.linspace(lo, hi, _BINS + 1)
    shares = [
        _occupancy(np.asarray(intervals[n][0]), np.asarray(intervals[n][1]), edges) / width
        for n in names
    ]
    # GPU-timed stages may overlap the next step on the host axis: never stack past full.
    total = np.maximum(np.sum(shares, axis=0), 1.0)
    # Each stage is one step-shaped polygon (top edge left to right, bottom edge back):
    # a collection, because a patch per stage (ax.stairs) recomputes the data limits
    # segment by segment, seconds for a few polygons of thousands of vertices.
    xs = np.repeat(edges, 2)[1:-1]
    bottom = np.full(_BINS, y - half)
    for name, share in zip(names, shares):
        top = bottom + 2 * half * share / total
        verts = np.column_stack(
            (np.concatenate((xs, xs[::-1])), np.repeat(np.concatenate((top, bottom[::-1])), 2))
        )
        poly = PolyCollection([verts], facecolors=[stage_color(name)], linewidths=0)
        ax.add_collection(poly, autolim=False)
        bottom = top
    return drawn


@plain_text_figure
def timeline_figure(
    timeline: Timeline, path_png: str | Path, path_svg: str | Path | None = None
) -> list[Path]:
    """Draw the run's timeline; returns the files written ([] when no step has a time).

    Top panels: system metrics over time (process CPU %, RSS, and per GPU util %, memory
    used and power when recorded), one line per rank and GPU. Bottom panel: one row per
    rank showing which loop stage ran when (setup, evaluation and checkpoint spans
    included), in the stage colours of the other figures. Epoch boundaries (dashed) and
    setup/evaluation/checkpoint spans (tinted) of rank 0 are drawn behind every panel.
    """
    if not timeline.has_steps:
        return []
    multi = len(timeline.ranks) > 1
    rows = timeline.ranks[:MAX_DRAWN_RANKS]
    lo, hi = timeline.bounds()
    if hi <= lo:
        hi = lo + 1.0

    panels: list[tuple[str, list[tuple[str, list[tuple[float, float]]]]]] = []
    for metric in PROCESS_METRICS + GPU_METRICS:
        lines = []
        for r in timeline.ranks:
            for (m, gpu), pts in sorted(
                r.system.items(), key=lambda kv: -1 if kv[0][1] is None else kv[0][1]
            ):
                if m != metric or not pts:
                    continue
                label = " ".join(
                    ([f"rank {r.rank}"] if multi else [])
                    + ([f"GPU {gpu}"] if gpu is not None else [])
                )
                lines.append((label or "process", pts))
        if lines:
            panels.append((metric, lines))

    stage_height = 0.5 + 0.32 * len(rows)
    fig = new_figure(11.0, 1.0 + 1.4 * len(panels) + stage_height)
    axes = fig.subplots(
        len(panels) + 1,
        1,
        sharex=True,
        squeeze=False,
        height_ratios=[1.4] * len(panels) + [stage_height],
    )[:, 0]
    ref = next((r for r in timeline.ranks if r.epochs or r.spans), None)
    for i, (ax, (metric, lines)) in enumerate(zip(axes, panels)):
        _draw_background(ax, ref, label_epochs=i == 0)
        _draw_system_panel(ax, metric, lines)

    ax = axes[-1]
    # Every stage row shows its own rank's setup, evaluation and checkpoints: only epochs
    # behind them.
    _draw_background(ax, ref, label_epochs=not panels, spans=False)
    drawn: set[str] = set()
    for y, rank in enumerate(rows):
        drawn |= _draw_stage_row(ax, rank, float(y), lo, hi)
    ax.set_ylim(len(rows) - 0.5, -0.5)  # rank 0 on top
    ax.set_yticks(range(len(rows)), [f"rank {r.rank}" if multi else "loop" for r in rows])
    ax.tick_params(labelsize=7)
    ax.set_xlim(lo, hi)
    xlabel = "seconds since the run's clock origin"
    if multi:
        xlabel += " (rank 0's; other ranks shifted by their clock difference)"
    ax.set_xlabel(xlabel, fontsize=8)

    from matplotlib.patches import Patch

    legend = [n for n in STAGES if n in drawn] + sorted(n for n in drawn if n not in STAGES)
    fig.legend(
        [Patch(facecolor=stage_color(n)) for n in legend],
        [plot_text(STAGE_LABELS.get(n, n)) for n in legend],
        loc="outside lower center",
        ncols=min(len(legend), 5),
        frameon=False,
        fontsize=8,
    )
    title = f"Timeline: {run_heading(timeline.summary)}"
    if multi:
        title += f", {len(timeline.ranks)} ranks"
        if len(timeline.ranks) > len(rows):
            title += f" (stage rows of the first {len(rows)})"
    fig.suptitle(title, fontsize=11)
    return save_figure(fig, path_png, path_svg)


def timeline_section(record: RunRecord, doc: Document, plots_dir: str | Path) -> list[Path]:
    """Add a "Timeline" section to ``doc``: the figure, or one note saying why there is none.

    Writes ``plots_dir/timeline.png`` and ``timeline.svg``; returns the files written.
    """
    doc.heading("Timeline")
    timeline = load_timeline(record)
    reason = no_timeline_reason(timeline)
    if reason is not None:
        doc.note(reason)
        return []
    plots = Path(plots_dir)
    files = timeline_figure(timeline, plots / "timeline.png", plots / "timeline.svg")
    doc.figure(files[0], "Timeline of the run: system metrics and loop stages over time")
    axis = "The horizontal axis is seconds since the run's clock origin"
    if len(timeline.ranks) > 1:
        axis += (
            " (rank 0's); the other ranks are shifted by the difference of their wall-clock"
            " origins, which across machines is only as good as their clock sync"
        )
    doc.paragraph(
        axis + ". Stage bands start at the host's step start times and run back to back for"
        " the recorded stage durations; in a run timed with CUDA events those durations are"
        " GPU times, so a band shows how long the stage took, placed from the host step"
        " start, not when the GPU ran it. Dashed lines are epoch boundaries; tinted spans"
        " are setup, evaluation and checkpoint writes."
    )
    lo, hi = timeline.bounds()
    if any(_drawn_as_shares(r, lo, hi) for r in timeline.ranks[:MAX_DRAWN_RANKS]):
        doc.paragraph(
            "Steps are shorter than the figure can show one by one: in each column of a stage"
            " row, the height of a colour is the share of that column's time the stage took"
            " (blank is time in no recorded stage)."
        )
    if len(timeline.ranks) > MAX_DRAWN_RANKS:
        doc.note(
            f"Stage rows are drawn for the first {MAX_DRAWN_RANKS} of {len(timeline.ranks)}"
            " ranks; the system panels show every rank."
        )
    for note in timeline.notes:
        doc.note(escape_inline(note))
    return files
