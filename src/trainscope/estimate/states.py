"""Model states per device: weights, gradients, optimizer states, by precision and sharding.

The accounting is the ZeRO paper's (Rajbhandari et al. 2020, sec. 3.1): for Psi
parameters, mixed-precision Adam holds 2 Psi bytes of fp16 weights, 2 Psi of fp16
gradients and K Psi of optimizer states, K = 12 (an fp32 master copy of the weights, and
Adam's two moments, 4 bytes each): 16 Psi in all. Sharding divides by the world size N:

==========  =======================  ===========================
sharding    what is split N ways     per device (mixed-precision Adam)
==========  =======================  ===========================
DDP         nothing                  (2 + 2 + K) Psi
ZeRO-1      optimizer states         (2 + 2) Psi + K Psi / N
ZeRO-2      + gradients              2 Psi + (2 + K) Psi / N
ZeRO-3/FSDP + weights                (2 + 2 + K) Psi / N
==========  =======================  ===========================

Precision modes (``--precision``), bytes per parameter as weights + gradients + states:

- ``fp32``: 4 + 4 + (4 per moment): SGD with momentum 4 + 4 + 4, Adam 4 + 4 + 8;
- ``amp``: ZeRO's mixed precision, fp16/bf16 weights and gradients with an fp32 master
  copy in the optimizer: SGD 2 + 2 + 8, Adam 2 + 2 + 12;
- ``bf16``: pure bf16, everything 2 bytes: SGD 2 + 2 + 2, Adam 2 + 2 + 4;
- ``autocast``: how trainscope's own ``--precision bf16/fp16`` runs hold memory: fp32
  weights, gradients and states (as ``fp32``) plus the low-precision copies of weights
  that autocast makes in forward and backward keeps (counted with the activations).

Adam (and AdamW) also keep a ``step`` counter per parameter tensor: a 4-byte fp32 tensor
(on the CPU unless ``capturable``/``fused``), which the memory meter counts and the
estimate therefore includes where the number of tensors is known. Only trainable
parameters have gradients and optimizer states (LoRA trains few).
"""

from __future__ import annotations

from dataclasses import dataclass

from trainscope.config import need_choice
from trainscope.errors import ConfigError

PRECISIONS = ("fp32", "amp", "bf16", "autocast")
OPTIMIZERS = ("sgd", "adam", "adamw")
SHARDINGS = ("ddp", "zero1", "zero2", "zero3")
SHARDING_TITLES = {"ddp": "DDP", "zero1": "ZeRO-1", "zero2": "ZeRO-2", "zero3": "ZeRO-3/FSDP"}
PRECISION_HELP = (
    "fp32 | amp (ZeRO's mixed precision: 16-bit weights and gradients, fp32 master copy and "
    "states) | bf16 (pure bf16: every state 2 bytes) | autocast (trainscope's own --precision "
    "bf16/fp16 runs: fp32 weights, gradients and states, plus 16-bit weight copies made in "
    "forward)"
)

# Bytes per element of the weights and gradients the model computes with.
WEIGHT_BYTES = {"fp32": 4, "amp": 2, "bf16": 2, "autocast": 4}
# Bytes of the fp32 master copy the optimizer updates (mixed precision only).
MASTER_BYTES = {"fp32": 0, "amp": 4, "bf16": 0, "autocast": 0}
# Bytes per element of one optimizer moment (momentum; Adam's exp_avg / exp_avg_sq).
MOMENT_BYTES = {"fp32": 4, "amp": 4, "bf16": 2, "autocast": 4}
MOMENTS = {"sgd": 1, "adam": 2, "adamw": 2}  # SGD with momentum: one buffer
ADAM_STEP_BYTES = 4  # torch.optim.Adam's per-tensor "step": a 0-d float32 tensor


def check_choice(flag: str, value: str, allowed: tuple[str, ...]) -> str:
    """``value`` if it is one of ``allowed``, else a one-line ConfigError."""
    need_choice(flag, value, allowed)
    return value


