"""``--num-workers auto``: choose DataLoader workers by measuring the real input pipeline.

Each candidate worker count builds the run's own training loader and times what an epoch
costs with it: creating the iterator and waiting for the first batch (worker start-up),
then every later batch one by one. A trial runs until it has at least
:data:`MIN_BATCHES` batches *and* :data:`MIN_TRIAL_S` seconds of them (more batches, up to
``max_batches``, when its share of the time budget allows), so one slow spell on a shared
machine cannot pass for the pipeline's speed.

A candidate's figure is the **median** seconds per batch with its spread (IQR when
n >= 5, else min–max) and n, the rule of :mod:`trainscope.util.spread`; its epoch estimate is
start-up + median x the epoch's other batches, with an interval built the same way from
the spread's low and high ends. The fastest candidate is chosen only when its interval
overlaps no other's; when some overlap ("within noise") the fewest workers among them
win, since a worker process costs memory and start-up time and buys nothing measurable.
A trial the budget cut short is reported as such and never chosen over a complete one.

The whole search is bounded in time, and its result is cached per machine and workload
so later runs pay nothing.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import platform
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, NamedTuple

import torch
from torch.utils.data import Dataset

from trainscope.config import DataConfig, max_workers, show
from trainscope.data.loaders import make_loader
from trainscope.records.run_dir import atomic_write_json
from trainscope.util.numfmt import fmt_sig
from trainscope.util.spread import Spread, differ, spread

CACHE_FILE = "num_workers_auto.json"
CACHE_VERSION = 2
"""2: trials hold a median per batch with its spread, n and completeness (1 held a mean)."""

MIN_BATCHES = 10
"""Batches a trial must time one by one, after start-up, to count as measured: four
batches on a loaded machine once gave "est. 114 s/epoch" and decided the choice."""

MIN_TRIAL_S = 0.5
"""Seconds of batches a trial times at least (when its budget allows): fast batches are
otherwise over before the machine's noise has shown in them."""

MIN_SHARE_S = 0.05
"""The least time a trial is given, even when the budget is spent (the first always runs)."""

SLOWER = 1.5
"""The search stops at a candidate whose whole interval is this much above the best's."""

SPREAD_KINDS = ("IQR", "min–max", "single", "none")

clock: Callable[[], float] = time.perf_counter
"""The timer of every measurement here; a module attribute so tests can plant timings."""


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
    """One candidate's measurement: a median per batch with its spread, and what it implies."""

    num_workers: int
    startup_s: float
    """Creating the iterator and waiting for the first batch (worker start-up included)."""
    per_batch_s: float
    """Median seconds per batch over the batches timed one by one after the first (the
    first batch itself, start-up included, when none was)."""
    per_batch_low_s: float
    """Low end of the per-batch spread (25th percentile for n >= 5, else the minimum)."""
    per_batch_high_s: float
    """High end of the per-batch spread (75th percentile for n >= 5, else the maximum)."""
    spread: str
    """Which spread: ``"IQR"``, ``"min–max"``, ``"single"`` or ``"none"`` (n = 0)."""
    n: int
    """Batches timed one by one after start-up: the n of the median."""
    outliers: int
    """Of those, batches more than 3 scaled MADs from the median (kept; the median barely
    moves for them)."""
    measured_s: float
    """Seconds the n batches took together."""
    epoch_batches: int
    """Batches in one epoch of this loader."""
    epoch_estimate_s: float
    """startup + median per batch x (epoch batches - 1): the first batch is in the start-up."""
    epoch_low_s: float
    """The estimate with the low end of the per-batch spread."""
    epoch_high_s: float
    """The estimate with the high end of the per-batch spread."""
    min_batches: int
    """Batches this trial needed to count as measured (fewer when the epoch has fewer)."""
    complete: bool
    """False when the time budget ran out before ``min_batches`` were timed."""

    def epoch_spread(self) -> Spread:
        """The epoch estimate as a :class:`Spread`, to compare candidates by the rule."""
        return Spread(
            self.epoch_estimate_s, self.epoch_low_s, self.epoch_high_s, self.n, self.spread
        )

    def estimate_text(self, unit: str = "s") -> str:
        """``"5.31 s (IQR 5.2–5.5, n=48)"``: the epoch estimate with its spread and n."""
        if self.spread in ("single", "none"):
            return f"{fmt_sig(self.epoch_estimate_s)} {unit} (n={self.n}, no spread)"
        lo, hi = self.epoch_low_s, self.epoch_high_s
        spread = f"{self.spread} {fmt_sig(lo)}–{fmt_sig(hi)}, n={self.n}"
        return f"{fmt_sig(self.epoch_estimate_s)} {unit} ({spread})"

    def describe(self) -> str:
        """The measurement in one line: start-up, per batch, epoch estimate, and a short trial."""
        ms = 1e3
        per = f"{fmt_sig(self.per_batch_s * ms)} ms/batch"
        if self.spread in ("single", "none"):
            per += f" (n={self.n})"
        else:
            lo, hi = self.per_batch_low_s * ms, self.per_batch_high_s * ms
            extra = f", {self.outliers} outlier(s)" if self.outliers else ""
            per += f" ({self.spread} {fmt_sig(lo)}–{fmt_sig(hi)}, n={self.n}{extra})"
        text = f"start-up {fmt_sig(self.startup_s)} s, {per}, est. {self.estimate_text('s/epoch')}"
        if not self.complete:
            text += (
                f"; cut short: {self.n} of {self.min_batches} batches before its share of "
                "the budget ran out"
            )
        return text


