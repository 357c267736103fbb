"""A workload config -> the architecture and exact counts the estimate needs (builds it).

The model is built as ``trainscope run`` builds it (:func:`trainscope.workloads.
build_workload`, reading the workload's data: gpt-char's vocabulary and text-cls's
tokenizer come from it), then its parameters are counted: every tensor once (a tied head
is one tensor), trainable ones apart (LoRA freezes the base), buffers by storage. Those
counts make the model states exact to the byte. The shapes are read off the model for
the activation plan: trainscope's GPT, ``transformers``' BERT/RoBERTa, LeNet5; a user's
own model gets exact model states and no activation estimate.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainscope import registry
from trainscope.config import WorkloadConfig
from trainscope.estimate.archs import Arch
from trainscope.estimate.states import ModelCounts
from trainscope.workloads import build_workload, check_options


@dataclass
class WorkloadModel:
    """What the estimate takes from a built workload."""

    name: str
    arch: Arch | None
    """None: a model the activation plans do not know (a user's own)."""
    counts: ModelCounts
    seq_len: int | None = None
    """The sequence length the workload trains at (its upper bound for text-cls)."""
    notes: list[str] = field(default_factory=list)


def model_counts(model: Any) -> ModelCounts:
    """Exact element counts of a built model (see :class:`ModelCounts`)."""
    from trainscope.profiling.memory import tensor_bytes
    from trainscope.workloads.base import model_blocks

    params = list(model.parameters())  # each shared tensor once
    trainable = [p for p in params if p.requires_grad]
    blocks = [sum(p.numel() for p in b.parameters()) for b in model_blocks(model)]
    total = sum(p.numel() for p in params)
    return ModelCounts(
        parameters=total,
        trainable=sum(p.numel() for p in trainable),
        trainable_tensors=len(trainable),
        buffers_bytes=tensor_bytes(model.buffers()),
        largest_unit=max((*blocks, total - sum(blocks))),
    )


def model_arch(model: Any, name: str, sample_shape: tuple[int, ...] | None = None) -> Arch | None:
    """The architecture of a built model, or None for one no plan knows: each registered
    workload's ``arch`` reader is asked in turn (a user's factory that returns trainscope's
    GPT is read as gpt-char's is)."""
    for entry in registry.WORKLOADS.values():
        if entry.arch is not None:
            arch = registry.load(entry.arch)(model, name, sample_shape)
            if arch is not None:
                return arch
    return None


def gpt_arch(model: Any, name: str, sample_shape: tuple[int, ...] | None = None) -> Arch | None:
    """trainscope's GPT (gpt-char's registry ``arch``)."""
    from trainscope.workloads.gpt import GPT

    if not isinstance(model, GPT):
        return None
    c = model.config
    return Arch(
        name, "gpt", layers=c.n_layer, hidden=c.n_embd, heads=c.n_head, vocab=c.vocab_size,
        positions=c.block_size, ffn=4 * c.n_embd, bias=c.bias, dropout=c.dropout,
        attn_dropout=c.dropout,
    )  # fmt: skip


def lenet_arch(model: Any, name: str, sample_shape: tuple[int, ...] | None = None) -> Arch | None:
    """LeNet5 on images of ``sample_shape`` (the image workloads' ``arch``)."""
    from trainscope.workloads.lenet import LeNet5

    if not isinstance(model, LeNet5) or sample_shape is None or len(sample_shape) != 3:
        return None
    head = model.blocks[2][-1]
    return Arch(name, "lenet", layers=3, image=tuple(sample_shape), num_classes=head.out_features)


def bert_arch(model: Any, name: str, sample_shape: tuple[int, ...] | None = None) -> Arch | None:
    """A transformers BERT or RoBERTa classifier, LoRA-wrapped or not (text-cls's)."""
    net = getattr(model, "net", None)
    base = net.get_base_model() if hasattr(net, "get_base_model") else net
    config = getattr(base, "config", None)
    kind = getattr(config, "model_type", None)
    if kind not in ("bert", "roberta"):
        return None
    return Arch(
        name,
        kind,
        layers=config.num_hidden_layers,
        hidden=config.hidden_size,
        heads=config.num_attention_heads,
        vocab=config.vocab_size,
        positions=config.max_position_embeddings,
        ffn=config.intermediate_size,
        bias=True,
        dropout=config.hidden_dropout_prob,
        attn_dropout=config.attention_probs_dropout_prob,
        type_vocab=config.type_vocab_size,
        num_labels=config.num_labels,
        classifier_dropout=getattr(config, "classifier_dropout", None),
    )


def describe_workload(workload: Any, cfg: WorkloadConfig) -> WorkloadModel:
    """Counts and architecture of an already built :class:`~trainscope.workloads.base.Workload`."""
    model = workload.model
    # an image workload's sample shape (C, H, W), read from its first sample
    first = workload.train_set[0] if len(workload.train_set) else None
    x = first[0] if isinstance(first, (tuple, list)) and first else None
    sample = tuple(x.shape) if getattr(x, "ndim", None) == 3 else None
    arch = model_arch(model, cfg.name, sample)
    counts = model_counts(model)
    notes = []
    seq_len = None
    if arch is not None and arch.kind == "gpt":
        seq_len = arch.positions  # every training window is block_size long
    elif arch is not None:
        if arch.kind != "lenet":
            from trainscope.workloads.text_cls import parse_options

            seq_len = parse_options(cfg.options).max_length
        if counts.trainable < counts.parameters:
            notes.append(
                "LoRA: activations estimated as in full fine-tuning, an upper bound (frozen "
                "layers whose inputs need no gradient save less; adapters save a little more)"
            )
    else:
        notes.append(
            f"{type(model).__name__}: no activation plan for this model; model states are "
            "exact (use --measure for its activations)"
        )
    return WorkloadModel(cfg.name, arch, counts, seq_len, notes)


def load_workload(cfg: WorkloadConfig, cache_dir: Path | None = None) -> WorkloadModel:
    """Build ``cfg``'s workload (reading its data) and describe its model."""
    from trainscope.train.setup import cache_dir as default_cache

    check_options(cfg)
    workload = build_workload(cfg, cache_dir or default_cache())
    return describe_workload(workload, cfg)


__all__ = ["WorkloadModel", "describe_workload", "load_workload", "model_arch", "model_counts"]
