"""What a step's gradient communication costs under each strategy, from the α–β model
(:mod:`trainscope.collectives.model`; torch-free).

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

from trainscope.collectives.model import STAND_IN, Fit, fit_for
from trainscope.errors import ConfigError

MIB = 1 << 20
DDP_BUCKET_MB = 25.0
DDP_FIRST_BUCKET_MB = 1.0
STRATEGIES = ("gather-scatter", "allreduce", "allreduce-bucketed", "ddp", "fsdp")


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


def predict(
    grads: GradTensors,
    n: int,
    fits: dict[str, Fit],
    *,
    bucket_mb: float = DDP_BUCKET_MB,
    ddp_bucket_mb: float | None = None,
    backward_s: float | None = None,
    strategies: Sequence[str] = STRATEGIES,
) -> list[Prediction]:
    """The predicted communication of each strategy for one step on ``n`` ranks:
    ``bucket_mb`` is the hand-bucketed allreduce's cap, ``ddp_bucket_mb`` DDP's
    ``bucket_cap_mb`` (None: DDP's default, a 1 MiB first bucket then 25 MiB). A strategy
    whose op has no fit raises ConfigError."""
    if n < 2:
        raise ConfigError(f"communication needs at least 2 ranks, not {n}")
    if not grads.sizes:
        raise ConfigError(f"{grads.name} has no trainable parameters: nothing to communicate")
    g, f = grads.total, (n - 1) / n
    rev = list(reversed(grads.sizes))
    out: list[Prediction] = []
    for name in strategies:
        if name == "gather-scatter":
            t = sum(_time(fits, "gather", s, n) + _time(fits, "scatter", s, n) for s in grads.sizes)
            out.append(
                Prediction(
                    name,
                    2 * len(grads.sizes),
                    (n - 1) * g,
                    t,
                    t,
                    "per tensor: gather to rank 0, scatter back; rank 0 sends (n-1)x the "
                    "gradients and receives as much",
                )
            )
        elif name == "allreduce":
            t = sum(_time(fits, "all_reduce", s, n) for s in grads.sizes)
            out.append(
                Prediction(
                    name,
                    len(grads.sizes),
                    2 * f * g,
                    t,
                    t,
                    f"one ring all_reduce per tensor ({len(grads.sizes)} latencies) after backward",
                )
            )
        elif name == "allreduce-bucketed":
            bs = buckets(rev, [bucket_mb * MIB])
            t = sum(_time(fits, "all_reduce", b, n) for b in bs)
            out.append(
                Prediction(
                    name,
                    len(bs),
                    2 * f * g,
                    t,
                    t,
                    f"flattened into {len(bs)} bucket(s) of <= {bucket_mb:g} MiB after "
                    "backward, one all_reduce each",
                    bs,
                )
            )
        elif name == "ddp":
            caps = (
                [DDP_FIRST_BUCKET_MB, DDP_BUCKET_MB] if ddp_bucket_mb is None else [ddp_bucket_mb]
            )
            bs = buckets(rev, [c * MIB for c in caps])
            times = [_time(fits, "all_reduce", b, n) for b in bs]
            exposed = None if backward_s is None else _ddp_exposed(bs, times, backward_s)
            out.append(
                Prediction(
                    name,
                    len(bs),
                    2 * f * g,
                    sum(times),
                    exposed,
                    f"{len(bs)} bucket(s) ("
                    + (
                        f"{caps[0]:g} MiB first, then {caps[1]:g} MiB"
                        if len(caps) == 2
                        else f"<= {caps[0]:g} MiB"
                    )
                    + "), all-reduced during backward"
                    + ("" if backward_s is not None else "; exposed part needs backward's time"),
                    bs,
                )
            )
        elif name == "fsdp":
            units = list(grads.units) or [g]
            t = sum(
                2 * _time(fits, "all_gather", u, n) + _time(fits, "reduce_scatter", u, n)
                for u in units
            )
            out.append(
                Prediction(
                    name,
                    3 * len(units),
                    3 * f * g,
                    t,
                    None,
                    f"{len(units)} unit(s): all_gather in forward and backward, "
                    "reduce_scatter of gradients; prefetch overlap not modelled",
                )
            )
        else:
            raise ConfigError(
                f"no prediction for strategy {name!r}; known: {', '.join(STRATEGIES)}"
            )
    return out
