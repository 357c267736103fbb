"""CPU threads and cores: how many intra-op threads a run uses, and whether the CPU was
oversubscribed while it ran.

Why it matters: torch's intra-op pool spins and waits on every thread of a parallel op,
so on a CPU that is already busy (other processes, or several ranks of one run each
taking every core) a step can run 10-40x slower, silently. Timings taken like that say
more about thread contention than about the configuration, so a run sets its thread
count explicitly, records it with the cores it could use and the load it shared them
with, and says when the two did not fit.

``--threads auto`` (the default) therefore counts the cores other processes keep busy
before the run starts, over a window that costs nothing: from the moment the command
started (:func:`note_entry`, before torch is imported) to the thread plan, less this
process's own CPU time over it. The threads are what fits on the cores left free (at
least one). A launcher that starts several ranks measures once, before they start, and
passes the figure on (:data:`OTHER_LOAD_ENV`): ranks starting side by side would
otherwise count each other as load.

The rule (also in docs/reliability.md): the CPU is *oversubscribed* when this run's
threads (intra-op threads x processes on the node) plus the other load measured while it
ran exceed the cores it may use, by more than :data:`MARGIN_CORES`. The other load is
the machine's busy CPU time over the run (from /proc/stat, counting only the cores in
this process's affinity) minus the CPU time of the run's own processes (their threads
and DataLoader workers), divided by the wall time: how many cores others kept busy.
The same figure, per sample of the system sampler, says whether the load changed while
the run ran (:data:`trainscope.util.load.LOAD_STEP_CORES`).
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from typing import Any

import psutil

from trainscope.config import MAX_THREADS, USER_OMP_ENV
from trainscope.config import available_cpus as usable_cores
from trainscope.util.load import LOAD_STEP_CORES, MARGIN_CORES, ignore_load, loaded_limit

OTHER_LOAD_ENV = "TRAINSCOPE_OTHER_LOAD"
"""Set by trainscope's launcher for its ranks: ``"<cores>,<window s>"``, the other load
it measured just before starting them."""

MIN_WINDOW_S = 0.1
"""The shortest window the other load is read over; a shorter one (a run started from
Python right after import) waits the rest. /proc/stat counts in 10 ms ticks per core."""


@dataclass(frozen=True)
class OtherLoad:
    """Cores other processes kept busy over a window just before the run."""

    cores: float
    window_s: float


@dataclass(frozen=True)
class ThreadPlan:
    """How many intra-op threads each process of a run uses, and why."""

    threads: int
    requested: int | str
    """What was asked for: a number, or ``"auto"``."""
    source: str
    """In words: ``--threads 2``, ``auto: OMP_NUM_THREADS=1``, ``auto: 2 cores / 1 process``."""
    cores: int
    processes: int
    """Processes of the run on this node (ranks; DataLoader workers not counted)."""
    other_at_start: OtherLoad | None = None
    """The other load the plan was made for (``auto`` only; None: not measured)."""


def _fixed(requested: int | str, processes: int, cores: int) -> ThreadPlan | None:
    """The plan where nothing needs measuring: a number asked for, or under ``auto`` the
    OMP_NUM_THREADS the user set; else None."""
    if requested != "auto":
        n = int(requested)
        return ThreadPlan(n, n, f"--threads {n}", cores, processes)
    env = os.environ.get(USER_OMP_ENV, os.environ.get("OMP_NUM_THREADS", "")).strip()
    if env.isdigit() and int(env) > 0:
        n = min(int(env), MAX_THREADS)
        return ThreadPlan(n, "auto", f"auto: OMP_NUM_THREADS={n}", cores, processes)
    return None


def plan_threads(
    requested: int | str,
    processes: int,
    cores: int | None = None,
    other: OtherLoad | None = None,
) -> ThreadPlan:
    """The thread count for ``requested`` (a number or ``"auto"``) with ``processes`` ranks
    on this node: ``auto`` takes ``OMP_NUM_THREADS`` where the user set it, else what fits
    on the cores ``other`` load left free, shared out among the processes (at least one
    each; without ``other``, every usable core)."""
    cores = usable_cores() if cores is None else cores
    processes = max(1, processes)
    if (fixed := _fixed(requested, processes, cores)) is not None:
        return fixed
    share = f"{processes} process{'es' * (processes != 1)}"
    n = max(1, cores // processes)
    if other is None:
        return ThreadPlan(n, "auto", f"auto: {cores} cores / {share}", cores, processes)
    # What fits: threads x processes + other load <= cores + the margin (the rule below).
    fits = math.floor((cores + MARGIN_CORES - other.cores) / processes + 1e-9)
    n = max(1, min(n, fits))
    busy = f"{other.cores:.1f} kept busy by other processes" if other.cores >= 0.05 else "none busy"
    why = f"auto: {cores} cores, {busy} (over {other.window_s:.2f} s at start) / {share}"
    return ThreadPlan(n, "auto", why, cores, processes, other)


def plan_run_threads(requested: int | str, processes: int) -> ThreadPlan:
    """:func:`plan_threads` for a run about to start: the other load is measured only where
    ``auto`` will use it."""
    cores, processes = usable_cores(), max(1, processes)
    fixed = _fixed(requested, processes, cores)
    return fixed or plan_threads(requested, processes, cores, other_load_at_start(processes))


@dataclass(frozen=True)
class LoadReading:
    """The CPU counters a window of other load starts or ends with."""

    t: float
    busy: float | None
    """CPU-seconds the process's cores spent busy since boot (None: unreadable)."""
    own: float
    """CPU-seconds of the run's own processes (see :func:`_own_seconds`)."""

    @classmethod
    def take(cls, tree: psutil.Process, cores: set[int] | None) -> LoadReading:
        """The counters now, for the process tree ``tree`` on ``cores``."""
        return cls(time.perf_counter(), _busy_seconds(cores), _own_seconds(tree))

    def other_since(self, start: LoadReading) -> float | None:
        """Cores kept busy by processes outside the tree between ``start`` and this one."""
        wall = self.t - start.t
        if self.busy is None or start.busy is None or wall <= 0:
            return None
        return max(0.0, (self.busy - start.busy - (self.own - start.own)) / wall)


