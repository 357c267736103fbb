"""``--num-workers auto``: choose DataLoader workers by measuring the real input pipeline.

Each candidate worker count builds the run's own training loader and times what an epoch
costs with it: creating the iterator (worker start-up) plus a steady-state rate over a
few batches, extrapolated to the epoch's length. The whole search is bounded in time,
and its result is cached per machine and workload so later runs pay nothing.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import platform
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import Dataset

from trainscope.config import DataConfig, max_workers, show
from trainscope.data.loaders import make_loader
from trainscope.records.run_dir import atomic_write_json

CACHE_FILE = "num_workers_auto.json"
CACHE_VERSION = 1


def default_candidates(cpu_count: int | None = None, limit: int = 16) -> list[int]:
    """0, then powers of two up to the CPU count, plus the CPU count itself."""
    n = min(cpu_count or os.cpu_count() or 1, limit)
    out = [0]
    w = 1
    while w <= n:
        out.append(w)
        w *= 2
    if out[-1] != n:
        out.append(n)
    return out


@dataclass
class Trial:
    """One candidate's measurement."""

    num_workers: int
    startup_s: float
    """Creating the iterator and waiting for the first batch."""
    per_batch_s: float
    """Steady-state seconds per batch after the first."""
    batches: int
    """Batches timed (first included)."""
    epoch_estimate_s: float
    """startup + (batches per epoch - 1) * per_batch."""


@dataclass
class AutoWorkers:
    """What ``--num-workers auto`` tried and chose."""

    chosen: int
    trials: list[Trial] = field(default_factory=list)
    cached: bool = False
    seconds: float = 0.0
    """Time spent measuring (0 when the cached choice was used)."""
    key: str = ""

    def to_dict(self) -> dict[str, Any]:
        """Plain data for summary.json and metrics.jsonl."""
        return asdict(self)

    def describe(self) -> str:
        """One line for the console: what was tried and what was chosen."""
        tried = ", ".join(f"{t.num_workers}: {t.epoch_estimate_s:.3g} s" for t in self.trials)
        how = "cached choice" if self.cached else f"measured in {self.seconds:.1f} s"
        return f"num_workers auto -> {self.chosen} ({how}; est. s/epoch {tried})"


