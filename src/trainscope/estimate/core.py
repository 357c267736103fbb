"""The estimate: model states, activations and allowances per device, per sharding (no torch).

:func:`estimate` is a pure function of a :class:`Setup`; the CLI, the measurement and the
docs all go through it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from trainscope.config import checkpointing_policy
from trainscope.errors import ConfigError
from trainscope.estimate import archs
from trainscope.estimate.activations import ActivationBytes, activation_bytes, plan
from trainscope.estimate.archs import Arch
from trainscope.estimate.buffers import Allowance, communication, temporaries
from trainscope.estimate.states import (
    OPTIMIZERS,
    PRECISIONS,
    SHARDING_TITLES,
    SHARDINGS,
    ModelCounts,
    States,
    check_choice,
    per_parameter,
    sharded,
    unsharded,
)

DEVICES = ("cpu", "cuda")
COMPONENTS = {
    "weights": "weights",
    "gradients": "gradients",
    "master_weights": "fp32 master weights",
    "optimizer_states": "optimizer states",
    "activations": "activations (saved)",
    "autocast_weight_copies": "autocast weight copies",
    "buffers": "model buffers",
    "communication": "allowance: communication",
    "temporaries": "allowance: temporaries",
}
"""Component keys, in table order, and their names."""


@dataclass(frozen=True)
class Setup:
    """What to estimate: a model and the way it is trained."""

    arch: Arch
    counts: ModelCounts | None = None
    """Exact counts (a built workload model); None: from ``arch``'s shapes."""
    world_size: int = 1
    precision: str = "fp32"
    optimizer: str = "adam"
    batch_size: int = 8
    """Micro-batch per device."""
    seq_len: int | None = None
    """Tokens per sequence; None: the model's context (see :func:`default_seq_len`)."""
    checkpointing: str = "none"
    device: str = "cuda"
    """cpu | cuda: decides the attention kernel and the dropout masks' width."""
    states_only: bool = False
    source: str = ""
    """What the model came from, for the header (``--arch gpt2-xl``)."""
    notes: tuple[str, ...] = ()


@dataclass
class Column:
    """One sharding's per-device bytes."""

    sharding: str
    states: States
    activations: ActivationBytes | None
    buffers: int
    allowances: list[Allowance] = field(default_factory=list)

    def components(self) -> dict[str, float]:
        """Bytes per component key of :data:`COMPONENTS` (absent ones left out)."""
        s = self.states
        out: dict[str, float] = {
            "weights": s.weights,
            "gradients": s.gradients,
            "master_weights": s.master_weights,
            "optimizer_states": s.optimizer_states,
        }
        if self.activations is not None:
            out["activations"] = self.activations.total
            out["autocast_weight_copies"] = self.activations.autocast_weight_copies
            out["buffers"] = self.buffers
            for kind in ("communication", "temporaries"):
                out[kind] = sum(a.bytes for a in self.allowances if a.kind == kind)
        return out

    @property
    def model_states(self) -> float:
        """Weights + gradients + master copy + optimizer states."""
        return self.states.total

    @property
    def total(self) -> float:
        """Everything counted for one device."""
        return sum(self.components().values())

    @property
    def dominant(self) -> str:
        """The largest component's key."""
        parts = self.components()
        return max(parts, key=lambda k: parts[k])


@dataclass
class Estimate:
    """Per-device memory of one setup under every sharding."""

    setup: Setup
    counts: ModelCounts
    seq_len: int
    columns: dict[str, Column]
    activations: ActivationBytes | None
    notes: list[str]

    def to_dict(self) -> dict[str, Any]:
        """Plain data for ``--json`` (bytes as integers, rounded up)."""
        s, c = self.setup, self.counts
        shardings: dict[str, Any] = {}
        for key, col in self.columns.items():
            row = {k: _int(v) for k, v in col.components().items()}
            row["model_states"] = _int(col.model_states)
            row["total"] = _int(col.total)
            row["dominant"] = col.dominant
            shardings[key] = row
        act = self.activations
        return {
            "units": "bytes per device",
            "model": {
                "source": s.source,
                "description": archs.describe(s.arch),
                "parameters": c.parameters,
                "trainable_parameters": c.trainable,
                "parameter_tensors": c.trainable_tensors or None,
                "exact_counts": c.exact,
            },
            "setup": {
                "world_size": s.world_size,
                "precision": s.precision,
                "optimizer": s.optimizer,
                "batch_size": s.batch_size,
                "seq_len": self.seq_len if s.arch.kind != "lenet" else None,
                "checkpointing": s.checkpointing,
                "device": s.device,
                "states_only": s.states_only,
            },
            "bytes_per_parameter": per_parameter(s.precision, s.optimizer),
            "shardings": shardings,
            "allowances": {
                key: [a.__dict__ | {"bytes": _int(a.bytes)} for a in col.allowances]
                for key, col in self.columns.items()
            },
            "activations": None
            if act is None
            else {
                "total_bytes": act.total,
                "saved_by_autograd_bytes": act.saved_by_autograd,
                "selective_saved_bytes": act.selective_saved,
                "autocast_weight_copies_bytes": act.autocast_weight_copies,
                "outside_blocks_bytes": act.outside_blocks,
                "blocks_bytes": act.blocks,
                "checkpointed_blocks": act.checkpointed_blocks,
                "recompute_peak_bytes": act.recompute_peak,
                "attention_kernel": act.attention,
            },
            "notes": self.notes,
        }