def summarise(
    num_workers: int,
    startup_s: float,
    batch_times: Sequence[float],
    epoch_batches: int,
    min_batches: int = MIN_BATCHES,
) -> Trial:
    """A :class:`Trial` from raw timings: start-up, then each later batch's seconds.

    The estimate uses the median, not the mean: one batch slowed 100x by another process
    on the machine moves a mean (and an epoch extrapolated from it) far; the median not.
    With no batch timed after the first, the first (start-up included) stands in for one,
    an upper bound, and the trial is short unless the epoch has no other batch.
    """
    sp = spread(batch_times)
    if sp.median is None or sp.low is None or sp.high is None:
        med = lo = hi = startup_s
    else:
        med, lo, hi = sp.median, sp.low, sp.high
    rest = max(epoch_batches - 1, 0)
    needed = max(0, min(min_batches, rest))
    return Trial(
        num_workers=num_workers,
        startup_s=startup_s,
        per_batch_s=med,
        per_batch_low_s=lo,
        per_batch_high_s=hi,
        spread=sp.kind,
        n=sp.n,
        outliers=len(sp.outliers),
        measured_s=float(sum(batch_times)),
        epoch_batches=epoch_batches,
        epoch_estimate_s=startup_s + med * rest,
        epoch_low_s=startup_s + lo * rest,
        epoch_high_s=startup_s + hi * rest,
        min_batches=needed,
        complete=sp.n >= needed,
    )


class Choice(NamedTuple):
    """What :func:`decide` chose among trials, and why."""

    chosen: int
    fastest: int
    """The count with the lowest estimate among the trials that could be chosen."""
    within_noise: list[int]
    """Counts whose estimate cannot be told from the fastest's (the fastest included);
    one element means a clear winner."""
    reason: str


def decide(trials: Sequence[Trial]) -> Choice:
    """Choose among measured trials by the rule of :mod:`trainscope.util.spread`.

    Only complete trials are eligible when there is one (a short trial's figure rests on
    too few batches). The fastest is chosen when its epoch interval overlaps no other
    eligible candidate's; otherwise the fewest workers among those that overlap it.
    """
    if not trials:
        raise ValueError("no trials to choose from")
    complete = [t for t in trials if t.complete]
    pool = complete or list(trials)
    short = sorted(t.num_workers for t in trials if not t.complete)
    ranked = sorted(pool, key=lambda t: (t.epoch_estimate_s, t.num_workers))
    best = ranked[0]
    # "Cannot be told apart": an interval overlapping the best's, or n < 2 (no spread).
    tied = [t for t in ranked if t is best or not differ(t.epoch_spread(), best.epoch_spread())]
    chosen = min(tied, key=lambda t: t.num_workers)
    if len(pool) == 1:
        kind = "fully measured " if complete and short else ""
        reason = f"{best.num_workers} workers is the only {kind}candidate"
    elif len(tied) == 1:
        reason = (
            f"fastest: {best.num_workers} workers, its interval clear of every other "
            f"(next best: {ranked[1].num_workers} workers)"
        )
    else:
        names = ", ".join(str(t) for t in sorted(t.num_workers for t in tied))
        reason = (
            f"within noise: {names} workers cannot be told from the fastest "
            f"({best.num_workers}); chose the fewest ({chosen.num_workers}), as fewer "
            "processes cost less memory"
        )
    if not complete:
        reason = f"no candidate timed its minimum of batches within the budget; {reason}"
    elif short:
        names = ", ".join(map(str, short))
        reason += (
            f"; {names} workers cut short by the budget (too few batches), "
            "not chosen over a complete trial"
        )
    return Choice(
        chosen=chosen.num_workers,
        fastest=best.num_workers,
        within_noise=sorted(t.num_workers for t in tied),
        reason=reason,
    )


