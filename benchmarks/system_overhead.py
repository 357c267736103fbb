"""Cost of trainscope's background system sampler on a training run (CPU).

The same short run (digits, LeNet5, a fixed number of steps, in this process through
``trainscope.train.run.run``) is repeated with the sampler at three intervals, alternating
in rotated order each round (A B C, B C A, C A B, ...), after one uncounted warm-up run:

- ``off``: the largest interval a config allows (``MAX_SYSTEM_INTERVAL_S``): the thread
  starts but never samples;
- ``default``: the default interval (1 s);
- ``fast``: the smallest allowed interval (0.1 s).

Per run it takes the steady-state median step time (``summary["steady_state"]["step_s"]``,
the first ``timing_warmup_steps`` excluded) and the steady-state mean step time. A sample
costs one step a few hundred microseconds at most, once per interval, so a median over
steps hides it by construction and the mean is where it shows: both are reported. Each
figure is the median over the runs with its spread and n; the overhead against ``off``
says "within noise" when the spreads overlap (trainscope's claim rule).

    python benchmarks/system_overhead.py            # ~2-3 minutes on 2 cores
    python benchmarks/system_overhead.py --quick    # a few seconds (tests)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from trainscope.config import MAX_SYSTEM_INTERVAL_S, MIN_SYSTEM_INTERVAL_S, RuntimeConfig
from trainscope.util.spread import Spread, differ, spread

INTERVALS = {
    "off": MAX_SYSTEM_INTERVAL_S,
    "default": RuntimeConfig().system_interval_s,
    "fast": MIN_SYSTEM_INTERVAL_S,
}
BASELINE = "off"

# =========================================================================== pure logic


def rotations(kinds: Sequence[str], rounds: int) -> list[tuple[str, ...]]:
    """The order of each round: the kinds rotated by one more place each round."""
    k = list(kinds)
    return [tuple(k[r % len(k) :] + k[: r % len(k)]) for r in range(rounds)] if k else []


def median_step_s(summary: dict[str, Any]) -> float | None:
    """Steady-state median step time of a run; train_time_s / steps where it has none."""
    step = ((summary.get("steady_state") or {}).get("step_s") or {}).get("median")
    if step is not None:
        return step
    if summary.get("steps") and summary.get("train_time_s") is not None:
        return summary["train_time_s"] / summary["steps"]
    return None


def mean_step_s(summary: dict[str, Any]) -> float | None:
    """Steady-state mean step time (total time of the steady steps over their count);
    train_time_s / steps where there is no steady state."""
    steady = summary.get("steady_state") or {}
    if steady.get("steps") and steady.get("time_s") is not None:
        return steady["time_s"] / steady["steps"]
    if summary.get("steps") and summary.get("train_time_s") is not None:
        return summary["train_time_s"] / summary["steps"]
    return None


def overhead(base: Spread, other: Spread) -> tuple[float | None, str]:
    """(overhead of ``other`` over ``base`` in percent, verdict). The verdict is "within
    noise" when the spreads overlap (or either has fewer than two runs), else "slower" or
    "faster"."""
    if base.median is None or other.median is None or base.median == 0:
        return None, "n/a"
    pct = (other.median - base.median) / base.median * 100.0
    if not differ(base, other):
        return pct, "within noise"
    return pct, "slower" if pct > 0 else "faster"


def summarise(runs: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Per setting: spreads of the median and mean step times over its runs, samples per
    run, and the overhead of each against the baseline ("off")."""
    spreads = {
        k: (spread(r["median_step_s"] for r in rs), spread(r["mean_step_s"] for r in rs))
        for k, rs in runs.items()
    }
    base = spreads.get(BASELINE)
    rows = []
    for k, rs in runs.items():
        med, mean = spreads[k]
        row: dict[str, Any] = {
            "setting": k,
            "interval_s": INTERVALS.get(k),
            "runs": len(rs),
            "median_step_s": med,
            "mean_step_s": mean,
            "samples_per_run": spread(r["samples"] for r in rs),
        }
        if base is not None and k != BASELINE:
            row["median_overhead_pct"], row["median_verdict"] = overhead(base[0], med)
            row["mean_overhead_pct"], row["mean_verdict"] = overhead(base[1], mean)
        rows.append(row)
    return rows


def fmt_spread(s: Spread, scale: float = 1.0, digits: int = 3) -> str:
    """``"4.123 (IQR 4.001-4.300)"``; n is its own column; ``"n/a"`` without values."""
    if s.median is None or s.low is None or s.high is None:
        return "n/a"
    if s.n == 1:
        return f"{s.median * scale:.{digits}f} (n=1)"
    lo, hi = s.low * scale, s.high * scale
    return f"{s.median * scale:.{digits}f} ({s.kind} {lo:.{digits}f}-{hi:.{digits}f})"


def _pct(pct: float | None, verdict: str | None) -> str:
    if pct is None:
        return "baseline" if verdict is None else "n/a"
    return f"{pct:+.2f}% ({verdict})"


def table(rows: Sequence[dict[str, Any]]) -> list[str]:
    """The Markdown table of :func:`summarise`'s rows."""
    out = [
        "| sampler | interval (s) | n runs | median step (ms) | vs off | mean step (ms) | "
        "vs off | samples per run |",
        "| --- | ---: | ---: | ---: | --- | ---: | --- | ---: |",
    ]
    for r in rows:
        out.append(
            f"| {r['setting']} | {r['interval_s']:g} | {r['runs']} | "
            f"{fmt_spread(r['median_step_s'], 1e3)} | "
            f"{_pct(r.get('median_overhead_pct'), r.get('median_verdict'))} | "
            f"{fmt_spread(r['mean_step_s'], 1e3)} | "
            f"{_pct(r.get('mean_overhead_pct'), r.get('mean_verdict'))} | "
            f"{fmt_spread(r['samples_per_run'], 1, 0)} |"
        )
    return out


