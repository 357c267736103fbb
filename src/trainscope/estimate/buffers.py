"""Stated allowances: memory a step needs beyond the tensors the memory meter counts.

None of these is measured by trainscope's meter (it counts parameters, gradients,
optimizer states and saved activations); each is an allowance, stated with its basis, so
that the estimate's total is a per-device figure to plan with rather than a lower bound:

- **communication** (per sharding; none at world size 1, where one process exchanges
  nothing and DDP or FSDP would allocate no buffers):
  - DDP: gradients are copied into flat buckets for the all-reduce, and trainscope's DDP
    (:mod:`trainscope.strategies.ddp`) leaves ``gradient_as_bucket_view`` off, so the
    buckets are a second copy of every gradient;
  - ZeRO-1: gradients are all-reduced whole, as in DDP (each rank then updates only its
    shard of the optimizer states): the same bucket copy;
  - ZeRO-2: gradients are reduce-scattered as backward produces them: one bucket, the
    size of the largest unit's gradients;
  - ZeRO-3/FSDP: the largest unit's parameters all-gathered, twice (the next unit is
    prefetched while one computes), and that unit's full gradients before the
    reduce-scatter. A unit is a block of ``model.blocks`` or the root (everything else:
    embeddings, head), as trainscope's FSDP wraps them.
- **temporaries** (every sharding): the logits before the loss and their gradient in
  backward (the log-softmax the loss saves is an activation); with checkpointing, one
  checkpointed block's activations while backward recomputes it.

The CUDA caching allocator's fragmentation and reserve come on top and are not estimated.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainscope.estimate.activations import ActivationBytes, element_size
from trainscope.estimate.states import WEIGHT_BYTES, ModelCounts


@dataclass(frozen=True)
class Allowance:
    """One stated allowance."""

    what: str
    kind: str
    """communication | temporaries."""
    bytes: float
    basis: str
    """How the figure was arrived at, in one line."""


def communication(sharding: str, counts: ModelCounts, precision: str) -> list[Allowance]:
    """The communication buffers of ``sharding`` (see the module docs)."""
    w = WEIGHT_BYTES[precision]  # gradients are kept in the weights' dtype
    grads = w * counts.trainable
    unit = counts.largest_unit
    if sharding in ("ddp", "zero1"):
        name = "DDP" if sharding == "ddp" else "ZeRO-1"
        return [
            Allowance(
                f"{name} gradient buckets",
                "communication",
                grads,
                "a second copy of every gradient (flat all-reduce buckets; "
                "gradient_as_bucket_view off, as in trainscope's DDP)",
            )
        ]
    if sharding == "zero2":
        return [
            Allowance(
                "ZeRO-2 reduce-scatter bucket",
                "communication",
                w * unit,
                f"the largest unit's gradients ({unit:,} parameters)",
            )
        ]
    return [
        Allowance(
            "FSDP all-gathered parameters",
            "communication",
            2 * w * unit,
            f"the largest unit's full parameters ({unit:,}), twice: one computing, the next "
            "prefetched",
        ),
        Allowance(
            "FSDP reduce-scatter input",
            "communication",
            w * unit,
            "the largest unit's full gradients before the reduce-scatter",
        ),
    ]


def temporaries(act: ActivationBytes, rows: int, classes: int, precision: str) -> list[Allowance]:
    """Logits and their gradient (``rows`` x ``classes``), and a block being recomputed."""
    logits = rows * classes * (element_size("low", precision) + element_size("stream", precision))
    out = [
        Allowance(
            "logits and their gradient",
            "temporaries",
            logits,
            f"{rows:,} x {classes:,} logits (the head's output) and the gradient of the loss "
            "with respect to them, alive around the loss",
        )
    ]
    if act.checkpointed_blocks:
        out.append(
            Allowance(
                "a checkpointed block recomputed",
                "temporaries",
                act.recompute_peak,
                "one block's activations, saved again while backward recomputes it",
            )
        )
    return out


__all__ = ["Allowance", "communication", "temporaries"]