def cache_key(dataset: Dataset, cfg: DataConfig, device: torch.device, workload: str) -> str:
    """Machine + workload + every knob that changes the answer, as a short stable hash."""
    sample = dataset[0][0]
    parts = {
        "host": platform.node(),
        "cpus": os.cpu_count(),
        "torch": torch.__version__,
        "device": device.type,
        "workload": workload,
        "dataset": type(dataset).__name__,
        "samples": len(dataset),
        "shape": list(getattr(sample, "shape", [])),
        "batch_size": cfg.batch_size,
        "pin_memory": cfg.pin_memory,
        "persistent_workers": cfg.persistent_workers,
        "prefetch_factor": cfg.prefetch_factor,
    }
    text = json.dumps(parts, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def measure(
    dataset: Dataset,
    cfg: DataConfig,
    device: torch.device,
    num_workers: int,
    max_batches: int,
    time_limit_s: float,
) -> Trial:
    """Time one worker count: iterator start-up + first batch, then up to ``max_batches``."""
    loader = make_loader(dataset, cfg, train=True, device=device, num_workers=num_workers)
    n_epoch = len(loader)
    if n_epoch == 0:  # drop_last with fewer samples than a batch: nothing to load
        return Trial(num_workers, 0.0, 0.0, 0, 0.0)
    t0 = time.perf_counter()
    it = iter(loader)
    x, _ = next(it)
    x.to(device)
    t_first = time.perf_counter()
    count = 1
    limit = min(max_batches, n_epoch)
    while count < limit and time.perf_counter() - t0 < time_limit_s:
        x, _ = next(it)
        x.to(device)
        count += 1
    t_end = time.perf_counter()
    del it  # stop the workers before the next candidate starts its own
    startup = t_first - t0
    per_batch = (t_end - t_first) / (count - 1) if count > 1 else startup
    return Trial(
        num_workers=num_workers,
        startup_s=startup,
        per_batch_s=per_batch,
        batches=count,
        epoch_estimate_s=startup + (n_epoch - 1) * per_batch,
    )


MAX_CACHE_BYTES = 1 << 20
"""A cache file holds a few hundred bytes per workload; a bigger one is not read."""


def _load_cache(path: Path) -> dict[str, Any]:
    try:
        if path.stat().st_size > MAX_CACHE_BYTES:
            return {}  # not ours, or damaged: measuring again costs seconds, reading it more
        data = json.loads(path.read_text())
        valid = data.get("version") == CACHE_VERSION and isinstance(data.get("entries"), dict)
        return data if valid else {}
    except (OSError, ValueError, AttributeError, RecursionError):
        return {}  # a missing or damaged cache only means measuring again


def _is_count(value: Any, limit: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= limit


def _is_seconds(value: Any) -> bool:
    # Finite and >= 0; float() cannot overflow here because huge ints are refused first.
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and abs(value) < 1e300
        and math.isfinite(value)
        and value >= 0
    )


def entry_problem(entry: Any) -> str | None:
    """Why a cache entry cannot be trusted, or None when it can.

    The file is the user's to edit (or damage): every field is checked, and a choice is
    only taken when it is a worker count this machine allows (:func:`max_workers`) and one
    of the candidates the entry says were measured.
    """
    if not isinstance(entry, dict):
        return "the entry is not a mapping"
    limit = max_workers()
    chosen = entry.get("chosen")
    if not _is_count(chosen, limit):
        return f"chosen {show(chosen)} is not a worker count in 0..{limit}"
    trials = entry.get("trials")
    if not isinstance(trials, list) or not 0 < len(trials) <= limit + 1:
        return "its trials are not a list of measurements"
    names = {f.name for f in fields(Trial)}
    for t in trials:
        if not isinstance(t, dict) or set(t) != names:
            return "a trial does not hold the fields of a measurement"
        if not _is_count(t["num_workers"], limit) or not _is_count(t["batches"], 2**62):
            return "a trial holds a count that is not a count"
        if not all(_is_seconds(t[k]) for k in ("startup_s", "per_batch_s", "epoch_estimate_s")):
            return "a trial holds a time that is not a finite number of seconds"
    if chosen not in {t["num_workers"] for t in trials}:
        return f"chosen {chosen} is not among the worker counts it measured"
    return None


def _cached(entry: Any, key: str) -> AutoWorkers | None:
    """A cache entry as a result, or None when it is missing or damaged (measure again)."""
    if entry is None or entry_problem(entry) is not None:
        return None
    trials = [Trial(**t) for t in entry["trials"]]
    return AutoWorkers(chosen=entry["chosen"], trials=trials, cached=True, key=key)


def _search(
    dataset: Dataset,
    cfg: DataConfig,
    device: torch.device,
    cands: list[int],
    budget_s: float,
    max_batches: int,
    log: Callable[[str], None] | None,
) -> tuple[list[Trial], float]:
    """Try candidates in order within the budget; stop once they get clearly slower."""
    t_start = time.perf_counter()
    trials: list[Trial] = []
    for i, n in enumerate(cands):
        left = budget_s - (time.perf_counter() - t_start)
        if trials and left <= 0:
            break
        per_trial = max(left / (len(cands) - i), 0.05)
        trial = measure(dataset, cfg, device, n, max_batches, per_trial)
        trials.append(trial)
        if log:
            log(
                f"num_workers auto: {n} workers -> start-up {trial.startup_s:.3f} s, "
                f"{trial.per_batch_s * 1e3:.2f} ms/batch, est. {trial.epoch_estimate_s:.3f} s/epoch"
            )
        best = min(t.epoch_estimate_s for t in trials)
        if trial.epoch_estimate_s > 1.5 * best:
            break
    return trials, time.perf_counter() - t_start


def choose_num_workers(
    dataset: Dataset,
    cfg: DataConfig,
    device: torch.device,
    *,
    workload: str,
    cache_dir: Path | None,
    candidates: list[int] | None = None,
    budget_s: float = 10.0,
    max_batches: int = 50,
    log: Callable[[str], None] | None = None,
) -> AutoWorkers:
    """Pick the worker count with the lowest estimated epoch time.

    Candidates are tried in increasing order; the search stops when the time budget is
    spent or a candidate is clearly (1.5x) slower than the best so far, since beyond that
    point more workers only add start-up cost on this machine. The choice is cached in
    ``cache_dir`` under a key of machine, workload and loader knobs.
    """
    # Reading a sample and measuring draw from the global RNG when the data set augments:
    # fork it, so a run with auto trains exactly like one given the chosen count.
    with torch.random.fork_rng(devices=[]):
        key = cache_key(dataset, cfg, device, workload)
        path = Path(cache_dir) / CACHE_FILE if cache_dir is not None else None
        cache = _load_cache(path) if path is not None else {}
        entry = cache.get("entries", {}).get(key)
        hit = _cached(entry, key)
        if hit is not None:
            if log:
                log(hit.describe())
            return hit
        if entry is not None and log:
            why = entry_problem(entry)
            log(f"num_workers auto: ignoring the cached choice in {path} ({why}); measuring again")
        cands = candidates if candidates is not None else default_candidates()
        trials, seconds = _search(dataset, cfg, device, cands, budget_s, max_batches, log)
    chosen = min(trials, key=lambda t: t.epoch_estimate_s).num_workers
    result = AutoWorkers(chosen=chosen, trials=trials, seconds=seconds, key=key)
    if path is not None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            entries = cache.get("entries", {})
            entries[key] = {
                "chosen": chosen,
                "trials": [asdict(t) for t in trials],
                "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                "workload": workload,
            }
            atomic_write_json(path, {"version": CACHE_VERSION, "entries": entries})
        except OSError:
            pass  # an unwritable cache costs a re-measurement next time, nothing more
    if log:
        log(result.describe())
    return result