# =========================================================================== measurement


def one_run(setting: str, args: argparse.Namespace, out: Path) -> dict[str, Any]:
    """One digits run with the sampler at ``setting``'s interval; its figures."""
    from trainscope.config import from_dict
    from trainscope.train.run import run

    cfg = from_dict(
        {
            "workload": {"name": "digits"},
            "data": {"batch_size": args.batch_size, "drop_last": True},
            "train": {"epochs": args.epochs, "eval_every": 10**6, "save_weights": False},
            "runtime": {
                "device": "cpu",
                "progress": False,
                "system_interval_s": INTERVALS[setting],
                "timing_warmup_steps": args.warmup_steps,
            },
            "out": str(out),
            "overwrite": True,
        }
    )
    s = run(cfg)
    system = out / "system.jsonl"
    samples = len(system.read_text().splitlines()) if system.is_file() else 0
    shutil.rmtree(out, ignore_errors=True)
    return {
        "median_step_s": median_step_s(s),
        "mean_step_s": mean_step_s(s),
        "steps": s.get("steps"),
        "train_time_s": s.get("train_time_s"),
        "samples": samples,
    }


def sample_cost_us(blocks: int = 7, per_block: int = 200) -> Spread:
    """Microseconds one system sample takes in this process (CPU %, RSS, system memory):
    the cost the whole-run comparison above is too noisy to resolve, measured directly."""
    from trainscope.profiling.system import SystemSampler

    with tempfile.TemporaryDirectory(prefix="sample-cost-") as tmp:
        sampler = SystemSampler(Path(tmp) / "s.jsonl", 1.0, gpus=False, origin=0.0)
        sampler.sample()  # primes psutil's CPU counter
        times = []
        for _ in range(blocks):
            t0 = time.perf_counter()
            for _ in range(per_block):
                sampler.sample()
            times.append(1e6 * (time.perf_counter() - t0) / per_block)
    return spread(times)


def main(argv: Sequence[str] | None = None) -> int:
    """Alternate the three settings, print the table, the command and the machine."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=5, help="counted runs of each setting")
    p.add_argument("--epochs", type=int, default=60, help="epochs of digits per run")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--warmup-steps", type=int, default=5, help="steps excluded per run")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (1: no spinning)")
    p.add_argument("--quick", action="store_true", help="2 repeats of 2 epochs (tests)")
    p.add_argument("--json", type=Path, help="also write the raw figures here")
    args = p.parse_args(argv)
    if args.quick:
        args.repeats, args.epochs = 2, 2
    import torch

    torch.set_num_threads(args.threads)
    argv_text = shlex.join(sys.argv[1:] if argv is None else list(argv))
    command = f"python benchmarks/system_overhead.py {argv_text}".strip()
    runs: dict[str, list[dict[str, Any]]] = {k: [] for k in INTERVALS}
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="system-overhead-") as tmp:
        one_run("default", args, Path(tmp) / "warmup")  # imports, data, lazy init: not counted
        for r, order in enumerate(rotations(tuple(INTERVALS), args.repeats)):
            for k in order:
                runs[k].append(one_run(k, args, Path(tmp) / f"{k}-{r}"))
                print(
                    f"round {r + 1} {k}: median step "
                    f"{1e3 * (runs[k][-1]['median_step_s'] or 0):.3f} ms, "
                    f"{runs[k][-1]['samples']} samples",
                    file=sys.stderr,
                )
    elapsed = time.perf_counter() - t0
    rows = summarise(runs)
    steps = runs[BASELINE][0]["steps"] if runs[BASELINE] else None
    print(f"command: {command}")
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} CPUs "
        f"({len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else '?'} "
        f"available), python {platform.python_version()}, torch {torch.__version__}, "
        f"{torch.get_num_threads()} torch thread(s)"
    )
    print(
        f"work: digits (8x8), LeNet5, batch {args.batch_size} (drop_last), {args.epochs} "
        f"epochs = {steps} steps per run, CPU, in one process; one warm-up run not counted; "
        f"first {args.warmup_steps} steps of each run excluded (steady state); "
        f"{args.repeats} runs per setting, order rotated each round"
    )
    print("")
    print("\n".join(table(rows)))
    print("")
    print(
        "median step: trainscope's steady-state median (a sample touches one step per "
        "interval, so the median hides it); mean step: steady-state time / steps, where a "
        "sampler's cost would show. Spread: IQR for n >= 5, min-max below."
    )
    cost = sample_cost_us()
    print(
        f"one sample's own cost: {cost.median:.0f} µs ({cost.kind} {cost.low:.0f}-{cost.high:.0f}, "
        f"n={cost.n} blocks of 200): at most {cost.median / 1e4:.3f}% of the time at the "
        f"default 1 s interval and {cost.median / 1e3:.2f}% at 0.1 s, even if every sample "
        "stalled the training thread for all of it"
    )
    print(f"elapsed: {elapsed:.1f} s")
    if args.json:

        def plain(s: Any) -> Any:
            return s.__dict__ if isinstance(s, Spread) else s

        data = {
            "command": command,
            "runs": runs,
            "rows": [{k: plain(v) for k, v in r.items()} for r in rows],
        }
        args.json.write_text(json.dumps(data, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
