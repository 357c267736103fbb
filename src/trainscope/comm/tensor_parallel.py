"""Tensor parallelism's communication per step, predicted (torch-free).

Megatron-LM's split of a transformer block (``strategies.tensor_parallel``) makes four
all-reduces per block and step, each of the block's activations or their gradient: one
``batch x sequence x width`` tensor. Forward: after the attention's and the MLP's
row-split output projections; backward: of the input gradients of the two column-split
layers (Q/K/V, the MLP's first). With an α–β fit of each collective the time follows.

Under sequence parallelism the norms and the residual stream hold each rank's share of
the sequence, and the collectives change (as ``torch.distributed.tensor.parallel`` runs
them; each moves the whole tensor's bytes, the way a ring counts them):

- per block, forward: an all-gather of the sequence before attention and before the MLP,
  a reduce-scatter after each row-split projection (in place of the all-reduces);
- per block, backward: an all-gather for the gradient of each reduce-scatter, and an
  all-reduce of each column-split layer's input gradient (torch sums it whole, then
  keeps the rank's share; Megatron-LM reduce-scatters it, half the traffic);
- around the blocks: an all-gather before the head (forward) and one of the embeddings'
  gradient (backward, where forward had cut the sequence without communicating);
- after backward: an all-reduce of each norm parameter's gradient, a partial sum over
  each rank's share of the sequence.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from trainscope.comm.cost_model import Fit

ALL_REDUCES_PER_BLOCK = 4


@dataclass(frozen=True)
class OpCount:
    """One collective's calls in a step and their bytes (each call's, as its fit counts
    them: the whole tensor)."""

    op: str
    calls: int
    bytes_per_call: int
    seconds: float | None = None


@dataclass(frozen=True)
class TPComm:
    """One step's collectives under tensor parallelism."""

    calls: int
    """Collectives of the activations (and their gradients), all ops together."""
    bytes_per_call: int
    """Each of those: the batch x sequence x width tensor."""
    seconds: float | None
    """Predicted time of every collective of the step (None without a fit for each)."""
    ops: tuple[OpCount, ...] = field(default_factory=tuple)
    """Per op and size: what the totals above add up (and the norms' gradients)."""
    tp: int = 1
    """Ranks each collective spans."""

    def to_dict(self) -> dict[str, Any]:
        """Plain data."""
        return asdict(self)

    def by_op(self) -> dict[str, tuple[int, int]]:
        """Op -> (calls, input bytes) in the step, the sizes summed: what the comm probe
        counts (an all-gather's input is one rank's share of its output)."""
        out: dict[str, tuple[int, int]] = {}
        for c in self.ops:
            calls, nbytes = out.get(c.op, (0, 0))
            each = c.bytes_per_call // self.tp if c.op == "all_gather" else c.bytes_per_call
            out[c.op] = (calls + c.calls, nbytes + c.calls * each)
        return out


def _counts(
    blocks: int, nbytes: int, sequence_parallel: bool, norm_bytes: tuple[int, ...],
    per_block: int,
) -> list[tuple[str, int, int]]:  # fmt: skip
    if not sequence_parallel:
        return [("all_reduce", per_block * blocks, nbytes)]
    out = [
        ("all_gather", 4 * blocks + 2, nbytes),
        ("reduce_scatter", 2 * blocks, nbytes),
        ("all_reduce", 2 * blocks, nbytes),
    ]
    return out + [("all_reduce", 1, b) for b in norm_bytes]


def predict_tp(
    blocks: int, batch: int, seq_len: int, width: int, tp: int, fit: Any = None,
    element_bytes: int = 4, *, sequence_parallel: bool = False,
    norm_bytes: tuple[int, ...] = (), per_block: int = ALL_REDUCES_PER_BLOCK,
) -> TPComm:  # fmt: skip
    """The collectives of one step of ``blocks`` blocks at ``batch x seq_len x width``
    activations of ``element_bytes`` on ``tp`` ranks. ``fit`` is one all_reduce Fit, or
    a mapping op -> Fit (their times; None where an op has none). ``norm_bytes``: each
    norm parameter's gradient bytes, all-reduced under sequence parallelism.
    ``per_block``: all-reduces per block without it (4 in Megatron-LM's split of a block
    with a fused Q/K/V; 6 with separate Q, K and V layers, as BERT's)."""
    nbytes = batch * seq_len * width * element_bytes
    ops, total, activation_calls = [], 0.0, 0
    for op, calls, size in _counts(blocks, nbytes, sequence_parallel, norm_bytes, per_block):
        one = fit.get(op) if isinstance(fit, dict) else (fit if op == "all_reduce" else None)
        seconds = calls * one.time(op, size, tp) if isinstance(one, Fit) else None
        ops.append(OpCount(op, calls, size, seconds))
        total = total + seconds if seconds is not None and total is not None else None
        activation_calls += calls if size == nbytes else 0
    return TPComm(activation_calls, nbytes, total, tuple(ops), tp)


def predict_from_summary(summary: dict[str, Any], fit: Any = None) -> TPComm | None:
    """The prediction for a tp run, from what its record says (the workload's width and
    context, the local batch, the blocks split, sequence parallelism and the norm
    gradients it sums); None for another run or a workload that does not state them."""
    tp = (summary.get("parallel") or {}).get("tensor_parallel") or {}
    info = summary.get("workload_info") or {}
    values = [tp.get("blocks"), tp.get("tp_size"), summary.get("local_batch_size"),
              info.get("block_size"), info.get("n_embd")]  # fmt: skip
    if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in values):
        return None
    blocks, size, batch, seq, width = values
    norms = tuple(int(b) for b in tp.get("partial_gradient_bytes") or ())
    sp = bool(tp.get("sequence_parallel"))
    counts = tp.get("all_reduces_per_block") or {}
    per_block = sum(v for v in counts.values() if isinstance(v, int)) or ALL_REDUCES_PER_BLOCK
    return predict_tp(blocks, batch, seq, width, size, fit, sequence_parallel=sp,
                      norm_bytes=norms, per_block=per_block)  # fmt: skip


__all__ = ["ALL_REDUCES_PER_BLOCK", "OpCount", "TPComm", "predict_from_summary", "predict_tp"]
