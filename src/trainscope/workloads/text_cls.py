"""The ``text-cls`` workload: BERT / RoBERTa sentence(-pair) classification on GLUE, with LoRA.

The model is built from a config with random weights (``model: bert|roberta``, ``size:
tiny|mini|small|base``), which works offline, or loaded from the Hugging Face hub
(``pretrained: NAME``). With ``lora_r > 0`` the encoder is frozen and low-rank adapters
(``peft``) are trained in the attention projections, together with the classifier head.

Built from scratch, both models use a WordPiece tokenizer trained on the task's training
split (for RoBERTa too, instead of its byte-level BPE: the tokenizer's job here is to give
the model ids, and one offline trainer serves both). A pretrained model brings its own.

Options (``workload.options``), with their defaults, are in :data:`DEFAULT_OPTIONS`.
``transformers``, ``tokenizers`` and ``peft`` are the optional ``text`` extra; they are
imported only when this workload is built.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from trainscope.config import WorkloadConfig, show
from trainscope.data.glue import (
    PadCollate,
    PretrainedEncoder,
    TextEncoder,
    WordPieceEncoder,
    encode_split,
    glue_task,
    load_glue,
    train_wordpiece,
)
from trainscope.errors import ConfigError, DataError
from trainscope.runtime.captured import quiet_import
from trainscope.workloads.base import Workload
from trainscope.workloads.encoder_split import ENCODER_TP_PLAN, EncoderSplit
from trainscope.workloads.hf import HEAD_NAMES, HFModel, first_line, from_pretrained

# (layers, hidden size, attention heads), as the compact BERTs of Turc et al. (2019)
# and BERT-base; the feed-forward width is 4x the hidden size.
SIZES: dict[str, tuple[int, int, int]] = {
    "tiny": (2, 128, 2),
    "mini": (4, 256, 4),
    "small": (4, 512, 8),
    "base": (12, 768, 12),
}
MODELS = ("bert", "roberta")
MAX_POSITIONS = 512  # position embeddings of BERT and RoBERTa: max_length cannot exceed it
LORA_DEFAULT_TARGETS = ("query", "value")  # BERT/RoBERTa attention projection names
# HEAD_NAMES: the classification heads, kept trainable under LoRA.

DEFAULT_OPTIONS: dict[str, Any] = {
    "task": "SST-2",
    "model": "bert",
    "size": "tiny",
    "pretrained": None,
    "max_length": 128,
    "dropout": None,  # None: the architecture's own (0.1 in BERT and RoBERTa)
    "lora_r": 0,
    "lora_alpha": 16.0,
    "lora_dropout": 0.1,
    "lora_targets": list(LORA_DEFAULT_TARGETS),
    "vocab_size": 8000,
    "train_limit": None,
    "eval_limit": None,
}
# Options that only make sense for a model built from scratch.
_SCRATCH_ONLY = ("model", "size", "vocab_size")


@dataclass
class TextClsOptions:
    """The checked ``workload.options`` of ``text-cls`` (see :data:`DEFAULT_OPTIONS`)."""

    task: str
    model: str
    size: str
    pretrained: str | None
    max_length: int
    dropout: float | None
    lora_r: int
    lora_alpha: float
    lora_dropout: float
    lora_targets: list[str]
    vocab_size: int
    train_limit: int | None
    eval_limit: int | None


def _int(key: str, value: Any, minimum: int) -> int:
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"text-cls option {key} must be an integer >= {minimum}, got {value!r}")
    return value


def _float(key: str, value: Any, low: float, high: float | None = None) -> float:
    try:
        x = float(value)
    except (TypeError, ValueError, OverflowError):  # OverflowError: an int past 1e308
        x = float("nan")
    # NaN fails every comparison; infinity passes an open upper end, so refuse it by name.
    finite = x not in (float("inf"), float("-inf"))
    if isinstance(value, bool) or not (finite and x >= low and (high is None or x < high)):
        bound = f"in [{low}, {high})" if high is not None else f">= {low}"
        raise ConfigError(f"text-cls option {key} must be a number {bound}, got {show(value)}")
    return x


def layout(options: Mapping[str, Any]) -> dict[str, Any]:
    """Blocks and heads of the model these options make, where the options say (a
    pretrained model's own config alone knows its size: checked when it is built)."""
    o = parse_options(options)
    if o.pretrained:
        return {"blocks": None, "heads": None, "pipeline": True, "tp": True}
    layers, _, heads = SIZES[o.size]
    return {"blocks": layers, "heads": heads, "pipeline": True, "tp": True}


def parse_options(options: Mapping[str, Any]) -> TextClsOptions:
    """Check ``workload.options`` against :data:`DEFAULT_OPTIONS` and fill in the defaults.

    Raises ConfigError for an unknown key (naming the allowed ones) or a bad value.
    """
    unknown = sorted(set(options) - set(DEFAULT_OPTIONS))
    if unknown:
        raise ConfigError(
            f"unknown text-cls option(s) {', '.join(unknown)}: "
            f"allowed are {', '.join(DEFAULT_OPTIONS)}"
        )
    o = {**DEFAULT_OPTIONS, **options}
    pretrained = o["pretrained"]
    if pretrained is not None:
        if not isinstance(pretrained, str) or not pretrained.strip():
            raise ConfigError(
                f"text-cls option pretrained must be a model name, got {pretrained!r}"
            )
        clash = [k for k in _SCRATCH_ONLY if k in options]
        if clash:
            raise ConfigError(
                f"text-cls: {', '.join(clash)} apply to a model built from scratch; "
                f"pretrained {pretrained} brings its own architecture and tokenizer"
            )
    model = str(o["model"]).lower()
    if model not in MODELS:
        raise ConfigError(f"text-cls: unknown model {o['model']!r}: choose one of bert, roberta")
    size = str(o["size"]).lower()
    if size not in SIZES:
        raise ConfigError(f"text-cls: unknown size {o['size']!r}: choose one of {', '.join(SIZES)}")
    targets = o["lora_targets"]
    if isinstance(targets, str):  # --set workload.options.lora_targets=query,key,value
        targets = [t.strip() for t in targets.split(",") if t.strip()]
    if not isinstance(targets, (list, tuple)) or not targets:
        raise ConfigError(f"text-cls option lora_targets must list module names, got {targets!r}")
    max_length = _int("max_length", o["max_length"], 8)
    if max_length > MAX_POSITIONS:
        raise ConfigError(
            f"text-cls option max_length must be <= {MAX_POSITIONS}, got {max_length}"
        )
    # Upper bounds so that a typo is a message, not an allocation that fails (or a
    # tokenizer that aborts the process): a LoRA rank beyond any of these models' widths
    # adapts nothing more, and BERT's own vocabulary has 30,522 entries.
    lora_r, vocab_size = _int("lora_r", o["lora_r"], 0), _int("vocab_size", o["vocab_size"], 100)
    for key, value, most in (("lora_r", lora_r, 4096), ("vocab_size", vocab_size, 1_000_000)):
        if value > most:
            raise ConfigError(f"text-cls option {key} must be at most {most}, got {show(value)}")
    return TextClsOptions(
        task=glue_task(str(o["task"])).name,
        model=model,
        size=size,
        pretrained=pretrained.strip() if pretrained else None,
        max_length=max_length,
        dropout=None if o["dropout"] is None else _float("dropout", o["dropout"], 0.0, 1.0),
        lora_r=lora_r,
        lora_alpha=_float("lora_alpha", o["lora_alpha"], 1e-9),
        lora_dropout=_float("lora_dropout", o["lora_dropout"], 0.0, 1.0),
        lora_targets=[str(t) for t in targets],
        vocab_size=vocab_size,
        train_limit=None if o["train_limit"] is None else _int("train_limit", o["train_limit"], 1),
        eval_limit=None if o["eval_limit"] is None else _int("eval_limit", o["eval_limit"], 1),
    )


def _require(module: str) -> Any:
    """Import an optional dependency of the ``text`` extra, or say how to install it."""
    try:
        return quiet_import(module)  # torchao's and torch's import chatter: to the run's log
    except ImportError:
        raise ConfigError(
            f"workload text-cls needs the '{module}' package: pip install 'trainscope[text]'"
        ) from None


# --------------------------------------------------------------------------- model


class SequenceClassifier(HFModel):
    """A Hugging Face sequence classifier (maybe LoRA-wrapped) behind ``model(batch) -> logits``.

    ``batch`` is the mapping :class:`~trainscope.data.glue.PadCollate` makes (input_ids,
    attention_mask, optionally token_type_ids); the result is the logits (B, num_labels).

    A BERT or RoBERTa also says how it splits (:mod:`trainscope.workloads.encoder_split`):
    into pipeline stages at its layers, and inside its layers for tensor parallelism.
    """

    def __init__(
        self, net: nn.Module, num_labels: int, num_layers: int, *, pad_id: int = 0,
        max_length: int = MAX_POSITIONS,
    ) -> None:  # fmt: skip
        super().__init__(net, num_layers)
        self.num_labels = num_labels
        self.pad_id, self.max_length = pad_id, max_length
        self._split = EncoderSplit.of(self)
        if self._split is not None:  # the attributes strategies look for, only where true
            self.pipeline_in, self.pipeline_out = self._split.pipeline_in, self._split.pipeline_out
            self.tp_plan = ENCODER_TP_PLAN

    def forward_in(self, *args: torch.Tensor) -> torch.Tensor:
        """input_ids (B, T) [, token_type_ids] -> the first layer's input (B, T, H)."""
        assert self._split is not None
        return self._split.forward_in(*args)

    def forward_out(self, x: torch.Tensor) -> torch.Tensor:
        """The last layer's output (B, T, H) -> logits (B, num_labels)."""
        assert self._split is not None
        return self._split.forward_out(x)

    def pipeline_inputs(self, inputs: Mapping[str, torch.Tensor]) -> tuple[tuple, dict]:
        """A batch as a pipeline takes it, padded to ``max_length``: a schedule's buffers
        have one shape for the whole run (padding changes no logit: it is masked)."""
        assert self._split is not None
        return self._split.pipeline_inputs(inputs, self.pad_id, self.max_length)

    def block_kwargs(self, hidden: torch.Tensor, attention_mask: torch.Tensor) -> dict:
        """Each layer's attention mask, made from the (B, T) padding mask."""
        assert self._split is not None
        return self._split.block_kwargs(hidden, attention_mask)

    def tp_localize(self, tp: int) -> None:
        """Each layer's attention holds ``1/tp`` of the heads after a tensor-parallel split."""
        assert self._split is not None
        self._split.localize_heads(self.blocks, tp)


def dropout_overrides(dropout: float | None) -> dict[str, float]:
    """The config entries that set every dropout of a BERT/RoBERTa (none: its own)."""
    if dropout is None:
        return {}
    keys = ("hidden_dropout_prob", "attention_probs_dropout_prob", "classifier_dropout")
    return dict.fromkeys(keys, dropout)


def scratch_model(
    model: str, size: str, *, vocab_size: int, num_labels: int, pad_id: int,
    dropout: float | None = None,
) -> nn.Module:  # fmt: skip
    """A ``transformers`` BERT or RoBERTa classifier of a named size, randomly initialised."""
    transformers = _require("transformers")
    layers, hidden, heads = SIZES[size]
    common = {
        **dropout_overrides(dropout),
        "vocab_size": vocab_size,
        "hidden_size": hidden,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "intermediate_size": 4 * hidden,
        "num_labels": num_labels,
        "pad_token_id": pad_id,
    }
    if model == "bert":
        config = transformers.BertConfig(max_position_embeddings=MAX_POSITIONS, **common)
        return transformers.BertForSequenceClassification(config)
    # RoBERTa numbers positions from pad_id + 1 and has no segment embeddings.
    config = transformers.RobertaConfig(
        max_position_embeddings=MAX_POSITIONS + pad_id + 1, type_vocab_size=1, **common
    )
    return transformers.RobertaForSequenceClassification(config)


def pretrained_model(
    name: str, num_labels: int, *, download: bool, dropout: float | None = None
) -> tuple[nn.Module, Any, str]:
    """A model from the hub or a local folder, its tokenizer, and a line saying what
    loading found (a new head); ``download=False`` uses the local cache only."""
    transformers = _require("transformers")
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(name, local_files_only=not download)
        net, note = from_pretrained(
            transformers.AutoModelForSequenceClassification,
            name,
            num_labels=num_labels,
            local_files_only=not download,
            **dropout_overrides(dropout),
        )
    except OSError as e:
        # Hub, network and cache errors are all OSError subclasses; the first line says which.
        raise DataError(
            f"cannot download pretrained {name}: offline? ({first_line(e)}); set HF_HOME to a "
            f"cache that holds it, or drop 'pretrained' to build the model from scratch"
        ) from None
    except (ValueError, KeyError, ImportError) as e:  # found, but not a sequence classifier
        raise ConfigError(
            f"cannot load pretrained {name} as a sequence classifier: {first_line(e)}"
        ) from None
    return net, tokenizer, note


def add_lora(net: nn.Module, opts: TextClsOptions) -> tuple[nn.Module, dict[str, Any]]:
    """Freeze ``net`` and add LoRA adapters (``peft``); the classifier head stays trainable."""
    peft = _require("peft")
    heads = [n for n, _ in net.named_children() if n in HEAD_NAMES]
    config = peft.LoraConfig(
        task_type=peft.TaskType.SEQ_CLS,
        r=opts.lora_r,
        lora_alpha=opts.lora_alpha,
        lora_dropout=opts.lora_dropout,
        target_modules=list(opts.lora_targets),
        modules_to_save=list(heads),  # a copy: peft appends its defaults to it
    )
    try:
        with warnings.catch_warnings():
            # peft reads an attribute that transformers 5 deprecates: not the user's concern.
            warnings.filterwarnings("ignore", ".*is_gradient_checkpointing", FutureWarning)
            wrapped = peft.get_peft_model(net, config)
    except ValueError as e:  # peft's "Target modules {...} not found in the base model"
        raise ConfigError(f"text-cls lora_targets {opts.lora_targets}: {first_line(e)}") from None
    info = {
        "r": opts.lora_r,
        "alpha": opts.lora_alpha,
        "dropout": opts.lora_dropout,
        "targets": list(opts.lora_targets),
        "modules_to_save": heads,
    }
    return wrapped, info


def parameter_counts(model: nn.Module) -> dict[str, Any]:
    """Trainable and total parameters (each tensor once, however often it is shared)."""
    params = list(model.parameters())
    trainable = sum(p.numel() for p in params if p.requires_grad)
    total = sum(p.numel() for p in params)
    return {
        "trainable_parameters": trainable,
        "total_parameters": total,
        "trainable_fraction": trainable / total if total else 0.0,
    }


# --------------------------------------------------------------------------- workload


def text_cls(cfg: WorkloadConfig, cache_dir: Path) -> Workload:
    """GLUE classification (SST-2, RTE, ...) with BERT/RoBERTa, full fine-tuning or LoRA.

    Data from ``cfg.data_dir`` (the GLUE TSVs) or, without one, through ``datasets``.
    ``cache_dir`` is unused: Hugging Face libraries keep their own cache (``HF_HOME``).
    """
    opts = parse_options(cfg.options)
    # Checked before any data is read, so a missing package fails fast and in one line.
    _require("transformers")
    if opts.pretrained is None:
        _require("tokenizers")
    if opts.lora_r > 0:
        _require("peft")
    task = glue_task(opts.task)
    train_split, dev_split = load_glue(
        task,
        cfg.data_dir,
        download=cfg.download,
        train_limit=opts.train_limit,
        eval_limit=opts.eval_limit,
    )

    encoder: TextEncoder
    notes: list[str] = []
    if opts.pretrained is not None:
        net, hf_tokenizer, note = pretrained_model(
            opts.pretrained, task.num_labels, download=cfg.download, dropout=opts.dropout
        )
        notes.append(note)
        encoder = PretrainedEncoder(hf_tokenizer)
        arch = f"pretrained {opts.pretrained}"
        artifacts: dict[str, Any] = {}
    else:
        texts = train_split.texts_a + (train_split.texts_b or [])
        tokenizer = train_wordpiece(texts, opts.vocab_size)
        encoder = WordPieceEncoder(tokenizer, token_types=opts.model == "bert")
        net = scratch_model(
            opts.model,
            opts.size,
            vocab_size=encoder.vocab_size,
            num_labels=task.num_labels,
            pad_id=encoder.pad_id,
            dropout=opts.dropout,
        )
        arch = f"{opts.model}-{opts.size} (random init)"
        # tokenizers' own JSON format: Tokenizer.from_str() rebuilds it from the run dir.
        artifacts = {"tokenizer": json.loads(tokenizer.to_str())}

    config = net.config
    num_layers, hidden = config.num_hidden_layers, config.hidden_size
    lora_info: dict[str, Any] | None = None
    if opts.lora_r > 0:
        net, lora_info = add_lora(net, opts)
    model = SequenceClassifier(
        net, task.num_labels, num_layers, pad_id=encoder.pad_id, max_length=opts.max_length
    )

    train_set = encode_split(encoder, train_split, opts.max_length)
    val_set = encode_split(encoder, dev_split, opts.max_length)
    counts = parameter_counts(model)
    info: dict[str, Any] = {
        "task": task.name,
        "model": opts.pretrained or f"{opts.model}-{opts.size}",
        "pretrained": opts.pretrained is not None,
        "num_layers": num_layers,
        "hidden_size": hidden,
        "vocab_size": encoder.vocab_size,
        "tokenizer": "pretrained" if opts.pretrained else "wordpiece trained on the train split",
        "max_length": opts.max_length,
        "dropout": opts.dropout,
        "train_samples": len(train_set),
        "eval_samples": len(val_set),
        "mean_tokens_per_sample": round(train_set.mean_tokens, 2),
        "eval_mean_tokens_per_sample": round(val_set.mean_tokens, 2),
        **counts,
        "lora": lora_info,
    }
    tuning = f"LoRA r={opts.lora_r} on {','.join(opts.lora_targets)}" if lora_info else "full"
    return Workload(
        name="text-cls",
        model=model,
        train_set=train_set,
        val_set=val_set,
        test_set=None,  # GLUE's test labels are hidden: the dev set is the evaluation split
        num_classes=task.num_labels,
        class_names=list(task.label_names),
        description=(
            f"GLUE {task.name}, {arch}, {tuning} fine-tuning, "
            f"{counts['trainable_parameters']:,}/{counts['total_parameters']:,} parameters trained"
        ),
        collate_fn=PadCollate(encoder.pad_id, opts.max_length),
        tokens_per_sample=None,  # variable length: the mean is in info
        info=info,
        artifacts=artifacts,
        notes=notes,
    )
