"""The doctor's gradient-sync rules: one collective per tensor, and DDP whose buckets no
longer overlap backward (torch-free).

A run's sync time is read from its record: the ``comm`` stage of the hand-written
strategies (less any waiting for a slower rank: the straggler rule speaks for that), and
under DDP on a CPU the communication hook's in-flight time per bucket. With a link given
(``trainscope doctor --fit DIR`` or ``--interconnect``), the α–β model of
:mod:`trainscope.comm.predict` predicts what the fix saves for this run's gradients.
"""

from __future__ import annotations

from trainscope import registry
from trainscope.comm.predict import MIB, GradTensors, predict
from trainscope.diagnosis.facts import RunFacts
from trainscope.diagnosis.findings import Finding, half_of_stage, ms, pct, severity_of
from trainscope.diagnosis.straggler_rule import straggler
from trainscope.diagnosis.stragglers import (
    analyze_stragglers,
    read_rank_steps,
    strategy_of,
    warmup_of,
    world_size,
)
from trainscope.errors import ConfigError

COMM_SHARE = 0.20
"""Gradient sync above a fifth of the step (the profile study's advice rule)."""
OVERLAP_BUCKETS = 4
"""Buckets proposed for a DDP run whose gradients fit one: the first three all-reduce
while backward still produces the rest."""


def per_tensor_sync(f: RunFacts) -> Finding | None:
    """One collective per gradient tensor takes a large share of the step."""
    share = _own_sync_share(f)
    strategy = f.view.strategy
    per_tensor = registry.capabilities(strategy).sync == "per_tensor"
    if share is None or share < COMM_SHARE or not per_tensor:
        return None
    problem = (f"Gradient sync is {pct(share)} of the step with one collective per tensor "
               f"(strategy {strategy}; threshold {pct(COMM_SHARE)}).")  # fmt: skip
    modelled = _predicted_sync(f, strategy)
    if modelled is None:
        gain = ("DDP sends the same bytes in 25 MiB buckets and overlaps them with backward; "
                "half the sync time is a cautious estimate (`trainscope doctor --fit DIR` or "
                "--interconnect predicts it with the α–β model)")  # fmt: skip
        return half_of_stage(f, "per-tensor-sync", "comm", "gradient sync per step", problem,
                              gain, {"--strategy": "ddp"})  # fmt: skip
    gain, saved_s, line = modelled
    saved = min(saved_s / f.step_s.median, share)
    return Finding(
        "per-tensor-sync",
        severity_of(saved),
        problem,
        [ms(f.stages["comm"], "gradient sync per step"), ms(f.step_s, "step"), line],
        gain,
        {"--strategy": "ddp"},
        gain_share=saved,
    )


def _own_sync_share(f: RunFacts) -> float | None:
    """The sync's share of the step without the waiting for a slower rank: the least, over
    the ranks, of their median sync time (the rank the others wait for does not wait; the
    straggler rule speaks for the rest). Rank 0's own share where the others left nothing."""
    share = f.share("comm")
    if share is None or world_size(f.summary) < 2:
        return share
    loaded = read_rank_steps(f.path, f.summary, f.step_events)
    if len(loaded.steps) < 2:
        return share
    a = analyze_stragglers(loaded.steps, strategy_of(f.summary), warmup_of(f.summary))
    medians = [w.sync_per_step.median for w in a.waiting.values() if w.sync_per_step.ok]
    if not medians or not f.step_s.ok or not f.step_s.median:
        return share
    return min(share, float(min(medians)) / float(f.step_s.median))


def _predicted_sync(f: RunFacts, strategy: str) -> tuple[str, float, str] | None:
    """The α–β model's per-tensor sync against DDP's exposed sync for this run's gradients
    and ranks, when the doctor was given a link (None: no link, or no gradient sizes)."""
    sizes, world = _gradient_sizes(f), f.view.world_size
    if not f.link_fits or sizes is None or world is None or world < 2:
        return None
    backward = f.stages.get("backward")
    back_s = float(backward.median) if backward is not None and backward.ok else None
    try:
        now, ddp = predict(GradTensors("run", tuple(sizes)), world, f.link_fits,
                           backward_s=back_s, strategies=[strategy, "ddp"])  # fmt: skip
    except ConfigError:
        return None  # the fits lack the op: no prediction rather than a wrong one
    exposed = ddp.exposed_s if ddp.exposed_s is not None else ddp.comm_s
    saved_s = max(now.comm_s - exposed, 0.0)
    line = (f"α–β model ({f.link_where}): {now.collectives} collectives {1e3 * now.comm_s:.3g} "
            f"ms per step; DDP {ddp.collectives} bucket(s), {1e3 * exposed:.3g} ms not hidden "
            "behind backward")  # fmt: skip
    gain = (f"DDP's buckets, overlapped with backward: about {1e3 * saved_s:.3g} ms less per step "
            "by the α–β model for this run's gradients and ranks")  # fmt: skip
    return gain, saved_s, line


def _gradient_sizes(f: RunFacts) -> list[int] | None:
    """Bytes of each gradient tensor (``summary.gradients.tensor_bytes``), or None."""
    sizes = f.view.section("gradients").get("tensor_bytes")
    ok = isinstance(sizes, list) and sizes and all(type(x) is int and x > 0 for x in sizes)
    return sizes if ok else None


def ddp_overlap_lost(f: RunFacts) -> Finding | None:
    """DDP with every gradient in one bucket: its all-reduce starts when backward ends, so
    nothing of it overlaps backward (the hook's in-flight time, on a CPU run).

    Only where a core is free beyond the ranks' threads: with every core computing there
    is nothing to overlap on (on 2 cores, 2 ranks of 1 thread, buckets of a quarter made
    DDP 1.97x slower: docs/doctor.md)."""
    comm, steps = f.view.raw.get("comm"), f.view.steps
    buckets_hook = registry.capabilities(f.view.strategy).sync == "buckets"
    if not buckets_hook or not isinstance(comm, dict) or not f.step_s.ok:
        return None
    buckets, inflight = comm.get("hook_buckets"), comm.get("hook_inflight_s")
    if type(buckets) is not int or type(steps) is not int or steps < 1 or buckets > 1.5 * steps:
        return None  # several buckets per step: DDP overlaps them as designed
    if not isinstance(inflight, (int, float)) or isinstance(inflight, bool) or inflight < 0:
        return None
    share = inflight / steps / float(f.step_s.median)
    sizes = _gradient_sizes(f)
    if share < COMM_SHARE or sizes is None or not f.free_cores():
        return None  # no core free for gloo to reduce on while backward computes
    if straggler(f) is not None:
        return None  # waiting for a slow rank is in the in-flight time too: not this
    cap = max(round(sum(sizes) / OVERLAP_BUCKETS / MIB, 3), 0.001)
    return Finding(
        "ddp-overlap-lost",
        severity_of(share / 2),
        f"DDP sends all {len(sizes)} gradients in one bucket after backward: its all-reduce "
        f"({pct(share)} of the step in flight; threshold {pct(COMM_SHARE)}) overlaps nothing.",
        [
            f"{buckets} bucket(s) over {steps} steps, in flight {1e3 * inflight / steps:.3g} ms "
            "per step (all-reduce launch to completion, host clock)",
            ms(f.step_s, "step"),
        ],
        f"buckets of {cap:g} MiB (about {OVERLAP_BUCKETS}) let the first ones all-reduce while "
        "backward runs; half the in-flight time is a cautious estimate (smaller buckets pay "
        "more latencies: --apply measures it)",
        {"--bucket-mb": f"{cap:g}"},
        gain_share=share / 2,
    )