@dataclass(frozen=True)
class ModelCounts:
    """What the model states depend on: element counts, not bytes."""

    parameters: int
    """Every parameter element, each shared tensor (a tied head) once."""
    trainable: int
    """Elements of parameters that require gradients (all but LoRA's frozen base)."""
    trainable_tensors: int = 0
    """Trainable parameter tensors (Adam's step counters); 0 when unknown."""
    buffers_bytes: int = 0
    """Bytes of the model's buffers (replicated under every sharding)."""
    largest_unit: int = 0
    """Parameters of the largest unit FSDP gathers at once (a block, or the root)."""
    exact: bool = True
    """Counted from the model itself or from exact shapes (False: ``--params``)."""


@dataclass(frozen=True)
class States:
    """Per-device bytes of the model states under one sharding."""

    weights: float
    gradients: float
    master_weights: float
    """The fp32 master copy of mixed precision (0 otherwise)."""
    optimizer_states: float
    """Momentum or Adam's moments, and Adam's step counters."""

    @property
    def total(self) -> float:
        """Weights + gradients + master copy + optimizer states."""
        return self.weights + self.gradients + self.master_weights + self.optimizer_states


def unsharded(counts: ModelCounts, precision: str, optimizer: str) -> States:
    """The model states of one full replica (what DDP holds on every device)."""
    check_choice("precision", precision, PRECISIONS)
    check_choice("optimizer", optimizer, OPTIMIZERS)
    moments = MOMENTS[optimizer] * MOMENT_BYTES[precision] * counts.trainable
    steps = ADAM_STEP_BYTES * counts.trainable_tensors if optimizer != "sgd" else 0
    return States(
        weights=WEIGHT_BYTES[precision] * counts.parameters,
        gradients=WEIGHT_BYTES[precision] * counts.trainable,
        master_weights=MASTER_BYTES[precision] * counts.trainable,
        optimizer_states=moments + steps,
    )


def sharded(full: States, sharding: str, world_size: int) -> States:
    """Per-device states when ``sharding`` splits them over ``world_size`` devices."""
    check_choice("sharding", sharding, SHARDINGS)
    if world_size < 1:
        raise ConfigError(f"--world-size must be at least 1, got {world_size}")
    n = world_size
    level = SHARDINGS.index(sharding)  # 0 ddp, 1 optimizer states, 2 + grads, 3 + weights
    return States(
        weights=full.weights / n if level >= 3 else full.weights,
        gradients=full.gradients / n if level >= 2 else full.gradients,
        master_weights=full.master_weights / n if level >= 1 else full.master_weights,
        optimizer_states=full.optimizer_states / n if level >= 1 else full.optimizer_states,
    )


def k_factor(precision: str, optimizer: str) -> int:
    """The ZeRO paper's K: optimizer-state bytes per parameter (master copy + moments)."""
    return MASTER_BYTES[precision] + MOMENTS[optimizer] * MOMENT_BYTES[precision]


def per_parameter(precision: str, optimizer: str) -> str:
    """'2 + 2 + 12 = 16 bytes per parameter (weights + gradients + K; K = ...)' for the
    docs and the table's caption: what K holds is said, not left to the ZeRO paper."""
    w = WEIGHT_BYTES[precision]
    k = k_factor(precision, optimizer)
    master = MASTER_BYTES[precision]
    parts = [f"{master} for the fp32 master copy"] if master else []
    moments = "the momentum" if optimizer == "sgd" else "Adam's two moments"
    parts.append(f"{MOMENTS[optimizer] * MOMENT_BYTES[precision]} for {moments}")
    return (
        f"{w} + {w} + {k} = {2 * w + k} bytes per parameter (weights + gradients + K; "
        f"K = the optimizer's states: {' + '.join(parts)})"
    )


__all__ = [
    "MOMENTS",
    "OPTIMIZERS",
    "PRECISIONS",
    "PRECISION_HELP",
    "SHARDINGS",
    "SHARDING_TITLES",
    "ModelCounts",
    "States",
    "check_choice",
    "k_factor",
    "per_parameter",
    "sharded",
    "unsharded",
]
