"""Background sampler of system metrics: process CPU %, RSS, and per-GPU figures via NVML.

It runs in a daemon thread and writes one JSON line per sample to ``system.jsonl``. The
sampler holds the GIL only for a few microseconds per sample; at the default 1 s interval
its cost on the training loop is negligible (the loop benchmark includes it).
"""

from __future__ import annotations

import os
import resource
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

from trainscope.records.jsonio import dumps


def _nvml_handles() -> tuple[Any, list[Any]]:
    """(pynvml module, device handles), or (None, []) where NVML is not usable."""
    try:
        import pynvml  # from the nvidia-ml-py package (the "gpu" extra)

        pynvml.nvmlInit()
        count = pynvml.nvmlDeviceGetCount()
        return pynvml, [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
    except Exception:  # not installed, no driver, no GPU: all mean "no GPU metrics"
        return None, []


def peak_rss_bytes() -> int:
    """Peak resident set size of this process so far (the kernel's own high-water mark)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # Linux reports KiB, macOS bytes.
    return int(peak if sys.platform == "darwin" else peak * 1024)


# Runs this process has started before the current one: a study may run many in one
# process, and then the process's start-up and peak memory are not one run's own.
_runs_started = 0


def clock_origin(t_start: float) -> dict[str, float]:
    """The wall-clock time of the run's origin: every ``t`` in its record counts from it
    (a monotonic clock), and this one reading puts them on the calendar, and ranks of one
    run on one axis."""
    return {"unix_at_origin": time.time() - (time.perf_counter() - t_start)}


def process_start(t_start: float) -> dict[str, Any]:
    """How long this process lived before the run began (interpreter start-up, imports,
    and any earlier runs of a study sharing the process), and how many runs came before."""
    global _runs_started
    runs_before, _runs_started = _runs_started, _runs_started + 1
    age = _process_age_s()
    if age is not None:
        startup = max(0.0, age - (time.perf_counter() - t_start))
    else:
        origin = clock_origin(t_start)["unix_at_origin"]
        startup = max(0.0, origin - psutil.Process().create_time())
    return {"startup_s": startup, "runs_before": runs_before}


def _process_age_s() -> float | None:
    """Seconds since this process started, to the kernel's clock tick (Linux), or None.

    Not psutil's ``create_time()``: on Linux it adds the process's start (ticks since
    boot) to the boot time, which /proc/stat gives in whole seconds, so it can be off by
    up to a second. Here both readings count from boot."""
    try:
        with open("/proc/self/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        ticks = int(fields[19])  # starttime: field 22, counted after "pid (comm)"
        return time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        return None


class SystemSampler:
    """Samples every ``interval_s`` seconds until :meth:`stop`; use as a context manager."""

    def __init__(
        self,
        path: Path,
        interval_s: float = 1.0,
        gpus: bool = True,
        on_sample: Callable[[dict[str, Any]], None] | None = None,
        origin: float | None = None,
        probe: Callable[[], dict[str, Any]] | None = None,
    ) -> None:
        self.path = Path(path)
        # Extra figures for each sample (the CPU meter's other load since the last one).
        self._probe = probe
        # The run's clock origin (a perf_counter reading): each sample also carries
        # "mono", seconds since it, the axis the step records use.
        self.origin = origin
        self._on_sample = on_sample
        self.interval_s = interval_s
        self._want_gpus = gpus
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._proc = psutil.Process()
        self._nvml: Any = None
        self._handles: list[Any] = []
        self.samples: list[dict[str, Any]] = []

    def sample(self) -> dict[str, Any]:
        """Take one sample now."""
        rec: dict[str, Any] = {"t": time.time()}
        if self.origin is not None:
            rec["mono"] = round(time.perf_counter() - self.origin, 6)
        rec |= {
            "cpu_percent": self._proc.cpu_percent(None),
            "rss_bytes": self._proc.memory_info().rss,
            "system_memory_percent": psutil.virtual_memory().percent,
        }
        if self._probe is not None:
            rec |= self._probe()
        if self._handles:
            gpus = []
            for i, h in enumerate(self._handles):
                try:
                    util = self._nvml.nvmlDeviceGetUtilizationRates(h)
                    mem = self._nvml.nvmlDeviceGetMemoryInfo(h)
                    power_mw = self._nvml.nvmlDeviceGetPowerUsage(h)
                    gpus.append(
                        {
                            "index": i,
                            "util_percent": util.gpu,
                            "memory_used_bytes": mem.used,
                            "memory_total_bytes": mem.total,
                            "power_w": power_mw / 1000.0,
                        }
                    )
                except Exception as e:  # one failing query must not kill the sampler
                    gpus.append({"index": i, "error": str(e)})
            rec["gpus"] = gpus
        return rec

    def _run(self, out: Any) -> None:
        while not self._stop.wait(self.interval_s):
            rec = self.sample()
            self.samples.append(rec)
            out.write(dumps(rec) + "\n")
            out.flush()
            if self._on_sample is not None:
                self._on_sample(rec)  # e.g. Sinks.log_system, which never raises

    def start(self) -> SystemSampler:
        """Start the background thread."""
        if self._want_gpus:
            self._nvml, self._handles = _nvml_handles()
        self._proc.cpu_percent(None)  # the first call only primes the counter
        out = open(self.path, "a")
        self._thread = threading.Thread(
            target=self._guarded, args=(out,), name="trainscope-system", daemon=True
        )
        self._thread.start()
        return self

    def _guarded(self, out: Any) -> None:
        try:
            self._run(out)
        finally:
            out.close()

    def stop(self) -> None:
        """Stop sampling and wait for the thread (returns within one sample's time)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        if self._nvml is not None:
            try:
                self._nvml.nvmlShutdown()
            except Exception:
                pass
            self._nvml = None

    def __enter__(self) -> SystemSampler:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def summary(self) -> dict[str, Any]:
        """Aggregates of what was sampled (means and maxima)."""
        s = self.samples
        out: dict[str, Any] = {"samples": len(s), "interval_s": self.interval_s}
        if s:
            out["cpu_percent_mean"] = sum(r["cpu_percent"] for r in s) / len(s)
            out["rss_max_bytes"] = max(r["rss_bytes"] for r in s)
            gpu_rows = [g for r in s for g in r.get("gpus", []) if "util_percent" in g]
            if gpu_rows:
                out["gpu_util_percent_mean"] = sum(g["util_percent"] for g in gpu_rows) / len(
                    gpu_rows
                )
                out["gpu_memory_used_max_bytes"] = max(g["memory_used_bytes"] for g in gpu_rows)
                out["gpu_power_w_mean"] = sum(g["power_w"] for g in gpu_rows) / len(gpu_rows)
        return out