def _int(x: float) -> int:
    return int(math.ceil(x - 1e-9))


def default_seq_len(arch: Arch) -> int:
    """The model's context: GPT n_ctx / block_size, BERT 512 (RoBERTa's 514 positions
    minus its padding offset)."""
    return arch.positions - 2 if arch.kind == "roberta" else arch.positions


def counts_of(arch: Arch) -> ModelCounts:
    """Exact counts from an architecture's shapes (``--params``: that count)."""
    pc = archs.param_counts(arch)
    return ModelCounts(
        parameters=pc.total,
        trainable=pc.total,
        trainable_tensors=pc.tensors,
        buffers_bytes=archs.buffer_bytes(arch),
        largest_unit=pc.largest_unit if pc.per_block else pc.total,
        exact=arch.params is None,
    )


def _check(setup: Setup) -> int:
    """Validate ``setup``; returns the sequence length to use."""
    check_choice("--precision", setup.precision, PRECISIONS)
    check_choice("--optimizer", setup.optimizer, OPTIMIZERS)
    check_choice("--device", setup.device, DEVICES)
    checkpointing_policy(setup.checkpointing)
    if setup.world_size < 1:
        raise ConfigError(f"--world-size must be at least 1, got {setup.world_size}")
    if setup.batch_size < 1:
        raise ConfigError(f"--batch-size must be at least 1, got {setup.batch_size}")
    if setup.seq_len is not None and setup.seq_len < 1:  # 0 is not "the default"
        raise ConfigError(f"--seq-len must be at least 1, got {setup.seq_len}")
    arch = setup.arch
    for p in (arch.dropout, arch.attn_dropout, arch.classifier_dropout):
        if p is not None and not 0.0 <= p < 1.0:  # NaN fails this too
            raise ConfigError(f"--dropout must be a number in [0, 1), got {p}")
    if setup.states_only or arch.kind == "lenet":
        return setup.seq_len or 0
    if not archs.has_shape(arch):
        raise ConfigError(
            "activations need the model's shape: add --layers and --hidden (and --heads, "
            "--vocab, --seq-len), or pass --states-only"
        )
    t = setup.seq_len or default_seq_len(arch)
    if t < 1:
        raise ConfigError(f"--seq-len must be positive, got {t}")
    if arch.positions and t > default_seq_len(arch):
        raise ConfigError(
            f"--seq-len {t} is longer than the model's {default_seq_len(arch)} positions"
        )
    return t


def estimate(setup: Setup) -> Estimate:
    """Per-device bytes of ``setup`` under DDP, ZeRO-1, ZeRO-2 and ZeRO-3/FSDP."""
    t = _check(setup)
    counts = setup.counts or counts_of(setup.arch)
    notes = list(setup.notes)
    full = unsharded(counts, setup.precision, setup.optimizer)
    act = None
    temps: list[Allowance] = []
    if not setup.states_only:
        p = plan(setup.arch, setup.batch_size, t, setup.device)
        act = activation_bytes(p, setup.checkpointing, setup.precision, setup.device)
        notes += act.notes
        if setup.arch.kind == "gpt":
            temps = temporaries(act, setup.batch_size * t, setup.arch.vocab, setup.precision)
        else:
            classes = (
                setup.arch.num_classes if setup.arch.kind == "lenet" else setup.arch.num_labels
            )
            temps = temporaries(act, setup.batch_size, classes, setup.precision)
    if setup.optimizer != "sgd" and not counts.trainable_tensors:
        notes.append(
            "Adam's step counters (4 bytes per parameter tensor) are left out: the "
            "number of tensors is unknown"
        )
    if setup.precision == "autocast":
        notes.append(
            "autocast: fp32 weights, gradients and states; 16-bit weight copies "
            "made in forward are saved for backward (their own row)"
        )
    columns = {}
    # One process exchanges no gradients: it has no buckets or gathered units to hold.
    alone = setup.states_only or setup.world_size == 1
    for key in SHARDINGS:
        comm = [] if alone else communication(key, counts, setup.precision)
        columns[key] = Column(
            key,
            sharded(full, key, setup.world_size),
            act,
            counts.buffers_bytes,
            comm + temps,
        )
    return Estimate(setup, counts, t, columns, act, notes)


def dominant_line(est: Estimate, keys: list[str] | None = None) -> str:
    """One line naming the dominant component under each sharding (of ``keys``: all)."""
    parts = []
    for key in keys or list(est.columns):
        col = est.columns[key]
        comps = col.components()
        top = col.dominant
        share = comps[top] / col.total if col.total else 0.0
        parts.append(f"{SHARDING_TITLES[key]}: {COMPONENTS[top]} ({share:.0%})")
    # "→", not "->": Markdown writes ">" as "&gt;", and the arrow needs no escape anywhere.
    return "dominant component per device → " + "; ".join(parts)


__all__ = [
    "COMPONENTS",
    "DEVICES",
    "Column",
    "Estimate",
    "Setup",
    "counts_of",
    "default_seq_len",
    "dominant_line",
    "estimate",
]
