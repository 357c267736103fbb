"""Checks of trainscope's own measurements on one CUDA GPU, in one command (<= 9 minutes).

Five sections, each printed as a Markdown table (and written to ``--json PATH``):

(a) stage times: trainscope's CUDA-event stage timer against ``torch.profiler`` kernel
    time, for the same profiled steps. Kernels (and copies, memsets) are attributed to a
    stage by a ``torch.profiler.record_function`` range per stage, opened and closed at
    the timer's own marks; a kernel belongs to the range that was open on the host when
    its launch call ran (runtime call and kernel matched by their correlation id). Goal:
    forward, backward and optimizer within 5%.
(b) instrumentation overhead: trainscope's timed step loop (``train_epoch`` with the stage
    timer and step records written as a run writes them) against a bare loop on the same
    model, precision and batch stream; alternating blocks, median of the pairwise ratios.
    Goal: <= 2%.
(c) precision: fp32, tf32, fp16, bf16 on gpt-char through ``trainscope.train.run.run``,
    alternating; steady-state time per step and peak CUDA memory
    (``torch.cuda.max_memory_allocated``, reset before each run).
(d) gpt-char tokens/s and MFU, from the same runs (steady state).
(e) LeNet5 images/s at the largest batch that fits: a doubling search up to a cap that
    stops at the first out-of-memory error, then repeated timing at the size found.

Every figure is a median with its spread and n (``trainscope.spread``: IQR for n >= 5,
min-max below); warm-up steps are excluded everywhere and each section says how many.

    python benchmarks/gpu_check.py --json gpu_check.json
    python benchmarks/gpu_check.py --device cpu --quick     # the whole logic on CPU, tiny

Without CUDA (and without ``--device cpu``) it prints one line and exits 0.
"""

from __future__ import annotations

import argparse
import bisect
import gc
import json
import os
import platform
import random
import re
import shlex
import string
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainscope.spread import Spread, differ, spread

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
NO_CUDA = "no CUDA device: nothing to check"
STAGE_RANGE = "trainscope.stage#"
"""Prefix of the record_function ranges that mark the stages in the profile."""
STAGE_GOAL_PCT = 5.0
OVERHEAD_GOAL_PCT = 2.0
GOAL_STAGES = ("forward", "backward", "optimizer")
PRECISIONS = ("fp32", "tf32", "fp16", "bf16")
DEVICE_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
LAUNCH_CATS = ("cuda_runtime", "cuda_driver")
OUTSIDE = "outside the stage ranges"

# =========================================================================== pure logic
# Small functions with no torch in them: the comparisons, the A/B alternation, the
# summaries and the batch search. Tested on CPU with planted numbers.


def spread_dict(s: Spread) -> dict[str, Any]:
    """A spread as plain JSON data."""
    return {"median": s.median, "low": s.low, "high": s.high, "n": s.n, "kind": s.kind}


def fmt_spread(s: Spread, scale: float = 1.0, unit: str = "", digits: int = 2) -> str:
    """``"12.34 ms (IQR 12.10-12.60, n=7)"``; ``"n/a"`` without values."""
    if s.median is None or s.low is None or s.high is None:
        return "n/a"
    med = f"{s.median * scale:.{digits}f}{unit}"
    if s.n == 1:
        return f"{med} (n=1, no spread)"
    return f"{med} ({s.kind} {s.low * scale:.{digits}f}-{s.high * scale:.{digits}f}, n={s.n})"


def pct_diff(measured: float | None, reference: float | None) -> float | None:
    """(measured - reference) / reference in percent; None when reference is 0 or missing."""
    if measured is None or reference is None or reference == 0:
        return None
    return (measured - reference) / reference * 100.0


def within_goal(pct: float | None, goal_pct: float) -> bool:
    """True when |pct| <= goal_pct (a missing figure is never within goal)."""
    return pct is not None and abs(pct) <= goal_pct + 1e-9


def compare_stages(
    event_s: dict[str, Sequence[float]],
    kernel_s: dict[str, Sequence[float]],
    goal_pct: float = STAGE_GOAL_PCT,
    goal_stages: Iterable[str] = GOAL_STAGES,
) -> list[dict[str, Any]]:
    """One row per stage: the timer's total against the profiler's total over the same
    steps, the difference in percent, its per-step spread, and the verdict for the stages
    the goal covers (``within_goal`` is None for the others)."""
    goal_stages = tuple(goal_stages)
    rows = []
    for stage, events in event_s.items():
        kernels = list(kernel_s.get(stage, ()))
        ev_total, k_total = sum(events), sum(kernels)
        diff = pct_diff(ev_total, k_total)
        per_step = spread(pct_diff(e, k) for e, k in zip(events, kernels))
        rows.append(
            {
                "stage": stage,
                "event_total_s": ev_total,
                "profiler_total_s": k_total,
                "event_step_s": spread_dict(spread(events)),
                "profiler_step_s": spread_dict(spread(kernels)),
                "diff_pct": diff,
                "diff_pct_per_step": spread_dict(per_step),
                "within_goal": within_goal(diff, goal_pct) if stage in goal_stages else None,
            }
        )
    return rows


