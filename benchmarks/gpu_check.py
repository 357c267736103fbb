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

Every figure is a median with its spread and n (``trainscope.util.spread``: IQR for n >= 5,
min-max below); warm-up steps are excluded everywhere and each section says how many.

    python benchmarks/gpu_check.py --json gpu_check.json
    python benchmarks/gpu_check.py --device cpu --quick     # the whole logic on CPU, tiny

Without CUDA (and without ``--device cpu``) it prints one line and exits 0.
"""

from __future__ import annotations

import argparse
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
from pathlib import Path
from typing import Any

from trainscope.util.spread import differ, spread

# The pure logic lives beside this script (tested without a GPU); the script's own folder
# is where it is found, whether run as a script or loaded by path.
sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_check_logic import (  # noqa: E402
    GOAL_STAGES,
    NO_CUDA,
    PRECISIONS,
    REPO,
    STAGE_GOAL_PCT,
    STAGE_RANGE,
    ab_summary,
    attribute,
    bounded_batch_search,
    compare_stages,
    device_points,
    host_points,
    per_stage,
    report,
    rotations,
    spread_dict,
    stage_windows,
)

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
    from trainscope.techniques.precision import make_precision
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
    from trainscope.train.loop import EpochOptions, train_epoch

    wl, loader, state = gpt_setup(opts, sz, device)
    timer = AnnotatedTimer(make_stage_timer(device, "auto"))
    # Warm-up: allocator growth, cuBLAS/cuDNN handles and autotuning, not profiled.
    train_epoch(state, loader, timer, EpochOptions(max_steps=sz["profile_warmup"]))
    records: list[dict[str, Any]] = []
    cuda = device.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    skip = sz["profile_skip"]  # the profiler's own start-up slows the first steps it sees
    with profile(activities=activities) as prof:
        options = EpochOptions(max_steps=skip + sz["profile_steps"], on_steps=records.extend)
        train_epoch(state, loader, timer, options)
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
    from trainscope.train.loop import EpochOptions, train_epoch
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
        options = EpochOptions(log_every=log_every, on_steps=on_steps)
        train_epoch(state, Block(stream, k), timer, options)

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
    from trainscope.profiling.peak import mfu
    from trainscope.techniques.precision import make_precision
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

    from trainscope.techniques.precision import make_precision
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
