"""The pipeline bubble measured against theory: each schedule and microbatch count, CPU.

Each measurement is one whole ``trainscope run --strategy pipeline --nproc S`` of a
character GPT (gpt-char; Tiny Shakespeare from ``--data-dir``), one intra-op thread per
process; the single-process baseline runs with S threads (the same core budget). The
configurations run round-robin, ``--runs`` times each (a first round is a
warm-up and discarded), so a slow spell of the machine hits all of them. Per run, the
steps after the first ``--skip`` are read from every rank's metrics.jsonl; a rank's
bubble is its ``pipeline_wait`` over its forward + backward + pipeline_wait (the time it
spent in the schedule), and the run's bubble is the mean over its ranks. Printed as
Markdown: the median bubble with its min–max over runs and n, the theory's
(S-1)/(M+S-1) (interleaved: (S-1)/(2M+S-1)), the share of the wait blocked on sends
and receives (the rest: the schedule's own work; from each rank's summary, its first
step left out), time per step, and per rank the most activation bytes held at once (the
memory meter's peak in flight, exact bytes):

    python benchmarks/pipeline_bubble.py --data-dir ../shared/data/tinyshakespeare --runs 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from trainscope.comm.pipeline import theory_bubble

SCHEDULES = ("gpipe", "1f1b", "interleaved-1f1b")


def configurations(args: argparse.Namespace) -> list[tuple[str, int]]:
    """(schedule, M) pairs to run; 1F1B needs M >= S (torch's Schedule1F1B)."""
    out = []
    for schedule in SCHEDULES:
        for m in args.microbatches:
            if schedule == "1f1b" and m < args.stages:
                continue
            out.append((schedule, m))
    return out


def one_run(schedule: str | None, m: int, out: Path, args: argparse.Namespace) -> dict:
    """One whole run; its per-step figures read back from every rank's record."""
    cmd = [
        sys.executable, "-m", "trainscope.cli", "run", "--workload", "gpt-char",
        "--data-dir", args.data_dir,
        "--n-layer", str(args.n_layer), "--n-head", "4", "--n-embd", str(args.n_embd),
        "--block-size", str(args.block_size), "--dropout", "0",
        "--epochs", "1", "--max-steps-per-epoch", str(args.steps),
        "--batch-size", str(args.batch_size), "--log-every", "5",
        "--no-save-weights", "--quiet", "--no-progress", "--out", str(out),
    ]  # fmt: skip
    if schedule is None:  # the same core budget: one process with S threads
        cmd += ["--threads", str(args.stages)]
    else:  # S processes of one thread each
        cmd += ["--threads", "1", "--strategy", "pipeline", "--nproc", str(args.stages),
                "--pp-schedule", schedule, "--microbatches", str(m)]  # fmt: skip
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    files = [out / "metrics.jsonl", *sorted(out.glob("ranks/rank*/metrics.jsonl"))]
    bubbles, step_ms = [], []
    for f in files:
        steps = [json.loads(line) for line in f.read_text().splitlines()]
        steps = [s for s in steps if s.get("event") == "step"][args.skip :]
        wait = sum(s["stages"].get("pipeline_wait", 0.0) for s in steps)
        busy = sum(s["stages"]["forward"] + s["stages"]["backward"] for s in steps)
        bubbles.append(wait / (wait + busy) if wait + busy else 0.0)
        step_ms.append(1e3 * sum(sum(s["stages"].values()) for s in steps) / len(steps))
    summaries = [json.loads(p.read_text()) for p in
                 [out / "summary.json", *sorted(out.glob("ranks/rank*/summary.json"))]]  # fmt: skip
    peaks = [s["memory"]["activations"]["peak_in_flight_bytes"] for s in summaries]
    # Of each rank's wait, the share blocked on sends and receives (the rest is the
    # schedule's own work); the run's is the mean over its ranks.
    comms = [s.get("comm") or {} for s in summaries]
    shares = [c["pipeline_p2p_wait_s"] / c["pipeline_wait_s"] for c in comms
              if c.get("pipeline_p2p_wait_s") is not None and c.get("pipeline_wait_s")]  # fmt: skip
    return {"bubble": statistics.mean(bubbles), "step_ms": max(step_ms), "peaks": peaks,
            "p2p_share": statistics.mean(shares) if shares else None}  # fmt: skip


def spread_text(values: list[float], fmt: str) -> str:
    """median (min–max, n)."""
    med = statistics.median(values)
    return f"{med:{fmt}} ({min(values):{fmt}}–{max(values):{fmt}}, n={len(values)})"


def main() -> None:
    """Run every configuration round-robin and print the table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", required=True)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--stages", type=int, default=2)
    ap.add_argument("--microbatches", type=lambda s: [int(x) for x in s.split(",")],
                    default=[2, 4, 8])  # fmt: skip
    ap.add_argument("--n-layer", type=int, default=4)
    ap.add_argument("--n-embd", type=int, default=128)
    ap.add_argument("--block-size", type=int, default=64)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--skip", type=int, default=2, help="warm-up steps left out of each run")
    args = ap.parse_args()
    configs: list[tuple[str | None, int]] = [(None, 1), *configurations(args)]
    results: dict[tuple[str | None, int], list[dict]] = {c: [] for c in configs}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.runs + 1):  # round 0 is a warm-up, discarded
            for schedule, m in configs:
                res = one_run(schedule, m, Path(tmp) / f"{schedule}-{m}-{r}", args)
                print(f"run {r} {schedule or 'single'} M={m}: {res}", file=sys.stderr)
                if r:
                    results[(schedule, m)].append(res)
    print(f"S = {args.stages} stages, gpt-char {args.n_layer} layers x {args.n_embd}, "
          f"block {args.block_size}, batch {args.batch_size}; "
          f"first {args.skip} steps left out")  # fmt: skip
    print()
    print(
        "| schedule | M | bubble measured | theory | of the wait: blocked on p2p "
        "| time/step (ms) | in flight per rank (KiB) |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | --- |")
    for (schedule, m), runs in results.items():
        peaks = " / ".join(f"{p / 1024:.0f}" for p in runs[0]["peaks"])
        step = spread_text([x["step_ms"] for x in runs], ".1f")
        if schedule is None:
            print(f"| single process | – | – | – | – | {step} | {peaks} |")
            continue
        bubble = spread_text([x["bubble"] for x in runs], ".3f")
        theory = theory_bubble(schedule, args.stages, m)
        shares = [x["p2p_share"] for x in runs if x["p2p_share"] is not None]
        p2p = spread_text(shares, ".2f") if shares else "–"
        print(f"| {schedule} | {m} | {bubble} | {theory:.3f} | {p2p} | {step} | {peaks} |")


if __name__ == "__main__":
    main()