def rotations(kinds: Sequence[str], rounds: int) -> list[tuple[str, ...]]:
    """The order of each round: the kinds rotated by one more place each round (AB, BA,
    AB, ...; ABC, BCA, CAB, ...), so each kind runs equally often in each position and a
    drifting machine favours none."""
    k = list(kinds)
    return [tuple(k[r % len(k) :] + k[: r % len(k)]) for r in range(rounds)] if k else []


def ab_summary(
    base: Sequence[float], test: Sequence[float], goal_pct: float = OVERHEAD_GOAL_PCT
) -> dict[str, Any]:
    """Overhead of ``test`` over ``base`` from paired, alternating repeats (seconds).

    The headline is the median of the pairwise ratios test/base (a pair ran back to back,
    so slow spells of the machine cancel); the verdict says whether it is within the goal
    and whether the two spreads overlap ("within noise") under trainscope's claim rule.
    """
    b, t = spread(base), spread(test)
    ratios = spread(x / y for y, x in zip(base, test) if y > 0)
    overhead = (ratios.median - 1.0) * 100.0 if ratios.median is not None else None
    of_medians = pct_diff(t.median, b.median)
    noise = "within noise" if not differ(b, t) else "measurable"
    ok = within_goal(max(overhead, 0.0) if overhead is not None else None, goal_pct)
    verdict = (
        f"overhead {overhead:+.2f}% (median of {ratios.n} pairwise ratios): "
        f"{'within' if ok else 'outside'} the {goal_pct:g}% goal; {noise}"
        if overhead is not None
        else "no pairs measured"
    )
    return {
        "base_s": spread_dict(b),
        "test_s": spread_dict(t),
        "ratio": spread_dict(ratios),
        "overhead_pct": overhead,
        "overhead_pct_of_medians": of_medians,
        "goal_pct": goal_pct,
        "within_goal": ok,
        "noise": noise,
        "verdict": verdict,
    }


def batch_sizes(start: int, cap: int) -> list[int]:
    """start, 2 start, 4 start, ... up to ``cap``, and ``cap`` itself when the doubling
    steps over it; never a size above ``cap``."""
    if start < 1 or cap < start:
        return []
    out = []
    b = start
    while b <= cap:
        out.append(b)
        b *= 2
    if out[-1] != cap:
        out.append(cap)
    return out


def is_oom(exc: BaseException) -> bool:
    """An out-of-memory error: torch.cuda.OutOfMemoryError, or a RuntimeError that says so
    (the CPU allocator, cuDNN and cuBLAS word it their own way)."""
    if type(exc).__name__ == "OutOfMemoryError":
        return True
    text = str(exc).lower()
    return isinstance(exc, (RuntimeError, MemoryError)) and (
        "out of memory" in text
        or "can't allocate memory" in text
        or "alloc_failed" in text
        or isinstance(exc, MemoryError)
    )


@dataclass
class SearchResult:
    """What the batch-size search found."""

    best: int | None
    """Largest batch that ran (None when even the first failed)."""
    best_result: Any
    """What the trial returned at ``best``."""
    tried: list[dict[str, Any]]
    """Each size tried, in order: {"batch", "outcome": ok|oom|error, "result"|"error"}."""
    stopped: str
    """Why it stopped: "oom", "error" or "cap"."""
    cap: int


def bounded_batch_search(
    trial: Callable[[int], Any],
    start: int,
    cap: int,
    *,
    oom: Callable[[BaseException], bool] = is_oom,
    after_failure: Callable[[], None] | None = None,
) -> SearchResult:
    """Try ``trial(batch)`` at doubling sizes up to ``cap``; stop at the first failure.

    An out-of-memory error ends the search (the size does not fit); any other error ends
    it too, recorded as such, since a larger size is then not worth trying. At most
    len(batch_sizes(start, cap)) trials, none above ``cap``. ``after_failure`` runs after
    a failed trial (free what it left, e.g. the CUDA cache).
    """
    best, best_result, tried, stopped = None, None, [], "cap"
    for b in batch_sizes(start, cap):
        try:
            result = trial(b)
        except Exception as e:  # noqa: BLE001 - every failure ends the search, named
            kind = "oom" if oom(e) else "error"
            tried.append({"batch": b, "outcome": kind, "error": f"{type(e).__name__}: {e}"[:300]})
            stopped = kind
            break
        tried.append({"batch": b, "outcome": "ok", "result": result})
        best, best_result = b, result
    if stopped != "cap" and after_failure is not None:
        # Outside the except clause: the exception (and the frames holding the failed
        # trial's tensors) is gone by now, so their memory can really be freed.
        after_failure()
    return SearchResult(best, best_result, tried, stopped, cap)


def stage_windows(events: Iterable[dict[str, Any]]) -> list[tuple[int, int, float, float]]:
    """(step, position, start, end) of every stage range in a Chrome trace, in time order.

    Ranges are named ``STAGE_RANGE + position``; a step begins at each position-0 range.
    Times are the trace's microseconds.
    """
    found = []
    for e in events:
        name = e.get("name", "")
        if e.get("ph") == "X" and e.get("cat") == "user_annotation" and isinstance(name, str):
            if name.startswith(STAGE_RANGE):
                k = int(name[len(STAGE_RANGE) :])
                found.append((float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0.0)), k))
    found.sort()
    out, step = [], -1
    for start, end, k in found:
        if k == 0:
            step += 1
        if step >= 0:
            out.append((step, k, start, end))
    return out


