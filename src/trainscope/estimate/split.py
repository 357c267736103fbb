"""Memory per rank when the model itself is split: pipeline stages and tensor
parallelism (no torch), for the GPT architectures, as trainscope's strategies split them.

**Pipeline** (``strategies.pipeline``): ``S`` stages, the blocks shared out evenly (the
later stages take the extra ones), the embeddings on the first stage, the final norm and
the head on the last (a tied head is a second copy there, trained on both). A stage's
activations are those of its blocks (and its end) for one microbatch of ``B/M``; how many
microbatches it holds at once is the schedule's: all ``M`` under GPipe, at most ``S - k``
on stage ``k`` under 1F1B. Under interleaved 1F1B each rank runs two stages (``r`` and
``r + S``, the blocks cut in ``2S``); what it holds is found by walking torch's order of
that rank's forwards and backwards (:func:`interleaved_order`).

**Tensor parallelism** (``strategies.tensor_parallel``): in every block, Q/K/V and the
MLP's first layer are split by columns (weights and biases), the two output projections
by rows (weights; their biases, the LayerNorms, the embeddings and the head stay whole).
What attention saves, and the MLP's hidden activations, are split ``T`` ways; the
residual stream, the LayerNorms' inputs and the Linear inputs taken from them are not.
With sequence parallelism the residual stream, the norms and the residual dropout masks
are split too (:data:`SP_SPLIT`); the Linear inputs stay whole (the gathered sequence).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from trainscope.comm.pipeline import split_even
from trainscope.errors import ConfigError
from trainscope.estimate.activations import ActivationPlan, activation_bytes, plan
from trainscope.estimate.archs import Arch
from trainscope.estimate.states import ModelCounts, States, unsharded

FIRST_STAGE_OUTSIDE = ("token ids", "positions", "embedding dropout mask")
"""What the first stage saves outside the blocks (name prefixes); the rest is the last's."""
TP_SPLIT = ("attention", "dropped attention probabilities", "proj Linear input (attention output",
            "GELU input", "proj Linear input (GELU output)")  # fmt: skip
"""Saved tensors of a GPT block that tensor parallelism splits (name prefixes)."""
SP_SPLIT = ("ln_1 input", "ln_1 mean", "ln_2 input", "ln_2 mean", "residual dropout mask",
            "ln_f input", "ln_f mean")  # fmt: skip
"""What sequence parallelism splits besides (name prefixes): the norms' inputs and
statistics and the residual dropout masks, inside the blocks and after them. The Linear
inputs taken from the norms are the gathered whole sequence, saved whole; so is the
embedding dropout's mask, drawn before the sequence is cut."""


@dataclass(frozen=True)
class RankMemory:
    """One rank's estimate."""

    label: str
    parameters: int
    states: States
    activations_per_microbatch: int
    in_flight: int | None
    """Microbatches held at once (None: not estimated); with two stages per rank, the
    stage-microbatches held at the peak."""
    peak: int | None = None
    """The most activation bytes held at once, where the stages held differ in size (two
    stages per rank); None: ``activations_per_microbatch x in_flight``."""

    @property
    def activations(self) -> int | None:
        """The most activation bytes held at once."""
        if self.peak is not None:
            return self.peak
        if self.in_flight is None:
            return None
        return self.activations_per_microbatch * self.in_flight

    def to_dict(self) -> dict[str, object]:
        """Plain data."""
        return {
            "label": self.label,
            "parameters": self.parameters,
            "states": dataclasses.asdict(self.states),
            "states_bytes": self.states.total,
            "activations_per_microbatch_bytes": self.activations_per_microbatch,
            "microbatches_in_flight": self.in_flight,
            "in_flight_is_stage_microbatches": self.peak is not None,
            "activations_in_flight_bytes": self.activations,
        }


def _gpt_only(arch: Arch) -> None:
    if arch.kind != "gpt" or not arch.hidden:
        raise ConfigError(
            "--pp-stages/--tp-size: estimated for GPT architectures (gpt-char, gpt2-*) only"
        )


def _block_counts(arch: Arch) -> tuple[int, int]:
    """(parameters, tensors) of one GPT block."""
    h, f, b = arch.hidden, arch.ffn, int(arch.bias)
    ln = h * (1 + b)
    params = 2 * ln + (3 * h * h + 3 * h * b) + (h * h + h * b) + (h * f + f * b) + (f * h + h * b)
    return params, 6 * (1 + b)


def in_flight(schedule: str, stages: int, microbatches: int, stage: int) -> int | None:
    """Microbatches stage ``stage`` holds at once under ``schedule`` (one stage per rank;
    the interleaved schedule's two per rank: :func:`interleaved_peak`)."""
    if schedule == "gpipe":
        return microbatches
    if schedule == "1f1b":
        return min(microbatches, stages - stage)
    return None