@dataclass
class AutoWorkers:
    """What ``--num-workers auto`` tried and chose."""

    chosen: int
    trials: list[Trial] = field(default_factory=list)
    cached: bool = False
    seconds: float = 0.0
    """Time spent measuring (0 when the cached choice was used)."""
    key: str = ""
    fastest: int | None = None
    """The count with the lowest estimate (None when nothing was measured)."""
    within_noise: list[int] = field(default_factory=list)
    """Counts within noise of the fastest, the fastest included (see :class:`Choice`)."""
    reason: str = ""
    """Why ``chosen`` was chosen, in a sentence."""

    @classmethod
    def from_trials(cls, trials: list[Trial], **kwargs: Any) -> AutoWorkers:
        """The result :func:`decide` gives for ``trials``."""
        choice = decide(trials)
        return cls(
            chosen=choice.chosen,
            trials=trials,
            fastest=choice.fastest,
            within_noise=choice.within_noise,
            reason=choice.reason,
            **kwargs,
        )

    def to_dict(self) -> dict[str, Any]:
        """Plain data for summary.json and metrics.jsonl."""
        return asdict(self)

    def describe(self) -> str:
        """One line for the console: what was tried, what was chosen and why."""
        tried = ", ".join(
            f"{t.num_workers}: {t.estimate_text()}" + ("" if t.complete else " cut short")
            for t in self.trials
        )
        how = "cached choice" if self.cached else f"measured in {self.seconds:.1f} s"
        why = f"; {self.reason}" if self.reason else ""
        return f"num_workers auto -> {self.chosen} ({how}{why}; est. s/epoch {tried})"


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
    *,
    min_batches: int = MIN_BATCHES,
    min_time_s: float = MIN_TRIAL_S,
) -> Trial:
    """Time one worker count: start-up (iterator + first batch), then batch by batch.

    Batches are timed until there are ``max(max_batches, min_batches)`` of them and
    ``min_time_s`` seconds of them, the epoch runs out, or ``time_limit_s`` (counted
    from the start, start-up included) is spent; a trial stopped by the limit before
    ``min_batches`` is marked incomplete.
    """
    loader = make_loader(dataset, cfg, train=True, device=device, num_workers=num_workers)
    n_epoch = len(loader)
    if n_epoch == 0:  # drop_last with fewer samples than a batch: nothing to load
        return summarise(num_workers, 0.0, [], 0, min_batches)
    want = max(max_batches, min_batches)
    t0 = clock()
    it = iter(loader)
    x, _ = next(it)
    x.to(device)
    t_prev = t_first = clock()
    times: list[float] = []
    while len(times) < n_epoch - 1:
        if len(times) >= want and t_prev - t_first >= min_time_s:
            break
        if t_prev - t0 >= time_limit_s:
            break
        x, _ = next(it)
        x.to(device)
        t = clock()
        times.append(t - t_prev)
        t_prev = t
    del it  # stop the workers before the next candidate starts its own
    return summarise(num_workers, t_first - t0, times, n_epoch, min_batches)


MAX_CACHE_BYTES = 1 << 20
"""A cache file holds a few kilobytes per workload; a bigger one is not read."""


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


_COUNTS = ("n", "outliers", "epoch_batches", "min_batches")
_SECONDS = (
    "startup_s",
    "per_batch_s",
    "per_batch_low_s",
    "per_batch_high_s",
    "measured_s",
    "epoch_estimate_s",
    "epoch_low_s",
    "epoch_high_s",
)