def device_points(events: Sequence[dict[str, Any]]) -> list[tuple[float | None, float]]:
    """(launch time, duration) of every kernel, copy and memset in a Chrome trace.

    The launch time is that of the runtime (or driver) call with the same correlation id;
    None where no launch was recorded.
    """
    launches: dict[Any, float] = {}
    for e in events:
        args = e.get("args") or {}
        if e.get("cat") in LAUNCH_CATS and "correlation" in args:
            launches[args["correlation"]] = float(e["ts"])
    out: list[tuple[float | None, float]] = []
    for e in events:
        if e.get("ph") == "X" and e.get("cat") in DEVICE_CATS:
            corr = (e.get("args") or {}).get("correlation")
            out.append((launches.get(corr), float(e.get("dur", 0.0))))
    return out


def host_points(events: Sequence[dict[str, Any]]) -> list[tuple[float | None, float]]:
    """(start, duration) of every top-level CPU op of a Chrome trace (per thread: ops not
    inside another op), the CPU stand-in for kernels."""
    by_thread: dict[Any, list[tuple[float, float]]] = {}
    for e in events:
        if e.get("ph") == "X" and e.get("cat") == "cpu_op":
            by_thread.setdefault((e.get("pid"), e.get("tid")), []).append(
                (float(e["ts"]), float(e.get("dur", 0.0)))
            )
    out: list[tuple[float | None, float]] = []
    for ops in by_thread.values():
        end = float("-inf")
        for ts, dur in sorted(ops, key=lambda o: (o[0], -o[1])):
            if ts >= end:
                out.append((ts, dur))
                end = ts + dur
    return out


def attribute(
    points: Iterable[tuple[float | None, float]],
    windows: Sequence[tuple[int, int, float, float]],
) -> tuple[dict[tuple[int, int], float], float, int]:
    """Sum each point's duration into the (step, position) window containing its time.

    Returns (sums per window, duration outside every window, count outside). Windows do
    not overlap (a step's stages follow one another).
    """
    ordered = sorted(windows, key=lambda w: w[2])
    starts = [w[2] for w in ordered]
    sums: dict[tuple[int, int], float] = {(w[0], w[1]): 0.0 for w in ordered}
    outside, n_outside = 0.0, 0
    for t, dur in points:
        i = bisect.bisect_right(starts, t) - 1 if t is not None else -1
        if i >= 0 and t is not None and t < ordered[i][3]:
            sums[(ordered[i][0], ordered[i][1])] += dur
        else:
            outside += dur
            n_outside += 1
    return sums, outside, n_outside


def per_stage(
    sums: dict[tuple[int, int], float], names: dict[int, str], steps: range
) -> dict[str, list[float]]:
    """Window sums (microseconds) -> stage -> seconds per step, for the given steps."""
    return {name: [sums.get((s, k), 0.0) / 1e6 for s in steps] for k, name in sorted(names.items())}


# =========================================================================== measurement

SIZES = {
    # Full sizes for one GPU: the whole check in a few minutes.
    "full": {
        "preset": "shakespeare",
        "batch_size": 64,
        "profile_warmup": 10,
        "profile_skip": 2,
        "profile_steps": 20,
        "block": 20,
        "rounds": 10,
        "precision_rounds": 3,
        "run_steps": 50,
        "run_warmup": 5,
        "eval_windows": 128,
        "lenet_start": 256,
        "lenet_cap": 1 << 20,
        "lenet_repeats": 5,
        "lenet_steps": 20,
    },
    # --quick: the same logic with tiny sizes (a CPU test).
    "quick": {
        "preset": "tiny",
        "batch_size": 8,
        "profile_warmup": 2,
        "profile_skip": 1,
        "profile_steps": 4,
        "block": 4,
        "rounds": 3,
        "precision_rounds": 2,
        "run_steps": 8,
        "run_warmup": 2,
        "eval_windows": 16,
        "lenet_start": 8,
        "lenet_cap": 32,
        "lenet_repeats": 3,
        "lenet_steps": 3,
    },
}


def find_corpus(data_dir: str | None, tmp: Path) -> tuple[Path, str]:
    """Tiny Shakespeare's input.txt where it is found; else a generated corpus (speed does
    not depend on the text), and a note saying which."""
    if data_dir:
        return Path(data_dir), f"corpus: {data_dir}"
    for c in (
        REPO.parent / "shared" / "data" / "tinyshakespeare",
        REPO / "shared" / "data" / "tinyshakespeare",
        Path.home() / ".cache" / "trainscope" / "tinyshakespeare",
    ):
        if (c / "input.txt").is_file():
            return c, f"corpus: Tiny Shakespeare ({c / 'input.txt'})"
    rng = random.Random(0)
    alphabet = string.ascii_letters + string.digits + " .,;:!?'-\n"  # 65 characters
    path = tmp / "input.txt"
    path.write_text("".join(rng.choice(alphabet) for _ in range(300_000)))
    return path, "corpus: 300,000 generated characters (Tiny Shakespeare not found)"