def interleaved_order(rank: int, ranks: int, microbatches: int, local: int = 2) -> list:
    """Rank ``rank``'s forwards and backwards under torch's interleaved 1F1B, in order:
    ("F" | "B", stage). As ``ScheduleInterleaved1F1B`` orders them: microbatches go in
    rounds of about ``ranks``; a warm-up of forwards (more the earlier the rank), then one
    forward and one backward at a time, then the remaining backwards."""
    rounds = max(1, microbatches // ranks)
    per_round = microbatches // rounds
    total = local * microbatches
    warmup = min((local - 1) * per_round + 2 * (ranks - 1 - rank), total)
    steady = total - warmup

    def fwd(step: int) -> int:
        return ((step // per_round) % local) * ranks + rank

    def bwd(step: int) -> int:
        return (local - 1 - ((step - warmup) // per_round) % local) * ranks + rank

    order: list[tuple[str, int]] = []
    for op in range(warmup + steady + warmup):
        if op < warmup + steady:
            order.append(("F", fwd(op)))
        if op >= warmup:
            order.append(("B", bwd(op)))
    return order


def interleaved_peak(order: list, stage_bytes: dict[int, int]) -> tuple[int, int]:
    """(the most activation bytes held at once, the stage-microbatches held then), walking
    ``order``: a forward keeps its stage's activations for one microbatch until that
    microbatch's backward on the stage frees them (microbatches in order on each stage)."""
    held: dict[int, int] = {}
    peak, count = 0, 0
    for kind, stage in order:
        held[stage] = held.get(stage, 0) + (1 if kind == "F" else -1)
        now = sum(stage_bytes[k] * n for k, n in held.items())
        if now > peak:
            peak, count = now, sum(held.values())
    return peak, count


def _stage_plan(
    full: ActivationPlan, span: tuple[int, int], first: bool, last: bool
) -> ActivationPlan:
    outside = tuple(
        s for s in full.outside
        if (first and s.what.startswith(FIRST_STAGE_OUTSIDE))
        or (last and not s.what.startswith(FIRST_STAGE_OUTSIDE))
    )  # fmt: skip
    return dataclasses.replace(full, outside=outside, blocks=full.blocks[span[0] : span[1]])


def pipeline_ranks(
    arch: Arch, *, stages: int, microbatches: int, schedule: str, batch: int, seq_len: int,
    precision: str, optimizer: str, device: str,
) -> list[RankMemory]:  # fmt: skip
    """Each rank's parameters, model states and activations in flight (``batch``: the
    batch each step of the pipeline takes, cut into ``microbatches``). Under the
    interleaved schedule each rank runs two stages, ``r`` and ``r + stages``."""
    _gpt_only(arch)
    if batch % microbatches:
        raise ConfigError(f"{microbatches} microbatches do not divide the batch of {batch}")
    local = 2 if schedule == "interleaved-1f1b" else 1
    n = stages * local
    block_params, block_tensors = _block_counts(arch)
    h, b = arch.hidden, int(arch.bias)
    full = plan(arch, batch // microbatches, seq_len, device)
    params, tensors, acts = {}, {}, {}
    for k, span in enumerate(split_even(arch.layers, n)):
        first, last = k == 0, k == n - 1
        blocks = span[1] - span[0]
        params[k] = blocks * block_params + (arch.vocab * h + arch.positions * h if first else 0)
        params[k] += (h * (1 + b) + arch.vocab * h) if last else 0  # ln_f, the head (a copy)
        tensors[k] = blocks * block_tensors + (2 if first else 0) + ((1 + b) + 1 if last else 0)
        acts[k] = activation_bytes(_stage_plan(full, span, first, last), "none", precision,
                                   device).total  # fmt: skip
    out = []
    for r in range(stages):
        mine = [r + v * stages for v in range(local)]
        p = sum(params[k] for k in mine)
        states = unsharded(ModelCounts(p, p, sum(tensors[k] for k in mine)), precision, optimizer)
        per_mb = sum(acts[k] for k in mine)
        if local == 1:
            out.append(RankMemory(f"stage {r}", p, states, per_mb,
                                  in_flight(schedule, stages, microbatches, r)))  # fmt: skip
            continue
        peak, held = interleaved_peak(interleaved_order(r, stages, microbatches, local), acts)
        out.append(RankMemory(f"rank {r} (stages {r}, {r + stages})", p, states, per_mb,
                              held, peak))  # fmt: skip
    return out


def tp_rank(
    arch: Arch, *, tp: int, batch: int, seq_len: int, precision: str, optimizer: str,
    device: str, sequence_parallel: bool = False,
) -> RankMemory:  # fmt: skip
    """One tensor-parallel rank's parameters, model states and activations (``batch``:
    the batch every rank computes on), with sequence parallelism or without."""
    _gpt_only(arch)
    if arch.heads % tp:
        raise ConfigError(f"{arch.heads} heads do not divide by --tp-size {tp}")
    h, f, b = arch.hidden, arch.ffn, int(arch.bias)
    ln = h * (1 + b)
    split = (3 * h * h + 3 * h * b) + h * h + (h * f + f * b) + f * h
    block = 2 * ln + 2 * h * b + split // tp
    params = arch.layers * block + arch.vocab * h + arch.positions * h + ln
    tensors = arch.layers * 6 * (1 + b) + 2 + (1 + b)
    full = plan(arch, batch, seq_len, device)

    split = TP_SPLIT + (SP_SPLIT if sequence_parallel else ())
    if sequence_parallel and seq_len % tp:
        raise ConfigError(f"sequence parallelism: {seq_len} tokens do not divide by {tp}")

    def shard(saved: tuple) -> tuple:
        return tuple(dataclasses.replace(s, elements=s.elements // tp)
                     if s.what.startswith(split) else s for s in saved)  # fmt: skip

    blocks = tuple(dataclasses.replace(bl, saved=shard(bl.saved)) for bl in full.blocks)
    cut = dataclasses.replace(full, blocks=blocks, outside=shard(full.outside))
    act = activation_bytes(cut, "none", precision, device)
    counts = ModelCounts(params, params, tensors)
    label = f"tp rank (of {tp}{', sequence parallel' if sequence_parallel else ''})"
    return RankMemory(label, params, unsharded(counts, precision, optimizer), act.total, 1)


__all__ = [
    "RankMemory",
    "in_flight",
    "interleaved_order",
    "interleaved_peak",
    "pipeline_ranks",
    "tp_rank",
]
