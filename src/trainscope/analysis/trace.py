"""A run's timeline as a Chrome Trace Event Format file, for Perfetto or chrome://tracing.

Built from the same per-rank records as the timeline figure (:func:`load_timeline`), on
the same axis: one process per rank ("rank R"), one thread per loop stage plus threads for
epochs, whole steps, setup/evaluation and checkpoint writes, complete events
(``ph: "X"``) with ``ts`` and ``dur`` in microseconds, and counter events (``ph: "C"``)
for the system samples.

The file is strict JSON (written through ``trainscope.records.jsonio``): no NaN, and text
from the record (workload and model names) goes in as JSON string values only.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from trainscope.analysis.timeline import (
    CHUNK_KINDS,
    SCHEDULED_STAGES,
    RankTimeline,
    Timeline,
    load_timeline,
    no_timeline_reason,
)
from trainscope.records.jsonio import atomic_write_text, dumps, finite
from trainscope.records.run_dir import STAGES, RunRecord

# What the trace is called next to a report (the lead decides where it is written).
TRACE_FILE = "trace.json"

# One process per rank: pid = rank, as the record numbers them. (Perfetto's maintainers
# advise against pid 0 in synthetic traces, google/perfetto#394: it is the kernel's idle
# process there, and the UI's process summary treats it specially.)
#
# Thread ids within a rank: fixed ones first, then one per stage, so a stage has the same
# local id in every process and trace (Perfetto and chrome://tracing order threads by
# thread_sort_index, set to it). The tid in the file is rank * TID_STRIDE + local id:
# Perfetto keys thread names by tid alone (tids are unique system-wide on Linux), and
# tid 0 is its idle "swapper" thread, so no tid is 0 or repeated across ranks.
TID_STRIDE = 1000
TID_SYSTEM = 1
TID_EPOCHS = 2
TID_STEPS = 3
TID_OUTSIDE = 4  # setup and evaluation: outside the step loop
TID_CHECKPOINTS = 5  # checkpoint writes: between steps, or after an epoch's validation
_TID_FIRST_STAGE = 10
_FIXED_THREADS = {
    TID_SYSTEM: "system samples",
    TID_EPOCHS: "epochs",
    TID_STEPS: "steps",
    TID_OUTSIDE: "setup + evaluation",
    TID_CHECKPOINTS: "checkpoints",
}

# Counter events per system metric: (name, unit, factor from the record's unit). Perfetto
# names a counter track "<name> <arg key>", so the one arg is keyed by the unit.
_COUNTERS = {
    "cpu_percent": ("CPU", "%", 1.0),
    "rss_bytes": ("RSS", "MiB", 1.0 / 2**20),
    "util_percent": ("util", "%", 1.0),
    "memory_used_bytes": ("memory", "MiB", 1.0 / 2**20),
    "power_w": ("power", "W", 1.0),
}


def thread_id(rank: int, local: int) -> int:
    """The tid in the trace of local thread ``local`` (TID_* or a stage's) of ``rank``."""
    return rank * TID_STRIDE + local


def _us(seconds: float) -> float:
    # Microseconds, to the nanosecond: enough for any stage, and keeps the file compact.
    return round(seconds * 1e6, 3)


class _Tracks:
    """Stage thread ids, the same for every rank; unknown stage names get the next ids."""

    def __init__(self) -> None:
        order = [s for s in STAGES if s not in ("setup", "evaluation", "other")]
        self.tids = {name: _TID_FIRST_STAGE + i for i, name in enumerate(order)}

    def tid(self, stage: str) -> int:
        if stage not in self.tids:
            # Record stage names beyond the known ones: rare, and bounded by the stride.
            self.tids[stage] = min(_TID_FIRST_STAGE + len(self.tids), TID_STRIDE - 1)
        return self.tids[stage]

    def name(self, local: int) -> str:
        if local in _FIXED_THREADS:
            return _FIXED_THREADS[local]
        return "/".join(name for name, t in self.tids.items() if t == local)


def _clip_overlaps(events: list[dict[str, Any]]) -> int:
    """End each complete event no later than the next on its track starts; count those cut.

    Stage durations timed with CUDA events are GPU times placed from host step starts, so
    one can run past the next step's start. Perfetto needs the slices of a thread nested,
    so such an event is cut there, and its measured duration kept in ``args``.
    """
    by_track: dict[tuple[int, int], list[dict[str, Any]]] = {}
    for ev in events:
        by_track.setdefault((ev["pid"], ev["tid"]), []).append(ev)
    clipped = 0
    for track in by_track.values():
        track.sort(key=lambda ev: ev["ts"])
        for ev, nxt in zip(track, track[1:]):
            room = round(nxt["ts"] - ev["ts"], 3)
            if ev["dur"] > room:
                ev["args"]["measured_dur_us"] = ev["dur"]
                ev["dur"] = room
                clipped += 1
    return clipped


def _present(**args: Any) -> dict[str, Any]:
    return {k: v for k, v in args.items() if v is not None}


class _Events:
    """The trace's events as they are gathered rank by rank, on one axis from ``lo``."""

    def __init__(self, lo: float) -> None:
        self.lo = lo
        self.tracks = _Tracks()
        self.spans: list[dict[str, Any]] = []
        self.counters: list[dict[str, Any]] = []
        self.used: dict[int, set[int]] = {}  # pid -> local thread ids with events

    def complete(
        self,
        pid: int,
        local: int,
        name: str,
        cat: str,
        start: float,
        dur: float,
        args: dict[str, Any],
    ) -> None:
        """A complete event (``ph: "X"``) on thread ``local`` of rank ``pid``."""
        self.spans.append(
            {
                "ph": "X",
                "name": name,
                "cat": cat,
                "pid": pid,
                "tid": thread_id(pid, local),
                "ts": _us(start - self.lo),
                "dur": max(0.0, _us(dur)),
                "args": args,
            }
        )

    def add_rank(self, rank: RankTimeline) -> None:
        """The rank's epochs, setup/evaluation/checkpoint spans, steps and their stages."""
        pid = rank.rank
        locals_used = self.used.setdefault(pid, set())
        if rank.epochs:
            locals_used.add(TID_EPOCHS)
        for e in rank.epochs:
            name = f"epoch {e.epoch}" if e.epoch is not None else "epoch"
            args = _present(epoch=e.epoch)
            self.complete(pid, TID_EPOCHS, name, "epoch", e.start, e.end - e.start, args)
        for sp in rank.spans:
            local = TID_CHECKPOINTS if sp.name == "checkpoint" else TID_OUTSIDE
            locals_used.add(local)
            args = _present(epoch=sp.epoch, step=sp.step)
            self.complete(pid, local, sp.name, sp.name, sp.start, sp.duration, args)
        if rank.steps:
            locals_used.add(TID_STEPS)
        for s in rank.steps:
            args = _present(step=s.step, epoch=s.epoch, loss=s.loss, batch_size=s.batch_size)
            self.complete(pid, TID_STEPS, "step", "step", s.t, s.duration, args)
            t = s.t
            for stage, d in s.stages:
                # A pipeline's forward, backward and wait interleave: its microbatches
                # are drawn where they ran instead (their stage is in each event's args).
                if not (s.chunks and stage in SCHEDULED_STAGES):
                    local = self.tracks.tid(stage)
                    locals_used.add(local)
                    stage_args = {} if s.step is None else {"step": s.step}
                    self.complete(pid, local, stage, "stage", t, d, stage_args)
                t += d
            self.add_chunks(pid, s)
        self.add_counters(rank)

    def add_chunks(self, pid: int, s: Any) -> None:
        """A pipeline step's microbatches, each on its kind's track (forward, backward,
        loss) at the time it ran: the bubble is the gaps."""
        for c in s.chunks:
            kind = CHUNK_KINDS[c.kind]
            local = self.tracks.tid(f"{kind} (microbatches)")
            self.used[pid].add(local)
            mb = c.microbatch if c.microbatch >= 0 else None  # a loss's is not recorded
            args = _present(step=s.step, microbatch=mb, stage=c.stage)
            name = f"{c.kind}{'' if mb is None else mb} s{c.stage}"
            self.complete(pid, local, name, "microbatch", c.start, c.end - c.start, args)

    def add_counters(self, rank: RankTimeline) -> None:
        """A counter event (``ph: "C"``) per system sample of the rank."""
        pid = rank.rank
        for (metric, gpu), points in rank.system.items():
            label, unit, factor = _COUNTERS[metric]
            name = label if gpu is None else f"GPU {gpu} {label}"
            self.used[pid].add(TID_SYSTEM)
            for x, v in points:
                self.counters.append(
                    {
                        "ph": "C",
                        "name": name,
                        "pid": pid,
                        "tid": thread_id(pid, TID_SYSTEM),
                        "ts": _us(x - self.lo),
                        "args": {unit: v * factor},
                    }
                )

    def metadata(self) -> list[dict[str, Any]]:
        """Names and sort order of every process and thread that has events."""
        meta: list[dict[str, Any]] = []
        for pid in sorted(self.used):
            # Every event names a thread, metadata too: the process's go on its system
            # thread, which is therefore named even when the rank recorded no samples.
            base = {"ph": "M", "pid": pid, "tid": thread_id(pid, TID_SYSTEM), "ts": 0}
            meta.append({**base, "name": "process_name", "args": {"name": f"rank {pid}"}})
            meta.append({**base, "name": "process_sort_index", "args": {"sort_index": pid}})
            for local in sorted(self.used[pid] | {TID_SYSTEM}):
                base = {"ph": "M", "pid": pid, "tid": thread_id(pid, local), "ts": 0}
                name = self.tracks.name(local)
                meta.append({**base, "name": "thread_name", "args": {"name": name}})
                meta.append({**base, "name": "thread_sort_index", "args": {"sort_index": local}})
        return meta


def chrome_trace(run: RunRecord | Timeline | str | os.PathLike[str]) -> dict[str, Any]:
    """The run's timeline as a Chrome Trace Event Format object (``traceEvents`` etc.).

    ``ts`` 0 is the run's clock origin (rank 0's), or the earliest event when something
    came before it; ``metadata["trainscope"]["ts0_unix"]`` is that instant's wall-clock
    time when recorded. Other ranks are shifted by their clock difference to rank 0 (as
    good as the machines' clock sync). Without step start times there are no step events,
    and ``metadata["trainscope"]["notes"]`` says why.
    """
    timeline = run if isinstance(run, Timeline) else load_timeline(run)
    lo = min(0.0, timeline.bounds()[0])  # ts must not be negative
    events = _Events(lo)
    for rank in timeline.ranks:
        events.add_rank(rank)
    clipped = _clip_overlaps(events.spans)
    return {
        "traceEvents": events.metadata() + events.spans + events.counters,
        "displayTimeUnit": "ms",
        "metadata": {"trainscope": _trace_info(timeline, lo, clipped)},
    }


def _trace_info(timeline: Timeline, lo: float, clipped: int) -> dict[str, Any]:
    """The trace's ``metadata["trainscope"]``: the run, its axis, and notes on what is
    missing or was cut."""
    summary = timeline.summary
    notes = list(timeline.notes)
    if (reason := no_timeline_reason(timeline)) is not None:
        notes.insert(0, reason.replace("`", ""))
    if clipped:
        notes.append(
            f"{clipped} event(s) ran past the next one on their track (GPU-timed stages"
            " placed from host step starts) and were cut there; args.measured_dur_us keeps"
            " the measured duration"
        )
    info = {
        "run": timeline.path.name,
        "workload": summary.get("workload"),
        "model": summary.get("model"),
        "device": summary.get("device"),
        "timing_mode": summary.get("timing_mode"),
        "world_size": summary.get("world_size") or len(timeline.ranks),
        "ts0_unix": None if timeline.origin_unix is None else timeline.origin_unix + lo,
        "axis": "microseconds since the run's clock origin (rank 0's); other ranks shifted"
        " by the difference of their wall-clock origins",
        "notes": notes,
    }
    # Only JSON scalars from the record (anything else is shown as its text), finite.
    return finite(
        {
            k: v if k == "notes" or v is None or isinstance(v, (str, int, float)) else str(v)
            for k, v in info.items()
        }
    )


def write_chrome_trace(
    record: RunRecord | Timeline | str | os.PathLike[str], path: str | os.PathLike[str]
) -> Path:
    """Write :func:`chrome_trace` of the run to ``path`` (strict JSON, atomically)."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    trace = chrome_trace(record)
    try:
        # Every number is finite by construction: strict json.dumps refuses NaN without
        # jsonio's walk over every value (seconds for a long run's events).
        text = json.dumps(trace, allow_nan=False, separators=(",", ":"))
    except ValueError:  # a time so large it overflowed: jsonio writes it as null
        text = dumps(trace, separators=(",", ":"))
    atomic_write_text(out, text + "\n")
    return out