class AnnotatedTimer:
    """A stage timer that also opens a ``record_function`` range per stage.

    Range ``k`` of a step runs from the timer's k-th event (``start_step`` being the 0th)
    to just before the next, so it covers what the host launched in stage ``k``. The
    stage names are learnt from the marks (``names[k]``).
    """

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.kind = inner.kind
        self.names: dict[int, str] = {}
        self._k = 0
        self._open: Any = None

    def _enter(self) -> None:
        import torch

        self._open = torch.profiler.record_function(f"{STAGE_RANGE}{self._k}")
        self._open.__enter__()

    def _exit(self) -> None:
        if self._open is not None:
            self._open.__exit__(None, None, None)
            self._open = None

    def start_step(self) -> None:
        self.inner.start_step()
        self._k = 0
        self._enter()

    def mark(self, stage: str) -> None:
        self._exit()
        self.inner.mark(stage)
        if self.names.setdefault(self._k, stage) != stage:
            raise RuntimeError(f"stage order changed: {stage} at position {self._k}")
        self._k += 1
        self._enter()

    def end_step(self) -> None:
        self._exit()
        self.inner.end_step()

    def resolve(self, block: bool = False) -> list[dict[str, float]]:
        return self.inner.resolve(block=block)


def sync(device: Any) -> None:
    """Wait for the device (no-op on CPU)."""
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def endless(loader: Iterable[Any]) -> Iterator[Any]:
    """Batches of ``loader`` forever (a fresh pass whenever one ends)."""
    while True:
        yield from loader


class Block:
    """``k`` batches of a shared stream, as a loader ``train_epoch`` can take."""

    def __init__(self, stream: Iterator[Any], k: int) -> None:
        self.stream, self.k = stream, k

    def __len__(self) -> int:
        return self.k

    def __iter__(self) -> Iterator[Any]:
        return self.stream


