"""trainscope's gpt-char training step against a bare hand-written loop (same model, batch).

Each measurement is a process of its own (``--one bare|trainscope``) that builds the
gpt-char workload from Tiny Shakespeare, takes the same DataLoader batches (same shuffle
seed), runs ``--warmup`` steps untimed and then times ``--steps`` steps with
``time.perf_counter``. The trainscope side is the real loop: ``train_epoch`` with its stage
timer, loss bookkeeping and step records written to ``metrics.jsonl`` by the run writer.
The bare side is forward, loss, backward, AdamW step, with the loss read every
``log_every`` steps as trainscope does. The two kinds alternate; the script prints the
median time per step of each and the median of the pairwise ratios:

    python benchmarks/gpt_overhead.py --data-dir ../shared/data/tinyshakespeare --runs 7

Between processes this machine varies by about 10%, more than the overhead in question.
``--interleaved`` therefore also measures inside one process: one model, one batch
iterator, blocks of ``--block`` steps alternating between the bare step and trainscope's
``train_epoch`` (same data stream, so neither side pays an iterator start-up), and
reports the median per-step time of each over ``--rounds`` pairs of blocks:

    python benchmarks/gpt_overhead.py --data-dir ../shared/data/tinyshakespeare --interleaved
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def setup(args: argparse.Namespace) -> tuple:
    """The gpt-char workload (no dropout), its training DataLoader and an AdamW optimizer."""
    import torch

    from trainscope.config import DataConfig, WorkloadConfig
    from trainscope.data.loaders import make_loader
    from trainscope.workloads.gpt import gpt_char

    torch.manual_seed(0)
    options = {"preset": args.preset, "dropout": 0.0}
    wl = gpt_char(WorkloadConfig(name="gpt-char", data_dir=args.data_dir, options=options), Path())
    cfg = DataConfig(batch_size=args.batch_size)
    data = make_loader(wl.train_set, cfg, train=True, device=torch.device("cpu"))
    return wl, data, torch.optim.AdamW(wl.model.parameters(), lr=1e-3)


def one(kind: str, args: argparse.Namespace) -> float:
    """Seconds per step of one kind, measured in this process."""
    import torch

    from trainscope.profiling.timer import HostStageTimer
    from trainscope.records import RunWriter
    from trainscope.techniques.precision import Precision
    from trainscope.train.loop import EpochOptions, TrainState, train_epoch

    wl, loader, opt = setup(args)
    model, cpu = wl.model, torch.device("cpu")
    total = args.warmup + args.steps

    if kind == "bare":
        batches = iter(loader)
        losses, t0 = [], 0.0
        for step in range(1, total + 1):
            if step == args.warmup + 1:
                t0 = time.perf_counter()
            x, y = next(batches)
            loss = wl.loss_fn(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            losses.append(loss.detach())
            if step % args.log_every == 0:
                torch.stack(losses).tolist()
                losses.clear()
        return (time.perf_counter() - t0) / args.steps

    state = TrainState(model, opt, Precision(cpu), wl.loss_fn, cpu)
    with tempfile.TemporaryDirectory() as tmp:
        writer = RunWriter(Path(tmp))

        def on_steps(records: list[dict]) -> None:
            for r in records:
                writer.log("step", **r)
            writer.flush()

        # Warm-up steps as an epoch of their own, then the timed epoch (the same loader:
        # each epoch starts a fresh iterator, as in a run).
        warmup = EpochOptions(max_steps=args.warmup, log_every=10)
        train_epoch(state, loader, HostStageTimer(), warmup)
        t0 = time.perf_counter()
        train_epoch(
            state,
            loader,
            HostStageTimer(),
            EpochOptions(max_steps=args.steps, log_every=args.log_every, on_steps=on_steps),
        )
        elapsed = time.perf_counter() - t0
        writer.close()
    return elapsed / args.steps


def interleaved(args: argparse.Namespace) -> None:
    """Alternate blocks of bare and trainscope steps on one model and batch stream."""
    import torch

    from trainscope.profiling.timer import HostStageTimer
    from trainscope.records import RunWriter
    from trainscope.techniques.precision import Precision
    from trainscope.train.loop import EpochOptions, TrainState, train_epoch

    wl, data, opt = setup(args)
    model, cpu = wl.model, torch.device("cpu")
    stream = iter(data)
    state = TrainState(model, opt, Precision(cpu), wl.loss_fn, cpu)

    class Block:
        """K batches of the shared stream, as a loader train_epoch can take."""

        def __len__(self) -> int:
            return args.block

        def __iter__(self):  # noqa: ANN204
            return stream

    def bare_block() -> None:
        losses = []
        for step in range(1, args.block + 1):
            x, y = next(stream)
            loss = wl.loss_fn(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            losses.append(loss.detach())
            if step % args.log_every == 0:
                torch.stack(losses).tolist()
                losses.clear()

    times: dict[str, list[float]] = {"bare": [], "trainscope": []}
    with tempfile.TemporaryDirectory() as tmp:
        writer = RunWriter(Path(tmp))

        def on_steps(records: list[dict]) -> None:
            for r in records:
                writer.log("step", **r)
            writer.flush()

        def ts_block() -> None:
            options = EpochOptions(log_every=args.log_every, on_steps=on_steps)
            train_epoch(state, Block(), HostStageTimer(), options)

        bare_block()  # warm-up of both paths, not timed
        ts_block()
        for r in range(args.rounds):
            order = (("bare", bare_block), ("trainscope", ts_block))
            for kind, fn in order if r % 2 == 0 else order[::-1]:
                t0 = time.perf_counter()
                fn()
                times[kind].append((time.perf_counter() - t0) / args.block)
        writer.close()
    ratios = [t / b for t, b in zip(times["trainscope"], times["bare"])]
    for kind, ts in times.items():
        print(f"{kind}: median {1e3 * statistics.median(ts):.3f} ms/step over {len(ts)} blocks")
    of_medians = statistics.median(times["trainscope"]) / statistics.median(times["bare"])
    print(
        f"trainscope / bare (interleaved, one process): median of block ratios "
        f"{statistics.median(ratios):.4f} (min {min(ratios):.4f}, max {max(ratios):.4f}); "
        f"ratio of medians {of_medians:.4f}"
    )


def main() -> None:
    """Alternate bare and trainscope processes; print medians and the pairwise ratio."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", required=True, help="folder with Tiny Shakespeare input.txt")
    ap.add_argument("--preset", default="tiny")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--log-every", type=int, default=10)
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--interleaved", action="store_true", help="one process, alternating blocks")
    ap.add_argument("--block", type=int, default=20, help="steps per block (interleaved)")
    ap.add_argument("--rounds", type=int, default=30, help="pairs of blocks (interleaved)")
    ap.add_argument("--one", choices=("bare", "trainscope"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.interleaved:
        interleaved(args)
        return
    if args.one:
        print(json.dumps({"s_per_step": one(args.one, args)}))
        return
    passed = [a for a in sys.argv[1:] if a != "--one"]
    times: dict[str, list[float]] = {"bare": [], "trainscope": []}
    for r in range(args.runs):
        order = ("bare", "trainscope") if r % 2 == 0 else ("trainscope", "bare")
        for kind in order:
            out = subprocess.run(
                [sys.executable, __file__, *passed, "--one", kind],
                check=True,
                capture_output=True,
                text=True,
            ).stdout
            times[kind].append(json.loads(out.strip().splitlines()[-1])["s_per_step"])
            print(f"run {r + 1} {kind}: {1e3 * times[kind][-1]:.2f} ms/step", file=sys.stderr)
    ratios = [t / b for t, b in zip(times["trainscope"], times["bare"])]
    for kind, ts in times.items():
        print(
            f"{kind}: median {1e3 * statistics.median(ts):.2f} ms/step "
            f"(min {1e3 * min(ts):.2f}, max {1e3 * max(ts):.2f})"
        )
    print(
        f"trainscope / bare: median of pairwise ratios {statistics.median(ratios):.4f} "
        f"(min {min(ratios):.4f}, max {max(ratios):.4f}); ratio of medians "
        f"{statistics.median(times['trainscope']) / statistics.median(times['bare']):.4f}"
    )


if __name__ == "__main__":
    main()
