"""What a step's gradient communication costs under each strategy, from the α–β model
(:mod:`trainscope.comm.cost_model`; torch-free).

The input is the model's gradient tensors in registration order (bytes each) and, for
FSDP, its units (the blocks it shards one by one, and the root). For each strategy:

- **gather-scatter**: per tensor of g bytes, a gather to rank 0 and a scatter back (flat:
  rank 0 exchanges g with each other rank in turn, so it moves 2(n-1)·g);
- **allreduce**: one ring all_reduce per tensor: its latency is paid once per tensor;
- **allreduce, bucketed**: the tensors flattened into buckets of at most ``bucket_mb``
  (closed when full, in reverse registration order as DDP does), one all_reduce each;
  the copies into and out of the buckets are not modelled;
- **ddp**: DDP's buckets (reverse registration order, closed when a tensor takes them to
  the cap, as ``torch.distributed._compute_bucket_assignment_by_size`` does; with DDP's
  default ``bucket_cap_mb`` the first bucket is 1 MiB and the rest 25 MiB, with a
  ``ddp_bucket_mb`` given every bucket has that cap, as torch 2.13 builds them), each
  all-reduced when backward has produced it. With backward's time B given, the gradients
  are taken to become ready at a uniform rate (in bytes) through backward and the buckets
  go out one at a time: the *exposed* part is what is left after backward ends;
- **fsdp** (FULL_SHARD, one unit per block plus the root): every unit's parameters are
  all-gathered in forward and again in backward, its gradients reduce-scattered:
  3(n-1)/n of the model per rank where DDP moves 2(n-1)/n. FSDP prefetches to overlap
  this with compute; that overlap is not modelled (exposed <= comm).

Times are for ``n`` ranks with the op's fitted (or given) α and β; the bytes a step sends
are those of the busiest rank.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from trainscope import registry
from trainscope.comm.cost_model import STAND_IN, Fit, fit_for
from trainscope.errors import ConfigError

MIB = 1 << 20
DDP_BUCKET_MB = 25.0
DDP_FIRST_BUCKET_MB = 1.0


@dataclass(frozen=True)
class GradTensors:
    """A model's gradients as communication sees them."""

    name: str
    sizes: tuple[int, ...]
    """Bytes of each trainable parameter's gradient, in registration order."""
    units: tuple[int, ...] = ()
    """FSDP units' bytes in forward order (root first, then each block); () = one unit."""

    @property
    def total(self) -> int:
        """All gradient bytes."""
        return sum(self.sizes)


@dataclass
class Prediction:
    """One strategy's communication per optimizer step."""

    strategy: str
    collectives: int
    """Collective calls per step."""
    bytes_sent: float
    """Bytes the busiest rank sends per step."""
    comm_s: float
    """Time of all the step's communication, back to back."""
    exposed_s: float | None
    """The part not hidden behind compute (None: unknown without backward's time)."""
    how: str
    buckets: list[int] = field(default_factory=list)
    """Bucket sizes in bytes (bucketed strategies)."""

    def to_dict(self) -> dict[str, Any]:
        """Plain data for study.json / --json."""
        return {
            "strategy": self.strategy,
            "collectives": self.collectives,
            "bytes_sent": self.bytes_sent,
            "comm_s": self.comm_s,
            "exposed_s": self.exposed_s,
            "how": self.how,
            "buckets": len(self.buckets),
        }


def buckets(sizes: Sequence[int], caps_bytes: Sequence[float]) -> list[int]:
    """Group tensor sizes (in the order given) into buckets: a bucket closes when a tensor
    takes it to its cap or above; caps are used in turn, the last one repeating (DDP's
    rule: ``[1 MiB, 25 MiB]``). Returns each bucket's bytes."""
    if not caps_bytes or any(c <= 0 for c in caps_bytes):
        raise ValueError("bucket caps must be positive")
    out: list[int] = []
    current = 0
    for s in sizes:
        current += s
        cap = caps_bytes[min(len(out), len(caps_bytes) - 1)]
        if current >= cap:
            out.append(current)
            current = 0
    if current:
        out.append(current)
    return out


def _time(fits: dict[str, Fit], op: str, nbytes: float, n: int) -> float:
    fit = fit_for(fits, op)
    if fit is None:
        stand_in = STAND_IN.get(op)
        if stand_in:
            raise ConfigError(
                f"the cost model has no fit for {stand_in} (it stands in for {op}, which the "
                f"sweep does not time): include {stand_in} in the sweep's --ops"
            )
        raise ConfigError(f"the cost model has no fit for {op}: include it in the sweep's --ops")
    return fit.time(op, nbytes, n)


def _ddp_exposed(bucket_sizes: list[int], times: list[float], backward_s: float) -> float:
    """Backward produces the gradients at a uniform rate; a bucket goes out when its last
    gradient is ready and the previous bucket is done. What runs past backward's end."""
    total = sum(bucket_sizes)
    ready = end = 0.0
    done = 0
    for size, t in zip(bucket_sizes, times):
        done += size
        ready = backward_s * done / total
        end = max(end, ready) + t
    return max(0.0, end - backward_s)