def gpt_setup(opts: argparse.Namespace, sz: dict[str, Any], device: Any) -> tuple:
    """gpt-char (the chosen preset) on the device, its training loader, a TrainState."""
    import torch

    from trainscope.config import DataConfig, WorkloadConfig
    from trainscope.data.loaders import make_loader
    from trainscope.precision import make_precision
    from trainscope.train.loop import TrainState
    from trainscope.workloads import build_workload

    torch.manual_seed(0)
    wcfg = WorkloadConfig(
        name="gpt-char",
        data_dir=str(opts.corpus),
        download=False,
        options={"preset": sz["preset"], "eval_windows": sz["eval_windows"]},
    )
    wl = build_workload(wcfg, Path(opts.tmp))
    model = wl.model.to(device)
    loader = make_loader(
        wl.train_set, DataConfig(batch_size=sz["batch_size"]), train=True, device=device
    )
    precision = make_precision(opts.precision, device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    state = TrainState(model, opt, precision, wl.loss_fn, device)
    return wl, loader, state


def section_stages(opts: argparse.Namespace, sz: dict[str, Any], device: Any) -> dict[str, Any]:
    """(a) the stage timer against the profiler, for the same steps."""
    from torch.profiler import ProfilerActivity, profile

    from trainscope.profiling.timer import make_stage_timer
    from trainscope.train.loop import train_epoch

    wl, loader, state = gpt_setup(opts, sz, device)
    timer = AnnotatedTimer(make_stage_timer(device, "auto"))
    # Warm-up: allocator growth, cuBLAS/cuDNN handles and autotuning, not profiled.
    train_epoch(state, loader, timer, max_steps=sz["profile_warmup"])
    records: list[dict[str, Any]] = []
    cuda = device.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    skip = sz["profile_skip"]  # the profiler's own start-up slows the first steps it sees
    with profile(activities=activities) as prof:
        train_epoch(
            state, loader, timer, max_steps=skip + sz["profile_steps"], on_steps=records.extend
        )
    trace_path = Path(opts.tmp) / "trace.json"
    prof.export_chrome_trace(str(trace_path))
    trace = json.loads(trace_path.read_text())
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    trace_path.unlink()
    windows = stage_windows(events)
    points = device_points(events) if cuda else host_points(events)
    sums, outside, n_outside = attribute(points, windows)
    steps = range(skip, min(len(records), 1 + max((w[0] for w in windows), default=-1)))
    profiled = per_stage(sums, timer.names, steps)
    timed = {name: [records[i]["stages"].get(name, 0.0) for i in steps] for name in profiled}
    state.precision.close()
    rows = compare_stages(timed, profiled)
    what = "kernels, copies and memsets" if cuda else "top-level CPU ops"
    return {
        "workload": f"gpt-char {sz['preset']}, batch {sz['batch_size']}, {opts.precision}",
        "timer": timer.kind,
        "method": (
            f"{what} from torch.profiler, each attributed to the stage whose "
            "record_function range (opened and closed at the timer's marks) was open on "
            "the host when "
            + (
                "its launch call ran (launch and kernel matched by correlation id)"
                if cuda
                else "it started"
            )
            + "; stage time from the timer for the same steps. The timer's interval also "
            "holds any device idle time inside the stage, the profiler sum does not."
        ),  # fmt: skip
        "goal": f"|difference| <= {STAGE_GOAL_PCT:g}% for {', '.join(GOAL_STAGES)}"
        + ("" if cuda else " (applies to CUDA kernels; on CPU this only exercises the logic)"),
        "goal_applies": cuda,
        "warmup": (
            f"{sz['profile_warmup']} steps before profiling and the first {skip} profiled "
            "steps (profiler start-up), not counted"
        ),
        "steps": len(steps),
        "points": len(points),
        "points_outside_stages": n_outside,
        "time_outside_stages_s": outside / 1e6,
        "rows": rows,
        "within_goal": all(r["within_goal"] for r in rows if r["within_goal"] is not None),
    }


def section_overhead(opts: argparse.Namespace, sz: dict[str, Any], device: Any) -> dict[str, Any]:
    """(b) trainscope's timed loop against a bare loop, alternating blocks, one process."""
    import torch

    from trainscope.profiling.timer import make_stage_timer
    from trainscope.records import RunWriter
    from trainscope.train.loop import train_epoch
    from trainscope.workloads.base import move_to

    wl, loader, state = gpt_setup(opts, sz, device)
    stream, k, log_every = endless(loader), sz["block"], 10
    model, opt, prec = state.model, state.optimizer, state.precision
    timer = make_stage_timer(device, "auto")
    out_dir = Path(tempfile.mkdtemp(dir=opts.tmp))
    writer = RunWriter(out_dir)

    def on_steps(records: list[dict[str, Any]]) -> None:
        for r in records:
            writer.log("step", **r)
        writer.flush()

    def bare() -> None:
        model.train()
        losses = []
        for step in range(1, k + 1):
            x, y = next(stream)
            x, y = move_to(x, device), y.to(device, non_blocking=True)
            with prec.autocast():
                loss = wl.loss_fn(model(x), y)
            prec.backward(loss)
            prec.step(opt)
            opt.zero_grad(set_to_none=True)
            losses.append(loss.detach())
            if step % log_every == 0:
                torch.stack(losses).float().cpu().tolist()  # the loss read a real loop does
                losses.clear()
        if losses:
            torch.stack(losses).float().cpu().tolist()

    def instrumented() -> None:
        train_epoch(state, Block(stream, k), timer, log_every=log_every, on_steps=on_steps)

    kinds = {"bare": bare, "trainscope": instrumented}
    for fn in kinds.values():  # warm-up block of each, not timed
        fn()
    times: dict[str, list[float]] = {name: [] for name in kinds}
    for order in rotations(tuple(kinds), sz["rounds"]):
        for name in order:
            sync(device)
            t0 = time.perf_counter()
            kinds[name]()
            sync(device)
            times[name].append((time.perf_counter() - t0) / k)
    writer.close()
    prec.close()
    summary = ab_summary(times["bare"], times["trainscope"])
    return {
        "workload": f"gpt-char {sz['preset']}, batch {sz['batch_size']}, {opts.precision}",
        "method": (
            f"one model and batch stream; blocks of {k} steps alternate between a bare loop "
            "(forward, loss, backward, step, loss read every 10 steps) and trainscope's "
            "train_epoch (stage timer, step records written as JSON lines); each block "
            "timed host-side between device synchronizations"
        ),
        "warmup": "one block of each before timing, not counted",
        "seconds_per_step": {"bare": times["bare"], "trainscope": times["trainscope"]},
        **summary,
    }


def run_config(opts: argparse.Namespace, sz: dict[str, Any], precision: str, out: Path) -> dict:
    """A trainscope run config: gpt-char at ``precision`` for a fixed number of steps."""
    return {
        "workload": {
            "name": "gpt-char",
            "data_dir": str(opts.corpus),
            "download": False,
            "options": {"preset": sz["preset"], "eval_windows": sz["eval_windows"]},
        },
        "data": {"batch_size": sz["batch_size"]},
        "train": {
            "epochs": 1,
            "max_steps_per_epoch": sz["run_steps"],
            "optimizer": "adamw",
            "lr": 1e-3,
            "save_weights": False,
        },
        "runtime": {
            "device": opts.device,
            "precision": precision,
            "progress": False,
            "timing_warmup_steps": sz["run_warmup"],
        },
        "out": str(out),
        "overwrite": True,
    }


def section_precision(
    opts: argparse.Namespace, sz: dict[str, Any], device: Any
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(c) and (d): alternating trainscope runs at each precision."""
    import torch

    from trainscope.config import from_dict
    from trainscope.errors import DeviceError
    from trainscope.precision import make_precision
    from trainscope.profiling.peak import mfu
    from trainscope.train.run import run

    cuda = device.type == "cuda"
    usable, skipped = [], {}
    for p in PRECISIONS:
        try:
            make_precision(p, device).close()
            usable.append(p)
        except DeviceError as e:
            skipped[p] = str(e)
    runs: dict[str, list[dict[str, Any]]] = {p: [] for p in usable}
    for r, order in enumerate(rotations(usable, sz["precision_rounds"])):
        for p in order:
            gc.collect()
            if cuda:
                torch.cuda.empty_cache()
                torch.cuda.reset_peak_memory_stats(device)
            out = Path(opts.tmp) / f"run-{p}-{r}"
            s = run(from_dict(run_config(opts, sz, p, out)))
            steady = s.get("steady_state") or {}
            step_s = (steady.get("step_s") or {}).get("median")
            if step_s is None and s.get("steps"):
                step_s = s["train_time_s"] / s["steps"]
            tokens_per_sample = (
                s["tokens_per_s"] / s["samples_per_s"]
                if s.get("tokens_per_s") and s.get("samples_per_s")
                else None
            )
            steady_sps = steady.get("samples_per_s")
            peak = s.get("peak_flops_per_device")
            runs[p].append(
                {
                    "step_s": step_s,
                    "peak_memory_bytes": s.get("peak_memory_bytes") if cuda else None,
                    "tokens_per_s": steady_sps * tokens_per_sample
                    if steady_sps and tokens_per_sample
                    else None,
                    "mfu": mfu(s.get("flops_per_sample"), steady_sps, peak),
                    "run_tokens_per_s": s.get("tokens_per_s"),
                    "run_mfu": s.get("mfu"),
                    "mfu_note": s.get("mfu_note"),
                    "timing_mode": s.get("timing_mode"),
                    "steady_steps": steady.get("steps"),
                }
            )
    rows, tput = [], []
    for p in PRECISIONS:
        if p in skipped:
            rows.append({"precision": p, "skipped": skipped[p]})
            tput.append({"precision": p, "skipped": skipped[p]})
            continue
        rs = runs[p]
        step = spread(x["step_s"] for x in rs)
        rows.append(
            {
                "precision": p,
                "step_s": spread_dict(step),
                "peak_memory_bytes": spread_dict(spread(x["peak_memory_bytes"] for x in rs)),
                "steady_steps_per_run": rs[0]["steady_steps"] if rs else None,
                "timing_mode": rs[0]["timing_mode"] if rs else None,
            }
        )
        tput.append(
            {
                "precision": p,
                "tokens_per_s": spread_dict(spread(x["tokens_per_s"] for x in rs)),
                "mfu": spread_dict(spread(x["mfu"] for x in rs)),
                "run_tokens_per_s": spread_dict(spread(x["run_tokens_per_s"] for x in rs)),
                "run_mfu": spread_dict(spread(x["run_mfu"] for x in rs)),
                "mfu_note": rs[0]["mfu_note"] if rs else None,
            }
        )
    fp32 = next((r for r in rows if r["precision"] == "fp32" and "step_s" in r), None)
    for r in rows:
        if fp32 and "step_s" in r:
            r["speedup_vs_fp32"] = (
                fp32["step_s"]["median"] / r["step_s"]["median"] if r["step_s"]["median"] else None
            )
            a = spread(x["step_s"] for x in runs["fp32"])
            b = spread(x["step_s"] for x in runs[r["precision"]])
            r["differs_from_fp32"] = differ(a, b)
    what = f"gpt-char {sz['preset']}, batch {sz['batch_size']}, {sz['run_steps']} steps per run"
    warm = (
        f"first {sz['run_warmup']} steps of each run excluded (trainscope's steady state); n = runs"
    )
    precision = {
        "workload": what,
        "method": (
            f"{sz['precision_rounds']} rounds of trainscope runs, precisions rotated each "
            "round; per run the median steady-state step time (stage timer) and peak memory "
            + (
                "(torch.cuda.max_memory_allocated, peak reset before each run)"
                if cuda
                else "(not compared on CPU: process RSS is shared by the runs)"
            )
        ),  # fmt: skip
        "warmup": warm,
        "rows": rows,
    }
    throughput = {
        "workload": what,
        "method": (
            "from the runs of the precision section: steady-state samples/s x tokens per "
            "sample; MFU = analytic FLOPs per sample x samples/s / the device's peak at "
            "that precision. run_* figures are trainscope's own whole-run figures (warm-up "
            "included)"
        ),
        "warmup": warm,
        "rows": tput,
    }
    return precision, throughput


def section_lenet(opts: argparse.Namespace, sz: dict[str, Any], device: Any) -> dict[str, Any]:
    """(e) LeNet5 images/s at the largest batch that fits (bounded doubling search)."""
    import torch
    from torch.nn import functional as F

    from trainscope.precision import make_precision
    from trainscope.workloads.lenet import LeNet5

    cuda = device.type == "cuda"
    torch.manual_seed(0)
    model = LeNet5(1, 28, 10).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    prec = make_precision(opts.precision, device)
    data: dict[str, Any] = {}

    def step() -> None:
        with prec.autocast():
            loss = F.cross_entropy(model(data["x"]), data["y"])
        prec.backward(loss)
        prec.step(opt)
        opt.zero_grad(set_to_none=True)

    def timed(k: int) -> float:
        """Seconds for k steps: CUDA events around them on CUDA, perf_counter on CPU."""
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(k):
                step()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / 1e3
        t0 = time.perf_counter()
        for _ in range(k):
            step()
        return time.perf_counter() - t0

    def trial(b: int) -> dict[str, Any]:
        data.clear()
        if cuda:
            torch.cuda.reset_peak_memory_stats(device)
        data["x"] = torch.randn(b, 1, 28, 28, device=device)
        data["y"] = torch.randint(0, 10, (b,), device=device)
        step()  # warm-up at this size (cuDNN picks its algorithms), not timed
        s = timed(2)
        return {
            "images_per_s": 2 * b / s,
            "n_steps": 2,
            "peak_memory_bytes": torch.cuda.max_memory_allocated(device) if cuda else None,
        }

    def free() -> None:
        data.clear()
        opt.zero_grad(set_to_none=True)
        gc.collect()
        if cuda:
            torch.cuda.empty_cache()

    res = bounded_batch_search(trial, sz["lenet_start"], sz["lenet_cap"], after_failure=free)
    measured: dict[str, Any] = {}
    if res.best is not None:
        free()
        trial(res.best)  # fresh data at the size found (and one more warm-up)
        per = [timed(sz["lenet_steps"]) for _ in range(sz["lenet_repeats"])]
        rate = spread(res.best * sz["lenet_steps"] / s for s in per)
        measured = {"batch": res.best, "images_per_s": spread_dict(rate)}
    free()
    prec.close()
    return {
        "model": "LeNet5 as in the mnist workload (1x28x28 input, 10 classes), "
        f"{opts.precision}, SGD; random MNIST-shaped tensors held on the device, so the "
        "figure is the training step's rate, not the input pipeline's",
        "method": (
            f"batch sizes doubling from {sz['lenet_start']} up to the cap {sz['lenet_cap']}, "
            "2 timed steps each; the search stops at the first out-of-memory error; then "
            f"{sz['lenet_repeats']} repeats of {sz['lenet_steps']} steps at the largest size "
            "that ran" + (" (CUDA events)" if cuda else " (perf_counter)")
        ),
        "warmup": "one untimed step at every size tried (and one more before the repeats)",
        "cap": res.cap,
        "stopped": res.stopped,
        "tried": res.tried,
        "largest_batch": res.best,
        **measured,
    }


# =========================================================================== report


def machine(device: Any) -> dict[str, Any]:
    """The machine and software the figures come from."""
    import torch

    m = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "device": str(device),
        "torch_threads": torch.get_num_threads(),
    }
    if device.type == "cuda":
        m |= {
            "gpu": torch.cuda.get_device_name(device),
            "cuda": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version(),
        }
    return m


def _ms(d: dict[str, Any]) -> str:
    return fmt_spread(_sp(d), 1e3, " ms")


def _sp(d: dict[str, Any]) -> Spread:
    return Spread(d["median"], d["low"], d["high"], d["n"], d["kind"])


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:+.1f}%"


def report(result: dict[str, Any]) -> list[str]:
    """The Markdown lines of the whole check."""
    sec = result["sections"]
    lines = [f"command: {result['command']}", f"machine: {json.dumps(result['machine'])}"]
    lines.append(result["corpus"])

    def head(title: str, s: dict[str, Any]) -> bool:
        lines.extend(["", f"## {title}"])
        if "error" in s:
            lines.append(f"FAILED: {s['error']}")
            return False
        for key in ("workload", "model", "method", "goal", "warmup"):
            if s.get(key):
                lines.append(f"{key}: {s[key]}")
        return True

    a = sec.get("stage_vs_profiler")
    if a is not None and head("(a) stage timer vs torch.profiler", a):
        lines += [
            f"timer: {a['timer']}; {a['steps']} profiled steps; {a['points']} profiled "
            f"events, {a['points_outside_stages']} outside the stage ranges "
            f"({a['time_outside_stages_s'] * 1e3:.2f} ms, not compared)",
            "",
            "| stage | timer total (ms) | profiler total (ms) | difference | "
            "per-step difference | goal |",
            "| --- | ---: | ---: | ---: | --- | --- |",
        ]
        for r in a["rows"]:
            goal = {None: "-", True: "within", False: "outside"}[r["within_goal"]]
            lines.append(
                f"| {r['stage']} | {r['event_total_s'] * 1e3:.2f} | "
                f"{r['profiler_total_s'] * 1e3:.2f} | {_pct(r['diff_pct'])} | "
                f"{fmt_spread(_sp(r['diff_pct_per_step']), 1, '%', 1)} | {goal} |"
            )
    b = sec.get("overhead")
    if b is not None and head("(b) instrumentation overhead", b):
        lines += [
            "| loop | time per step |",
            "| --- | ---: |",
            f"| bare | {_ms(b['base_s'])} |",
            f"| trainscope | {_ms(b['test_s'])} |",
            f"| ratio trainscope / bare (per pair) | {fmt_spread(_sp(b['ratio']), 1, '', 4)} |",
            "",
            f"verdict: {b['verdict']}",
        ]
    c = sec.get("precision")
    if c is not None and head("(c) precision comparison", c):
        lines += [
            "| precision | time per step | peak memory (MiB) | vs fp32 |",
            "| --- | ---: | ---: | --- |",
        ]
        for r in c["rows"]:
            if "skipped" in r:
                lines.append(f"| {r['precision']} | skipped: {r['skipped']} | | |")
                continue
            vs = "-"
            x = r.get("speedup_vs_fp32")
            if x and r["precision"] != "fp32":
                vs = (f"{x:.2f}x faster" if x >= 1 else f"{1 / x:.2f}x slower") + (
                    "" if r["differs_from_fp32"] else " (spreads overlap: within noise)"
                )
            mem = fmt_spread(_sp(r["peak_memory_bytes"]), 2**-20, "", 0)
            lines.append(f"| {r['precision']} | {_ms(r['step_s'])} | {mem} | {vs} |")
    d = sec.get("gpt_throughput")
    if d is not None and head("(d) gpt-char tokens/s and MFU", d):
        lines += [
            "| precision | tokens/s (steady) | MFU (steady) | tokens/s (whole run) | note |",
            "| --- | ---: | ---: | ---: | --- |",
        ]
        for r in d["rows"]:
            if "skipped" in r:
                lines.append(f"| {r['precision']} | skipped | | | |")
                continue
            lines.append(
                f"| {r['precision']} | {fmt_spread(_sp(r['tokens_per_s']), 1, '', 0)} | "
                f"{fmt_spread(_sp(r['mfu']), 100, '%', 1)} | "
                f"{fmt_spread(_sp(r['run_tokens_per_s']), 1, '', 0)} | {r['mfu_note'] or ''} |"
            )
    e = sec.get("lenet_batch")
    if e is not None and head("(e) LeNet5 images/s at the largest batch", e):
        lines += ["| batch | outcome | images/s (2 steps) | peak memory (MiB) |"]
        lines += ["| ---: | --- | ---: | ---: |"]
        for t in e["tried"]:
            if t["outcome"] == "ok":
                r = t["result"]
                mem = r["peak_memory_bytes"]
                mem_s = f"{mem / 2**20:.0f}" if mem is not None else "-"
                lines.append(f"| {t['batch']} | ok | {r['images_per_s']:.0f} | {mem_s} |")
            else:
                lines.append(f"| {t['batch']} | {t['outcome']}: {t['error'][:80]} | | |")
        why = {"oom": "first out-of-memory", "error": "a failure", "cap": "the cap"}
        lines.append(
            f"largest batch that ran: {e['largest_batch']} (search stopped at "
            f"{why[e['stopped']]}; cap {e['cap']})"
        )
        if "images_per_s" in e:
            lines.append(
                f"images/s at batch {e['batch']}: {fmt_spread(_sp(e['images_per_s']), 1, '', 0)}"
            )
    lines += ["", "elapsed: " + ", ".join(f"{k} {v:.1f} s" for k, v in result["elapsed_s"].items())]
    return lines


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda", help="cuda (default), cuda:N or cpu")
    p.add_argument("--quick", action="store_true", help="tiny sizes (CPU tests)")
    p.add_argument("--json", type=Path, help="also write every figure here")
    p.add_argument("--precision", default="fp32", choices=PRECISIONS, help="for (a), (b), (e)")
    p.add_argument("--data-dir", help="folder holding Tiny Shakespeare's input.txt")
    p.add_argument("--max-batch", type=int, help="cap of the LeNet5 batch search")
    p.add_argument(
        "--threads", type=int, help="torch CPU threads (default: torch's; 1 with --quick)"
    )
    p.add_argument(
        "--only", nargs="+", choices=("a", "b", "c", "e"), help="run only these sections"
    )
    opts = p.parse_args(argv)
    if not re.fullmatch(r"cpu|cuda(:\d+)?", opts.device):
        p.error(f"--device must be cuda, cuda:N or cpu, got {opts.device!r}")
    return opts


def main(argv: Sequence[str] | None = None) -> int:
    """Run the check; 0 when every section ran (whatever the verdicts), 1 otherwise."""
    opts = parse(argv)
    import torch

    if opts.device != "cpu" and not torch.cuda.is_available():
        print(NO_CUDA)
        return 0
    device = torch.device(opts.device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    threads = opts.threads or (1 if opts.quick else None)
    if threads:
        torch.set_num_threads(threads)
    sz = dict(SIZES["quick" if opts.quick else "full"])
    if opts.max_batch:
        sz["lenet_cap"] = opts.max_batch
    only = set(opts.only or ("a", "b", "c", "e"))
    t_all = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as tmp:
        opts.tmp = tmp
        opts.corpus, corpus_note = find_corpus(opts.data_dir, Path(tmp))
        argv_text = shlex.join(sys.argv[1:] if argv is None else list(argv))
        result: dict[str, Any] = {
            "command": f"python benchmarks/gpu_check.py {argv_text}".strip(),
            "machine": machine(device),
            "quick": opts.quick,
            "sizes": sz,
            "corpus": corpus_note,
            "sections": {},
            "elapsed_s": {},
        }

        def save() -> None:
            if opts.json:
                opts.json.write_text(json.dumps(result, indent=2, default=str))

        plan: list[tuple[str, str, Callable[[], Any]]] = [
            ("a", "stage_vs_profiler", lambda: section_stages(opts, sz, device)),
            ("b", "overhead", lambda: section_overhead(opts, sz, device)),
            ("c", "precision", lambda: section_precision(opts, sz, device)),
            ("e", "lenet_batch", lambda: section_lenet(opts, sz, device)),
        ]
        failed = False
        for key, name, fn in plan:
            if key not in only:
                continue
            t0 = time.perf_counter()
            print(f"running {name} ...", file=sys.stderr, flush=True)
            try:
                got = fn()
            except Exception as e:  # noqa: BLE001 - one failed section must not lose the rest
                got = {"error": f"{type(e).__name__}: {e}"}
                failed = True
                if name == "precision":
                    result["sections"]["gpt_throughput"] = got
            if name == "precision" and isinstance(got, tuple):
                result["sections"]["precision"], result["sections"]["gpt_throughput"] = got
            else:
                result["sections"][name] = got
            result["elapsed_s"][name] = time.perf_counter() - t0
            save()
            gc.collect()  # what the section left, before the next one measures memory
            if device.type == "cuda":
                torch.cuda.empty_cache()
        result["elapsed_s"]["total"] = time.perf_counter() - t_all
        save()
    print("\n".join(report(result)))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