def _trial_problem(t: Any, limit: int, names: set[str]) -> str | None:
    if not isinstance(t, dict) or set(t) != names:
        return "a trial does not hold the fields of a measurement"
    if not _is_count(t["num_workers"], limit) or not all(_is_count(t[k], 2**62) for k in _COUNTS):
        return "a trial holds a count that is not a count"
    if not all(_is_seconds(t[k]) for k in _SECONDS):
        return "a trial holds a time that is not a finite number of seconds"
    if not isinstance(t["complete"], bool) or t["spread"] not in SPREAD_KINDS:
        return "a trial's completeness or spread kind is not one of its values"
    ordered = (
        t["per_batch_low_s"] <= t["per_batch_s"] <= t["per_batch_high_s"]
        and t["epoch_low_s"] <= t["epoch_estimate_s"] <= t["epoch_high_s"]
    )
    return None if ordered else "a trial's spread is not low <= median <= high"


def entry_problem(entry: Any) -> str | None:
    """Why a cache entry cannot be trusted, or None when it can.

    The file is the user's to edit (or damage): every field is checked, and a choice is
    only taken when it is a worker count this machine allows (:func:`max_workers`), one
    of the candidates the entry says were measured, and the one :func:`decide` makes
    from those measurements.
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
        if (why := _trial_problem(t, limit, names)) is not None:
            return why
    if chosen not in {t["num_workers"] for t in trials}:
        return f"chosen {chosen} is not among the worker counts it measured"
    want = decide([Trial(**t) for t in trials]).chosen
    if chosen != want:
        return f"chosen {chosen} is not what its measurements give ({want})"
    return None


def _cached(entry: Any, key: str) -> AutoWorkers | None:
    """A cache entry as a result, or None when it is missing or damaged (measure again)."""
    if entry is None or entry_problem(entry) is not None:
        return None
    trials = [Trial(**t) for t in entry["trials"]]
    # The reason is derived again rather than read: the file is not trusted to hold text.
    return AutoWorkers.from_trials(trials, cached=True, key=key)


def _clearly_slower(trial: Trial, trials: list[Trial]) -> bool:
    """True when ``trial`` is complete and its whole interval lies 1.5x above the best's."""
    done = [t for t in trials if t.complete]
    if not trial.complete or not done:
        return False
    best = min(done, key=lambda t: t.epoch_estimate_s)
    return trial.epoch_low_s > SLOWER * best.epoch_high_s


def _search(
    dataset: Dataset,
    cfg: DataConfig,
    device: torch.device,
    cands: list[int],
    budget_s: float,
    max_batches: int,
    log: Callable[[str], None] | None,
    *,
    min_batches: int = MIN_BATCHES,
    min_time_s: float = MIN_TRIAL_S,
) -> tuple[list[Trial], float]:
    """Try candidates in order within the budget; stop once they get clearly slower.

    The budget left is shared equally among the candidates still to try, so a slow early
    candidate cannot starve the later ones (which would then be short and never chosen).
    """
    t_start = clock()
    trials: list[Trial] = []
    for i, n in enumerate(cands):
        left = budget_s - (clock() - t_start)
        if trials and left <= 0:
            break
        per_trial = max(left / (len(cands) - i), MIN_SHARE_S)
        trial = measure(
            dataset,
            cfg,
            device,
            n,
            max_batches,
            per_trial,
            min_batches=min_batches,
            min_time_s=min_time_s,
        )
        trials.append(trial)
        if log:
            log(f"num_workers auto: {n} workers -> {trial.describe()}")
        if _clearly_slower(trial, trials):
            break
    return trials, clock() - t_start


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
    min_batches: int = MIN_BATCHES,
    min_time_s: float = MIN_TRIAL_S,
    log: Callable[[str], None] | None = None,
) -> AutoWorkers:
    """Pick a worker count from measured epoch estimates (see :func:`decide`).

    Candidates are tried in increasing order; the search stops when the time budget is
    spent or a candidate is clearly (1.5x, spreads included) slower than the best so far,
    since beyond that point more workers only add start-up cost on this machine. The
    choice is cached in ``cache_dir`` under a key of machine, workload and loader knobs.
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
        trials, seconds = _search(
            dataset,
            cfg,
            device,
            cands,
            budget_s,
            max_batches,
            log,
            min_batches=min_batches,
            min_time_s=min_time_s,
        )
    result = AutoWorkers.from_trials(trials, seconds=seconds, key=key)
    if path is not None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            entries = cache.get("entries", {})
            entries[key] = {
                "chosen": result.chosen,
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