def _affinity() -> set[int] | None:
    try:
        return set(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None


_entry: LoadReading | None = None
# The command's first reading (note_entry): the other load up to the first thread plan is
# read over the imports that come before it, for free. Taken by the first run only.


def note_entry() -> None:
    """Take the reading the first run's other-load window starts from (the CLI calls this
    before it imports torch)."""
    global _entry
    _entry = LoadReading.take(psutil.Process(), _affinity())


def other_load_at_start(processes: int) -> OtherLoad | None:
    """The other load on this process's cores just before a run: from the launcher
    (:data:`OTHER_LOAD_ENV`), else over the window since :func:`note_entry` (or a short
    one of :data:`MIN_WINDOW_S` now). None for ranks of a launch that did not measure
    (their neighbours starting up would read as load)."""
    given = os.environ.get(OTHER_LOAD_ENV, "")
    if given:
        try:
            cores_s, window_s = (float(x) for x in given.split(","))
            return OtherLoad(max(0.0, cores_s), max(0.0, window_s))
        except ValueError:
            return None
    if processes > 1:
        return None
    global _entry
    proc, cores = psutil.Process(), _affinity()
    start, _entry = _entry, None
    if start is None or time.perf_counter() - start.t < MIN_WINDOW_S:
        start = start or LoadReading.take(proc, cores)
        time.sleep(max(0.0, MIN_WINDOW_S - (time.perf_counter() - start.t)))
    end = LoadReading.take(proc, cores)
    other = end.other_since(start)
    return None if other is None else OtherLoad(other, end.t - start.t)


def quiet_or_waited(max_wait_s: float, window_s: float = 1.0) -> OtherLoad | None:
    """Wait, up to ``max_wait_s``, for the other load on this process's cores to drop
    below what makes a measurement no evidence (:func:`trainscope.util.load.loaded_limit`);
    the last reading if it never did, else None. Each reading is over ``window_s``."""
    proc, cores = psutil.Process(), _affinity()
    deadline = time.perf_counter() + max_wait_s
    while True:
        start = LoadReading.take(proc, cores)
        time.sleep(window_s)
        other = LoadReading.take(proc, cores).other_since(start)
        if other is None or other < loaded_limit() or ignore_load():
            return None
        if time.perf_counter() >= deadline:
            return OtherLoad(other, window_s)


def launch_env_load() -> dict[str, str]:
    """The launcher's reading for its ranks (:data:`OTHER_LOAD_ENV`), or {} without one."""
    load = other_load_at_start(1)
    return {} if load is None else {OTHER_LOAD_ENV: f"{load.cores:.3f},{load.window_s:.3f}"}


def apply_threads(plan: ThreadPlan) -> None:
    """Set torch's intra-op threads to the plan's (inter-op threads are left as torch
    starts them: they can be set only before the first parallel op)."""
    import torch

    torch.set_num_threads(plan.threads)


def _busy_seconds(cores: set[int] | None) -> float | None:
    """CPU-seconds the machine has spent busy since boot on ``cores`` (None: all)."""
    try:
        rows = psutil.cpu_times(percpu=True)
    except (OSError, RuntimeError):
        return None
    if cores:
        rows = [r for i, r in enumerate(rows) if i in cores] or rows
    total = 0.0
    for r in rows:
        idle = r.idle + getattr(r, "iowait", 0.0)
        # guest time is counted inside user time on Linux: do not count it twice.
        guest = getattr(r, "guest", 0.0) + getattr(r, "guest_nice", 0.0)
        total += sum(r) - idle - guest
    return total


def _own_seconds(proc: psutil.Process) -> float:
    """CPU-seconds of this process, its reaped children and its live ones (workers)."""
    t = proc.cpu_times()
    total = t.user + t.system + t.children_user + t.children_system
    for child in proc.children(recursive=True):
        try:
            c = child.cpu_times()
            total += c.user + c.system
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return total


def _pressure_us() -> float | None:
    """Microseconds some task has waited for a CPU (Linux pressure stall info), or None."""
    try:
        with open("/proc/pressure/cpu") as f:
            first = f.readline().split()
        return float(dict(kv.split("=") for kv in first[1:])["total"])
    except (OSError, ValueError, KeyError):
        return None


class CpuMeter:
    """Readings at the start of a run; :meth:`tick` (each system sample) reads the other
    load since the last one, and :meth:`section` turns them into what the run shared the
    CPU with, at the end."""

    def __init__(self, plan: ThreadPlan) -> None:
        self.plan = plan
        self._proc = psutil.Process()
        self._cores = _affinity()
        try:
            self.load_before: list[float] | None = [round(x, 2) for x in os.getloadavg()]
        except OSError:
            self.load_before = None
        self._t0 = time.perf_counter()
        self._busy0 = _busy_seconds(self._cores)
        self._own0 = _own_seconds(self._proc)
        self._psi0 = _pressure_us()
        self._tree = self._node_tree()
        self._last = LoadReading.take(self._tree, self._cores)
        self.samples: list[float] = []
        """The other load over each interval between ticks (cores)."""

    def _node_tree(self) -> psutil.Process:
        """The processes whose CPU a per-sample reading counts as the run's own: this one's
        tree, or with several ranks on the node their launcher's (torchrun's agent, or
        slurmstepd), which holds every local rank and its workers."""
        if self.plan.processes > 1:
            try:
                parent = self._proc.parent()
                if parent is not None:
                    return parent
            except psutil.Error:
                pass
        return self._proc

    def tick(self) -> dict[str, float]:
        """The other load since the last tick, for a system sample (``{}`` unreadable)."""
        try:
            now = LoadReading.take(self._tree, self._cores)
        except psutil.Error:
            return {}
        other, self._last = now.other_since(self._last), now
        if other is None:
            return {}
        self.samples.append(other)
        return {"other_cores": round(other, 3)}

    def plan_note(self) -> str | None:
        """A warning before the run starts when its own threads exceed the cores."""
        p = self.plan
        if p.threads * p.processes <= p.cores:
            return None
        return oversubscription_note(
            {"threads": p.threads, "processes_on_node": p.processes, "cores": p.cores}
        )

    def section(self, workers: int = 0) -> dict[str, Any]:
        """This process's figures so far: threads, cores, busy and own CPU, the other
        load and whether the CPU was oversubscribed (for one process; :func:`combine`
        redoes the verdict for several ranks on one node)."""
        import torch

        wall = max(time.perf_counter() - self._t0, 1e-9)
        busy = _busy_seconds(self._cores)
        psi = _pressure_us()
        start = self.plan.other_at_start
        out: dict[str, Any] = {
            "threads": self.plan.threads,
            "threads_requested": self.plan.requested,
            "threads_source": self.plan.source,
            "interop_threads": torch.get_num_interop_threads(),
            "cores": self.plan.cores,
            "cpu_count": os.cpu_count(),
            "processes_on_node": self.plan.processes,
            "dataloader_workers": workers,
            "load_average_before": self.load_before,
            "other_cores_at_start": None if start is None else round(start.cores, 3),
            "measured_s": wall,
            "busy_cores": (busy - self._busy0) / wall
            if busy is not None and self._busy0 is not None
            else None,
            "own_cores": (_own_seconds(self._proc) - self._own0) / wall,
            "cpu_pressure_share": min(1.0, (psi - self._psi0) / 1e6 / wall)
            if psi is not None and self._psi0 is not None
            else None,
            "other_cores_sampled": _range(self.samples),
        }
        return verdict(out, [out["own_cores"]])


def _range(xs: list[float]) -> dict[str, Any] | None:
    """min, max and count of the per-sample other load, or None without samples."""
    if not xs:
        return None
    return {"min": round(min(xs), 3), "max": round(max(xs), 3), "n": len(xs)}


def load_change_note(section: dict[str, Any]) -> str | None:
    """One sentence when the other load changed while the run ran (between its samples,
    or from what its threads were chosen for), else None."""
    sampled = section.get("other_cores_sampled") or {}
    at_start, mean = section.get("other_cores_at_start"), section.get("other_cores")
    lo, hi = sampled.get("min"), sampled.get("max")
    moved = (
        isinstance(lo, float | int) and isinstance(hi, float | int) and hi - lo >= LOAD_STEP_CORES
    )
    drifted = (
        isinstance(at_start, float | int)
        and isinstance(mean, float | int)
        and abs(mean - at_start) >= LOAD_STEP_CORES
    )
    if not (moved or drifted):
        return None
    seen = (
        f"from {lo:.1f} to {hi:.1f} cores busy (per-sample readings)"
        if moved
        else f"{mean:.1f} cores busy on average"
    )
    start = f"; its threads were chosen for {at_start:.1f} at start" if drifted else ""
    return f"other load changed during the run: other processes kept {seen}{start}"


def verdict(section: dict[str, Any], own_cores: list[float]) -> dict[str, Any]:
    """``section`` with the other load (busy cores minus the run's own processes') and the
    oversubscription verdict for ``own_cores`` (one entry per process of the run on this
    node) filled in."""
    out = dict(section)
    busy = out.get("busy_cores")
    other = max(0.0, busy - sum(own_cores)) if busy is not None else None
    demand = out["threads"] * out["processes_on_node"]
    out["other_cores"] = other
    out["run_cores"] = sum(own_cores)  # CPU the run's processes on this node kept busy
    out["demand_cores"] = demand
    over = demand + (other or 0.0) > out["cores"] + MARGIN_CORES
    out["oversubscribed"] = over
    out["note"] = oversubscription_note(out) if over else None
    out["load_change"] = load_change_note(out)
    return out


def oversubscription_note(section: dict[str, Any]) -> str:
    """One sentence: what did not fit on the cores, and what that means for the timings."""
    procs = section["processes_on_node"]
    parts = f"{section['threads']} thread{'s' * (section['threads'] != 1)}"
    parts += f" x {procs} process{'es' * (procs != 1)}"
    other = section.get("other_cores")
    if other is not None and other >= MARGIN_CORES:
        parts += f" + {other:.1f} cores kept busy by other processes"
    return (
        f"CPU oversubscribed: {parts} on {section['cores']} "
        f"core{'s' * (section['cores'] != 1)}; step times are inflated by thread "
        "contention and not comparable with runs that had the cores to themselves "
        "(set --threads, or free the cores)"
    )


def combine(sections: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Rank 0's section for a run of several ranks on one node: the verdict counts every
    rank's own CPU as the run's (not as other load). ``sections`` are the node's ranks'."""
    sections = [s for s in sections if isinstance(s, dict) and "threads" in s]
    if not sections:
        return None
    own = [s.get("own_cores") or 0.0 for s in sections]
    return verdict(sections[0], own)
