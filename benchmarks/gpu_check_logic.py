"""The pure logic of ``gpu_check.py``: comparisons, the A/B summary, the bounded batch
search, attributing profiled kernels to stages, and the Markdown report. No CUDA needed,
so every rule here is tested on CPU with planted numbers (tests/benchmarks)."""

from __future__ import annotations

import bisect
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainscope.util.spread import Spread, differ, spread

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
                # A ratio only beyond the noise (trainscope's claim rule).
                if r["differs_from_fp32"]:
                    vs = f"{x:.2f}x faster" if x >= 1 else f"{1 / x:.2f}x slower"
                else:
                    vs = "no measurable difference (spreads overlap)"
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