@dataclass(frozen=True)
class Step:
    """What a prediction is made for: one step's gradients on ``n`` ranks under fits."""

    grads: GradTensors
    n: int
    fits: dict[str, Fit]
    bucket_mb: float = DDP_BUCKET_MB
    """The hand-bucketed allreduce's cap."""
    ddp_bucket_mb: float | None = None
    """DDP's ``bucket_cap_mb`` (None: DDP's default, 1 MiB first then 25 MiB)."""
    backward_s: float | None = None

    def time(self, op: str, nbytes: float) -> float:
        """Seconds one ``op`` of ``nbytes`` takes on the step's ranks."""
        return _time(self.fits, op, nbytes, self.n)


def predict_gather_scatter(step: Step) -> Prediction:
    """Per tensor: a gather to rank 0, a scatter back (flat)."""
    g, n = step.grads.total, step.n
    t = sum(step.time("gather", s) + step.time("scatter", s) for s in step.grads.sizes)
    return Prediction(
        "gather-scatter", 2 * len(step.grads.sizes), (n - 1) * g, t, t,
        "per tensor: gather to rank 0, scatter back; rank 0 sends (n-1)x the "
        "gradients and receives as much",
    )  # fmt: skip


def predict_allreduce(step: Step) -> Prediction:
    """One ring all_reduce per tensor after backward."""
    sizes, f = step.grads.sizes, (step.n - 1) / step.n
    t = sum(step.time("all_reduce", s) for s in sizes)
    return Prediction(
        "allreduce", len(sizes), 2 * f * step.grads.total, t, t,
        f"one ring all_reduce per tensor ({len(sizes)} latencies) after backward",
    )  # fmt: skip


def predict_allreduce_bucketed(step: Step) -> Prediction:
    """The tensors flattened into buckets of at most ``bucket_mb``, one all_reduce each."""
    bs = buckets(list(reversed(step.grads.sizes)), [step.bucket_mb * MIB])
    t = sum(step.time("all_reduce", b) for b in bs)
    return Prediction(
        "allreduce-bucketed", len(bs), 2 * (step.n - 1) / step.n * step.grads.total, t, t,
        f"flattened into {len(bs)} bucket(s) of <= {step.bucket_mb:g} MiB after "
        "backward, one all_reduce each",
        bs,
    )  # fmt: skip


def predict_ddp(step: Step) -> Prediction:
    """DDP's buckets, each all-reduced when backward has produced it."""
    caps = (
        [DDP_FIRST_BUCKET_MB, DDP_BUCKET_MB] if step.ddp_bucket_mb is None else [step.ddp_bucket_mb]
    )
    bs = buckets(list(reversed(step.grads.sizes)), [c * MIB for c in caps])
    times = [step.time("all_reduce", b) for b in bs]
    backward = step.backward_s
    exposed = None if backward is None else _ddp_exposed(bs, times, backward)
    caps_text = f"{caps[0]:g} MiB first, then {caps[1]:g} MiB" if len(caps) == 2 else (
        f"<= {caps[0]:g} MiB")  # fmt: skip
    return Prediction(
        "ddp", len(bs), 2 * (step.n - 1) / step.n * step.grads.total, sum(times), exposed,
        f"{len(bs)} bucket(s) ({caps_text}), all-reduced during backward"
        + ("" if backward is not None else "; exposed part needs backward's time"),
        bs,
    )  # fmt: skip


def predict_fsdp(step: Step) -> Prediction:
    """Every unit all-gathered in forward and backward, its gradients reduce-scattered."""
    units = list(step.grads.units) or [step.grads.total]
    t = sum(2 * step.time("all_gather", u) + step.time("reduce_scatter", u) for u in units)
    return Prediction(
        "fsdp", 3 * len(units), 3 * (step.n - 1) / step.n * step.grads.total, t, None,
        f"{len(units)} unit(s): all_gather in forward and backward, "
        "reduce_scatter of gradients; prefetch overlap not modelled",
    )  # fmt: skip


def modelled() -> tuple[str, ...]:
    """The strategies-study configurations the α–β model predicts (registry order)."""
    return tuple(n for n, (_, v) in registry.study_variants().items() if v.predict)


def predict(
    grads: GradTensors,
    n: int,
    fits: dict[str, Fit],
    *,
    bucket_mb: float = DDP_BUCKET_MB,
    ddp_bucket_mb: float | None = None,
    backward_s: float | None = None,
    strategies: Sequence[str] | None = None,
) -> list[Prediction]:
    """The predicted communication of each strategy configuration (default: every one
    with a model, :func:`modelled`) for one step on ``n`` ranks, each by the predictor its
    registry entry names. A configuration without a model, or whose op has no fit,
    raises ConfigError."""
    if n < 2:
        raise ConfigError(f"communication needs at least 2 ranks, not {n}")
    if not grads.sizes:
        raise ConfigError(f"{grads.name} has no trainable parameters: nothing to communicate")
    step = Step(grads, n, fits, bucket_mb, ddp_bucket_mb, backward_s)
    variants = registry.study_variants()
    out: list[Prediction] = []
    for name in modelled() if strategies is None else strategies:
        target = variants[name][1].predict if name in variants else None
        if target is None:
            raise ConfigError(
                f"no prediction for strategy {name!r} (it has no communication model); "
                f"known: {', '.join(modelled())}"
            )
        out.append(registry.load(target)(step))
    return out
