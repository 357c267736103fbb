"""The doctor's rules: each reads recorded figures only, states its threshold, and returns
a :class:`~trainscope.diagnosis.findings.Finding` or None (torch-free).

Thresholds and where they come from are in docs/doctor.md. A rule fires only on what the
record shows; where a gain cannot be estimated from the record, the finding says so
instead of inventing one.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable

from trainscope.diagnosis.facts import RunFacts
from trainscope.diagnosis.findings import (
    SEVERITIES,
    Finding,
    figure,
    half_of_stage,
    ms,
    pct,
    severity_of,
)
from trainscope.diagnosis.load_rule import measured_under_load
from trainscope.diagnosis.memory_rules import activations_near_limit, optimizer_states_near_limit
from trainscope.diagnosis.straggler_rule import straggler
from trainscope.diagnosis.sync_rules import ddp_overlap_lost, per_tensor_sync
from trainscope.util.spread import Spread, spread

DATA_WAIT_SHARE = 0.30
"""Data wait above this share of the step: the model waits for batches (as the profile
study's advice, and TensorBoard's profiler plugin's 5% of the step is for GPUs that are
far faster than the input pipeline; a CPU run waits a little at any worker count)."""
MAX_WAITING_WORKERS = 8
"""Workers proposed at most for loading that waits rather than computes (each is a
process with its own memory)."""
H2D_SHARE = 0.20
EVALUATION_WALL_SHARE = 0.30
CHECKPOINT_WALL_SHARE = 0.10
SETUP_WALL_SHARE = 0.50
COMPILE_WALL_SHARE = 0.25
"""A compile that is a quarter of the run: a run this short rarely wins it back."""
OVERHEAD_SHARE = 0.25
"""The optimizer step and the gradient sync (paid once per step, whatever the batch) over
a quarter of the step: a larger batch would pay them less often per sample."""
SMALL_BATCH = 16
"""Batches of at most 16 samples: where fixed per-step costs (these, and every kernel's
launch) outweigh the arithmetic; larger batches are a choice this rule leaves alone."""
OPTIMIZER_SHARE = 0.25
"""The optimizer step over a quarter of the step: its per-parameter loop (torch's default
on a CPU) launches a handful of small kernels per tensor; the multi-tensor (foreach) and
fused implementations do the same arithmetic in a few large ones."""
FLAT_LOSS_DROP = 0.02
"""The training loss moved by less than 2% from the first steps to the last."""
FLAT_LOSS_MIN_STEPS = 100
GPU_UTIL_LOW = 50.0
"""GPU utilisation (NVML's share of time a kernel ran) under half: TensorBoard's profiler
plugin's rule for a larger batch."""
GPU_MIN_SAMPLES = 3
USUAL_LR = {"sgd": 0.05, "adam": 1e-3, "adamw": 1e-3}
"""Learning rates these optimizers commonly train small models at (trainscope's recipes;
Adam's paper default): a flat loss at under a tenth of it gets it, not just 10x more."""

NON_FINITE_ERROR = re.compile(r"non-finite|\b(nan|inf)\b", re.IGNORECASE)
"""How a run's error says that its loss stopped being a number."""

Rule = Callable[[RunFacts], Finding | None]
SEVERITY_ORDER = list(reversed(SEVERITIES))
"""minor < moderate < major: a fix that changes numerics is at most moderate."""


def _loading_waits(f: RunFacts, share: float) -> bool:
    """Whether the loading waits (a disk, a network, a slow service) rather than computes:
    the run's process used well under its threads' cores while data wait was ``share`` of
    the step (loading that computes keeps the main thread busy through the wait)."""
    cpu = f.view.cpu
    own, threads = cpu.get("own_cores"), cpu.get("threads")
    if not isinstance(own, (int, float)) or type(threads) is not int or threads < 1:
        return False
    return own < threads * (1 - share / 2)


def _loader_fix(f: RunFacts, wait_s: float, step_s: float) -> tuple[dict, str, float]:
    """More DataLoader workers (the fix, how, the step after): each worker loads a batch
    while the model computes one, so ceil(wait / compute) of them keep up; loading that
    computes gets no more than the cores the run's threads leave free."""
    now = f.view.count("num_workers")
    now = now if now is not None and now >= 0 else 0
    compute = max(step_s - wait_s, 1e-9)
    waits = _loading_waits(f, wait_s / step_s)
    if now:  # the wait is what is left beyond the workers: removing it is the bound
        n, after = 2 * now, step_s - wait_s
    else:  # the main process loads: the wait is one batch's load time
        cap = MAX_WAITING_WORKERS if waits else f.free_cores() or 1
        n = max(1, min(math.ceil(wait_s / compute), cap))
        after = max(compute, wait_s / n)
    kind = "waits (the process used few cores)" if waits else "computes"
    how = (f"{n} DataLoader worker(s) (now {now}; the loading {kind}; each worker loads a "
           "batch while the model computes one; --num-workers auto measures the loader "
           "alone)")  # fmt: skip
    return {"--num-workers": n}, how, after


def input_bound(f: RunFacts) -> Finding | None:
    """Data wait is a large share of the step: more workers, or lighter augmentation."""
    share = f.share("data_wait")
    if share is None or share < DATA_WAIT_SHARE:
        return None
    wait, step = f.stages["data_wait"], f.step_s
    if f.setting("data", "loader", "torch") == "fast":
        fix, how = {"--set": "workload.augment=false"}, "lighter augmentation"
        after = step.median - wait.median
    else:
        fix, how, after = _loader_fix(f, float(wait.median), float(step.median))
    saved = 1 - after / step.median
    return Finding(
        "input-bound",
        severity_of(saved),
        f"The model waits for batches: data wait is {pct(share)} of the step "
        f"(threshold {pct(DATA_WAIT_SHARE)}).",
        [ms(wait, "data wait per step"), ms(step, "step")],
        f"with {how}, the step would drop from {1e3 * step.median:.3g} to about "
        f"{1e3 * after:.3g} ms (the slower of compute and loading: a bound, as workers "
        "also take cores)",
        fix,
        gain_share=saved,
    )


def h2d_unpinned(f: RunFacts) -> Finding | None:
    """Copies to the GPU are a large share of the step and memory is not pinned."""
    share = f.share("h2d")
    on_gpu = str(f.summary.get("device", "")).startswith("cuda")
    if not on_gpu or share is None or share < H2D_SHARE or f.setting("data", "pin_memory"):
        return None
    problem = (f"Copies to the GPU are {pct(share)} of the step from pageable memory "
               f"(threshold {pct(H2D_SHARE)}).")  # fmt: skip
    gain = ("pinned memory lets the copy run asynchronously; about half the copy time is "
            "the usual saving (an estimate, not measured here)")  # fmt: skip
    return half_of_stage(f, "h2d-unpinned", "h2d", "host-to-device per step", problem, gain,
                          {"--pin-memory": True})  # fmt: skip


def _wall_heavy(
    f: RunFacts, rule: str, stage: str, what: str, kept: float, change: str, fix: dict
) -> Finding:
    """A stage outside the steps that takes a large share of the run: doing it less often
    keeps ``kept`` of its time."""
    share = f.wall_share(stage) or 0.0
    saved = share * (1 - kept)
    return Finding(
        rule,
        severity_of(saved),
        f"{what} take {pct(share)} of the run's wall time.",
        [f"{what.lower()} {f.totals_s[stage]:.3g} s of {f.wall_s:.3g} s wall time"],
        f"{change}: about {pct(saved)} of the run",
        fix,
        gain_share=saved,
        measure="wall",
    )


def evaluation_heavy(f: RunFacts) -> Finding | None:
    """Evaluation takes a large share of the run."""
    share = f.wall_share("evaluation")
    if share is None or share < EVALUATION_WALL_SHARE:
        return None
    every = f.setting("train", "eval_every", 1)
    every = every if isinstance(every, int) and every > 0 else 1
    change = f"evaluating every {2 * every} epochs instead of every {every} halves them"
    return _wall_heavy(f, "evaluation-heavy", "evaluation", "Evaluations", 0.5, change,
                       {"--eval-every": 2 * every})  # fmt: skip


def checkpoint_heavy(f: RunFacts) -> Finding | None:
    """Checkpoint writes take a large share of the run."""
    share = f.wall_share("checkpoint")
    every = f.setting("train", "checkpoint_every", 0)
    if share is None or share < CHECKPOINT_WALL_SHARE or not isinstance(every, int) or every < 1:
        return None
    change = (f"a checkpoint every {4 * every} steps instead of {every} writes a quarter as "
              "often (more steps lost to a crash)")  # fmt: skip
    return _wall_heavy(f, "checkpoint-heavy", "checkpoint", "Checkpoint writes", 0.25, change,
                       {"--checkpoint-every": 4 * every})  # fmt: skip


def overhead_bound(f: RunFacts) -> Finding | None:
    """A small batch: the costs paid once per step, whatever its size (the optimizer step,
    the gradient sync), are a large share of it."""
    shares = [s for s in (f.share("optimizer"), f.share("comm")) if s is not None]
    batch = f.view.local_batch_size
    if not shares or batch is None or batch > SMALL_BATCH:
        return None
    per_step = sum(shares)
    if per_step < OVERHEAD_SHARE:
        return None
    named = [s for s in ("optimizer", "comm") if s in f.stages]
    return Finding(
        "overhead-bound",
        min(severity_of(per_step / 2), "moderate", key=SEVERITY_ORDER.index),
        f"At batch {batch}, costs paid once per step ({' and '.join(named)}) are "
        f"{pct(per_step)} of it (threshold {pct(OVERHEAD_SHARE)}).",
        [*(ms(f.stages[s], s) for s in named), ms(f.step_s, "step")],
        f"batch {2 * batch} pays them half as often per sample: up to {pct(per_step / 2)} "
        "of the time per sample",
        {"--batch-size": 2 * batch},
        gain_share=per_step / 2,
        numerics=True,
        notes=["a larger batch changes the optimisation: compare the loss at equal samples"],
        measure="sample",
    )


def optimizer_bound(f: RunFacts) -> Finding | None:
    """The optimizer step is a large share of the step and runs tensor by tensor."""
    share = f.share("optimizer")
    impl = f.setting("train", "optimizer_impl", "auto")
    if share is None or share < OPTIMIZER_SHARE or impl not in ("auto", "for-loop"):
        return None
    optimizer = f.setting("train", "optimizer", "sgd")
    problem = (f"The optimizer step ({optimizer}, implementation {impl}) is {pct(share)} of "
               f"the step (threshold {pct(OPTIMIZER_SHARE)}).")  # fmt: skip
    gain = ("the fused implementation updates every tensor in one kernel per operation; "
            "half the optimizer time is a cautious estimate (not measured here: --apply "
            "measures it)")  # fmt: skip
    return half_of_stage(f, "optimizer-bound", "optimizer", "optimizer step", problem, gain,
                          {"--optimizer-impl": "fused"})  # fmt: skip


def _gpu_utilisation(f: RunFacts) -> Spread | None:
    """The run's GPU's utilisation samples (percent, NVML), or None without a GPU."""
    index = f.cuda_index()
    if index is None:
        return None
    utils = [
        g["util_percent"]
        for sample in f.system
        for g in (sample.get("gpus") or [] if isinstance(sample, dict) else [])
        if isinstance(g, dict) and g.get("index") == index
        and isinstance(g.get("util_percent"), (int, float))
    ]  # fmt: skip
    return spread(utils) if len(utils) >= GPU_MIN_SAMPLES else None


def gpu_underused(f: RunFacts) -> Finding | None:
    """The GPU is idle much of the time: a larger batch gives each launch more work."""
    util, batch = _gpu_utilisation(f), f.view.local_batch_size
    if util is None or not util.ok or util.median >= GPU_UTIL_LOW or batch is None:
        return None
    return Finding(
        "gpu-underused",
        "moderate",
        f"The GPU was busy {util.median:.0f}% of the time (threshold {GPU_UTIL_LOW:.0f}%): "
        "it waits for the host between kernels.",
        [figure("GPU utilisation", util, "%"), ms(f.step_s, "step")],
        f"batch {2 * batch} gives each kernel twice the work for about the same launches; "
        "not estimated from this record (--apply measures it per sample)",
        {"--batch-size": 2 * batch},
        numerics=True,
        notes=["a larger batch changes the optimisation: compare the loss at equal samples",
               "the samples cover the whole run, evaluation and setup included"],
        measure="sample",
    )  # fmt: skip


def precision_for_device(f: RunFacts) -> Finding | None:
    """bf16/fp16 on a CPU, or fp32 on a GPU."""
    device, precision = f.view.device, f.view.text("precision")
    units = f.env.get("cpu_low_precision_units")
    native = isinstance(units, dict) and units.get(precision) is True
    if device == "cpu" and precision in ("bf16", "fp16") and not native:
        fix, why = (
            {"--precision": "fp32"},
            f"a CPU without {precision} units (none in its flags, or not recorded) runs "
            "autocast slower than fp32",
        )
    elif device.startswith("cuda") and precision == "fp32":
        fix, why = {"--precision": "bf16"}, "tensor cores run bf16 matmuls several times faster"
    else:
        return None
    return Finding(
        "precision-for-device",
        "moderate",
        f"Precision {precision} on {device}: {why}.",
        [ms(f.step_s, "step")],
        "not estimated from this record: `trainscope study precision` measures it",
        fix,
        numerics=True,
    )


def diverged(f: RunFacts) -> Finding | None:
    """The loss became non-finite."""
    bad = [(s, loss) for s, loss in f.losses if not math.isfinite(loss)]
    error = f.view.error
    if not bad and not NON_FINITE_ERROR.search(error):
        return None
    lr = f.view.number("lr")
    new_lr = f"{lr / 10:g}" if lr is not None and lr > 0 else None
    fix: dict[str, object] = {"--grad-clip": 1.0}
    if new_lr:
        fix["--lr"] = new_lr
    where = f"at step {bad[0][0]}" if bad else "(the step is in the run's error)"
    return Finding(
        "diverged",
        "major",
        f"The loss became non-finite {where}.",
        [f"error: {error}" if error else f"{len(bad)} step(s) with a non-finite loss"],
        "a run that diverges learns nothing after that step",
        fix,
        numerics=True,
    )


def loss_flat(f: RunFacts) -> Finding | None:
    """The training loss barely moved over many steps: the learning rate is far too low."""
    finite = [loss for _, loss in f.losses if math.isfinite(loss)]
    if len(finite) < FLAT_LOSS_MIN_STEPS or f.summary.get("status") != "completed":
        return None
    k = max(3, len(finite) // 10)
    first, last = sorted(finite[:k])[k // 2], sorted(finite[-k:])[k // 2]
    if not first or abs(first - last) / abs(first) >= FLAT_LOSS_DROP:
        return None
    lr, optimizer = f.summary.get("lr"), f.setting("train", "optimizer", "sgd")
    usual = USUAL_LR.get(optimizer)
    evidence = [f"median loss of the first {k} steps {first:.4g}, of the last {k} {last:.4g}"]
    fix: dict[str, object] = {}
    gain = "a higher learning rate lets it learn (check the loss: too high diverges)"
    if isinstance(lr, (int, float)) and lr > 0:
        far_below = usual is not None and lr < usual / 10
        fix = {"--lr": f"{usual if far_below else lr * 10:g}"}
        if far_below:
            evidence.append(f"lr {lr:g}, under a tenth of {optimizer}'s usual {usual:g}")
            gain = f"{optimizer}'s usual learning rate lets it learn (check the loss)"
        else:
            gain = "a learning rate ten times higher lets it learn (check the loss)"
    return Finding(
        "loss-flat",
        "major",
        f"The training loss moved by {100 * abs(first - last) / abs(first):.1f}% over "
        f"{len(finite)} steps (threshold {pct(FLAT_LOSS_DROP)}).",
        evidence,
        gain,
        fix,
        numerics=True,
    )


def setup_heavy(f: RunFacts) -> Finding | None:
    """Start-up dominates a short run: what the loop costs is not visible yet."""
    share = f.wall_share("setup")
    if share is None or share < SETUP_WALL_SHARE:
        return None
    return Finding(
        "short-run",
        "minor",
        f"Setup is {pct(share)} of the run's wall time: the run is too short for its loop "
        "to matter.",
        [figure("setup", spread([f.totals_s["setup"]]))],
        "none from the loop; profile a longer run (more --epochs) before optimising it",
        {},
    )


def oversubscribed(f: RunFacts) -> Finding | None:
    """More threads and workers than cores: every thread waits for a core."""
    cpu = f.view.cpu
    if cpu.get("oversubscribed") is not True:
        return None
    demand, cores = cpu.get("demand_cores"), cpu.get("cores")
    if not isinstance(demand, (int, float)) or not isinstance(cores, int) or demand <= cores:
        return None  # busy because of other processes: not this run's setting to fix
    busy = cpu.get("busy_cores")
    evidence = [f"threads and workers asked for {demand} cores on {cores}"]
    if isinstance(busy, (int, float)):
        evidence.append(f"cores busy during the run: {busy:.2g} (other processes included)")
    return Finding(
        "oversubscribed",
        "major",
        f"The run asked for {demand} cores on a machine with {cores}: torch's threads then "
        "wait for each other.",
        evidence,
        "not estimated from this record; on a busy 2-core machine oversubscribed intra-op "
        "threads have run 10-40x slower (README, Threads)",
        {"--threads": "auto"},
    )


def compile_recompiles(f: RunFacts) -> Finding | None:
    """torch.compile compiled new graphs during training (inside the step times)."""
    compiled = f.view.section("compile")
    later = compiled.get("recompiled_later")
    if not isinstance(later, int) or isinstance(later, bool) or later < 1:
        return None
    partial = not f.setting("data", "drop_last", False)
    return Finding(
        "compile-recompiles",
        "moderate",
        f"torch.compile compiled {later} graph(s) after its warm-up, inside the training "
        "steps: a new input shape (often the epoch's last, smaller batch) recompiles.",
        [f"graphs at the warm-up {compiled.get('graphs')}, compiled later {later}"],
        "not estimated from this record (each recompilation is one slow step); --apply measures it",
        {"--drop-last": True} if partial else {},
    )


def compile_unpaid(f: RunFacts) -> Finding | None:
    """The compile took a large share of a run too short to pay it back."""
    share = f.wall_share("compile")
    if share is None or share < COMPILE_WALL_SHARE:
        return None
    return Finding(
        "compile-unpaid",
        severity_of(share),
        f"Compiling took {pct(share)} of the run's wall time (threshold "
        f"{pct(COMPILE_WALL_SHARE)}): the run is too short for faster steps to pay it back.",
        [
            f"compile {f.totals_s['compile']:.3g} s of {f.wall_s:.3g} s wall time",
            ms(f.step_s, "compiled step"),
        ],  # fmt: skip
        f"without --compile the run saves the compile ({pct(share)} of it, an upper bound: "
        "its steps may be slower eagerly)",
        {"--set": "runtime.compile=false"},
        gain_share=share,
        measure="wall",
    )


RULES: dict[str, Rule] = {
    "measured-under-load": measured_under_load,
    "input-bound": input_bound,
    "h2d-unpinned": h2d_unpinned,
    "evaluation-heavy": evaluation_heavy,
    "checkpoint-heavy": checkpoint_heavy,
    "per-tensor-sync": per_tensor_sync,
    "straggler": straggler,
    "ddp-overlap-lost": ddp_overlap_lost,
    "overhead-bound": overhead_bound,
    "optimizer-bound": optimizer_bound,
    "activations-near-limit": activations_near_limit,
    "optimizer-states-near-limit": optimizer_states_near_limit,
    "precision-for-device": precision_for_device,
    "gpu-underused": gpu_underused,
    "oversubscribed": oversubscribed,
    "diverged": diverged,
    "loss-flat": loss_flat,
    "short-run": setup_heavy,
    "compile-recompiles": compile_recompiles,
    "compile-unpaid": compile_unpaid,
}
"""Every built-in rule, by name (a rule of one's own joins through
:func:`trainscope.registry.register_rule`)."""
