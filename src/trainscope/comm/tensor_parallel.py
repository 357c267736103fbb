"""Tensor parallelism's communication per step, predicted (torch-free).

Megatron-LM's split of a transformer block (``strategies.tensor_parallel``) makes four
all-reduces per block and step, each of the block's activations or their gradient: one
``batch x sequence x width`` tensor. Forward: after the attention's and the MLP's
row-split output projections; backward: of the input gradients of the two column-split
layers (Q/K/V, the MLP's first). With an α–β fit of all_reduce the time follows.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from trainscope.comm.cost_model import Fit

ALL_REDUCES_PER_BLOCK = 4


@dataclass(frozen=True)
class TPComm:
    """One step's all-reduces under tensor parallelism."""

    calls: int
    bytes_per_call: int
    seconds: float | None
    """Predicted time of all of them (None without a fit)."""

    def to_dict(self) -> dict[str, Any]:
        """Plain data."""
        return asdict(self)


def predict_tp(
    blocks: int, batch: int, seq_len: int, width: int, tp: int, fit: Fit | None = None,
    element_bytes: int = 4,
) -> TPComm:  # fmt: skip
    """The all-reduces of one step of ``blocks`` blocks at ``batch x seq_len x width``
    activations of ``element_bytes`` on ``tp`` ranks (their time from ``fit``, if any)."""
    calls = ALL_REDUCES_PER_BLOCK * blocks
    nbytes = batch * seq_len * width * element_bytes
    seconds = calls * fit.time("all_reduce", nbytes, tp) if fit is not None else None
    return TPComm(calls, nbytes, seconds)


def predict_from_summary(summary: dict[str, Any], fit: Fit | None = None) -> TPComm | None:
    """The prediction for a tp run, from what its record says (the workload's width and
    context, the local batch, the blocks split); None for another run or a workload that
    does not state them."""
    tp = (summary.get("parallel") or {}).get("tensor_parallel") or {}
    info = summary.get("workload_info") or {}
    values = [tp.get("blocks"), tp.get("tp_size"), summary.get("local_batch_size"),
              info.get("block_size"), info.get("n_embd")]  # fmt: skip
    if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in values):
        return None
    blocks, size, batch, seq, width = values
    return predict_tp(blocks, batch, seq, width, size, fit)


__all__ = ["ALL_REDUCES_PER_BLOCK", "TPComm", "predict_from_summary", "predict_tp"]
