"""CPU threads and cores: how many intra-op threads a run uses, and whether the CPU was
oversubscribed while it ran.

Why it matters: torch's intra-op pool spins and waits on every thread of a parallel op,
so on a CPU that is already busy (other processes, or several ranks of one run each
taking every core) a step can run 10-40x slower, silently. Timings taken like that say
more about thread contention than about the configuration, so a run sets its thread
count explicitly, records it with the cores it could use and the load it shared them
with, and says when the two did not fit.

The rule (also in docs/reliability.md): the CPU is *oversubscribed* when this run's
threads (intra-op threads x processes on the node) plus the other load measured while it
ran exceed the cores it may use, by more than :data:`MARGIN_CORES`. The other load is
the machine's busy CPU time over the run (from /proc/stat, counting only the cores in
this process's affinity) minus the CPU time of the run's own processes (their threads
and DataLoader workers), divided by the wall time: how many cores others kept busy.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

import psutil

from trainscope.config import MAX_THREADS, USER_OMP_ENV
from trainscope.config import available_cpus as usable_cores

MARGIN_CORES = 0.25
"""Slack before a run counts as oversubscribed: the sampler, the launcher and the
system's own daemons keep a little CPU busy on any machine."""


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


def plan_threads(requested: int | str, processes: int, cores: int | None = None) -> ThreadPlan:
    """The thread count for ``requested`` (a number or ``"auto"``) with ``processes`` ranks
    on this node: ``auto`` takes ``OMP_NUM_THREADS`` where the environment sets it (as
    torchrun does for its workers), else the usable cores shared out among the processes
    (at least one each)."""
    cores = usable_cores() if cores is None else cores
    processes = max(1, processes)
    if requested != "auto":
        n = int(requested)
        return ThreadPlan(n, n, f"--threads {n}", cores, processes)
    env = os.environ.get(USER_OMP_ENV, os.environ.get("OMP_NUM_THREADS", "")).strip()
    if env.isdigit() and int(env) > 0:
        n = min(int(env), MAX_THREADS)
        return ThreadPlan(n, "auto", f"auto: OMP_NUM_THREADS={n}", cores, processes)
    n = max(1, cores // processes)
    why = f"auto: {cores} cores / {processes} process{'es' * (processes != 1)}"
    return ThreadPlan(n, "auto", why, cores, processes)


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
    """Readings at the start of a run; :meth:`section` turns them into what it shared the
    CPU with, at the end."""

    def __init__(self, plan: ThreadPlan) -> None:
        self.plan = plan
        self._proc = psutil.Process()
        try:
            self._cores: set[int] | None = set(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            self._cores = None
        try:
            self.load_before: list[float] | None = [round(x, 2) for x in os.getloadavg()]
        except OSError:
            self.load_before = None
        self._t0 = time.perf_counter()
        self._busy0 = _busy_seconds(self._cores)
        self._own0 = _own_seconds(self._proc)
        self._psi0 = _pressure_us()

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
            "measured_s": wall,
            "busy_cores": (busy - self._busy0) / wall
            if busy is not None and self._busy0 is not None
            else None,
            "own_cores": (_own_seconds(self._proc) - self._own0) / wall,
            "cpu_pressure_share": min(1.0, (psi - self._psi0) / 1e6 / wall)
            if psi is not None and self._psi0 is not None
            else None,
        }
        return verdict(out, [out["own_cores"]])


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
