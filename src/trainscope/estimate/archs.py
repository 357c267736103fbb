"""Architectures: the shapes the estimator needs and exact parameter counts (no torch).

Four families, each matched to the model trainscope (or Hugging Face) builds:

- ``gpt``: the pre-norm decoder of :mod:`trainscope.workloads.gpt` (GPT-2's shape: learned
  positions, LayerNorm -> attention -> residual, LayerNorm -> 4x GELU MLP -> residual,
  final LayerNorm, head tied to the token embedding; biases optional);
- ``bert`` / ``roberta``: ``transformers``' ``BertForSequenceClassification`` (pooler +
  classifier) and ``RobertaForSequenceClassification`` (dense + out_proj head, no pooler);
- ``lenet``: :class:`trainscope.workloads.lenet.LeNet5`.

Counts are written from the layers' shapes; ``tests/estimate`` checks them against the
models themselves (built on the meta device, so nothing is allocated).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from trainscope.errors import ConfigError

KINDS = ("gpt", "bert", "roberta", "lenet")


@dataclass(frozen=True)
class Arch:
    """The shape of one model; which fields matter depends on ``kind``."""

    name: str
    kind: str
    """gpt | bert | roberta | lenet."""
    layers: int = 0
    """Transformer blocks L (the units activation checkpointing and FSDP wrap)."""
    hidden: int = 0
    """Width h of the residual stream."""
    heads: int = 0
    """Attention heads a."""
    vocab: int = 0
    """Token vocabulary V (GPT: also the tied output head's width)."""
    positions: int = 0
    """Learned position embeddings (GPT: n_ctx; BERT 512, RoBERTa 514)."""
    ffn: int = 0
    """Feed-forward width (4h in every model here)."""
    bias: bool = True
    """Biases in Linear and LayerNorm layers (GPT-2 has them; gpt-char's presets do not)."""
    dropout: float = 0.0
    """Dropout on embeddings and residual branches (BERT: hidden_dropout_prob)."""
    attn_dropout: float = 0.0
    """Dropout on attention probabilities (decides the CPU attention kernel: see activations)."""
    type_vocab: int = 0
    """BERT/RoBERTa token-type (segment) embeddings: 2 and 1."""
    num_labels: int = 2
    """Classifier outputs (BERT/RoBERTa)."""
    image: tuple[int, int, int] = (1, 28, 28)
    """LeNet input (C, H, W)."""
    num_classes: int = 10
    """LeNet outputs."""
    classifier_dropout: float | None = None
    """BERT/RoBERTa classifier dropout (None: the hidden dropout, as transformers does)."""
    params: int | None = None
    """A parameter count given by the user (``--params``): used instead of the shape's."""

    @property
    def head_dim(self) -> int:
        """h / a."""
        return self.hidden // self.heads if self.heads else 0


def _gpt(name: str, layers: int, hidden: int, heads: int) -> Arch:
    # GPT-2 (Radford et al. 2019): vocabulary 50257, context 1024, biases, dropout 0.1.
    return Arch(
        name,
        "gpt",
        layers=layers,
        hidden=hidden,
        heads=heads,
        vocab=50257,
        positions=1024,
        ffn=4 * hidden,
        bias=True,
        dropout=0.1,
        attn_dropout=0.1,
    )


def _bert(name: str, kind: str, layers: int, hidden: int, heads: int) -> Arch:
    vocab, positions, types = (30522, 512, 2) if kind == "bert" else (50265, 514, 1)
    return Arch(
        name,
        kind,
        layers=layers,
        hidden=hidden,
        heads=heads,
        vocab=vocab,
        positions=positions,
        ffn=4 * hidden,
        bias=True,
        dropout=0.1,
        attn_dropout=0.1,
        type_vocab=types,
    )


NAMED: dict[str, Arch] = {
    "gpt2-small": _gpt("gpt2-small", 12, 768, 12),
    "gpt2-medium": _gpt("gpt2-medium", 24, 1024, 16),
    "gpt2-large": _gpt("gpt2-large", 36, 1280, 20),
    "gpt2-xl": _gpt("gpt2-xl", 48, 1600, 25),
    "bert-base": _bert("bert-base", "bert", 12, 768, 12),
    "bert-large": _bert("bert-large", "bert", 24, 1024, 16),
    "roberta-base": _bert("roberta-base", "roberta", 12, 768, 12),
    "roberta-large": _bert("roberta-large", "roberta", 24, 1024, 16),
    "lenet5": Arch("lenet5", "lenet", layers=3),
}
ALIASES = {
    "gpt2": "gpt2-small",
    "gpt2-124m": "gpt2-small",
    "gpt2-355m": "gpt2-medium",
    "gpt2-774m": "gpt2-large",
    "gpt2-1.5b": "gpt2-xl",
    "bert-base-uncased": "bert-base",
    "bert-large-uncased": "bert-large",
    "lenet": "lenet5",
    "lenet-5": "lenet5",
}


def named(name: str) -> Arch:
    """A named architecture (see :data:`NAMED`, :data:`ALIASES`); ConfigError otherwise."""
    key = ALIASES.get(name.lower(), name.lower())
    if key not in NAMED:
        raise ConfigError(
            f"unknown architecture {name!r}: choose one of {', '.join(NAMED)} "
            "(or give --params with --layers/--hidden/--heads)"
        )
    return NAMED[key]


def custom(
    params: int | None,
    layers: int | None,
    hidden: int | None,
    heads: int | None,
    vocab: int | None,
    positions: int,
    dropout: float = 0.1,
) -> Arch:
    """``--params/--layers/--hidden/--heads/--vocab``: a GPT-2-style decoder of that shape.

    Without a shape only model states can be estimated (``params`` alone); heads default
    to h / 64 and the vocabulary to GPT-2's 50257.
    """
    if params is not None and params < 1:
        raise ConfigError(f"--params must be positive, got {params}")
    shape = (layers, hidden)
    if any(v is not None and v < 1 for v in (*shape, heads, vocab)):
        raise ConfigError("--layers, --hidden, --heads and --vocab must be positive")
    if (layers is None) != (hidden is None):
        raise ConfigError("give --layers and --hidden together (the model's shape)")
    if hidden is None:
        if params is None:
            raise ConfigError("give --arch, --workload, or --params (with or without a shape)")
        if heads is not None or vocab is not None:
            raise ConfigError("--heads and --vocab describe a shape: add --layers and --hidden")
        return Arch("custom", "gpt", params=params)
    heads = heads or max(1, hidden // 64)
    if hidden % heads:
        raise ConfigError(f"--hidden {hidden} must be divisible by --heads {heads}")
    return Arch(
        "custom",
        "gpt",
        layers=layers or 0,
        hidden=hidden,
        heads=heads,
        vocab=vocab or 50257,
        positions=positions,
        ffn=4 * hidden,
        bias=True,
        dropout=dropout,
        attn_dropout=dropout,
        params=params,
    )


def has_shape(arch: Arch) -> bool:
    """Whether activations can be estimated (a ``--params``-only model cannot)."""
    return arch.kind == "lenet" or arch.hidden > 0


def with_dropout(arch: Arch, p: float) -> Arch:
    """The same architecture with every dropout set to ``p``."""
    return replace(arch, dropout=p, attn_dropout=p, classifier_dropout=None)


# --------------------------------------------------------------------------- counts


@dataclass(frozen=True)
class ParamCounts:
    """Parameters of an architecture, each shared tensor (a tied head) once."""

    total: int
    tensors: int
    """Parameter tensors (Adam keeps a 4-byte ``step`` per tensor)."""
    per_block: tuple[int, ...]
    """Parameters of each block (the units FSDP shards and gathers one at a time)."""

    @property
    def root(self) -> int:
        """Parameters outside the blocks (embeddings, final norm, head): FSDP's root unit."""
        return self.total - sum(self.per_block)

    @property
    def largest_unit(self) -> int:
        """The most parameters one FSDP unit gathers at once."""
        return max((*self.per_block, self.root))


def _lenet_dims(arch: Arch) -> dict[str, int]:
    """LeNet5's layer sizes from its input, as :class:`~trainscope.workloads.lenet.LeNet5`
    computes them (3x3 kernels padded for images under 20 px, else 5x5)."""
    c, h, w = arch.image
    small = min(h, w) < 20
    k = 3 if small else 5
    # conv1 keeps the size (padding k // 2); pool halves; conv2 keeps it (small) or trims.
    p1h, p1w = h // 2, w // 2
    c2h, c2w = (p1h, p1w) if small else (p1h - k + 1, p1w - k + 1)
    p2h, p2w = c2h // 2, c2w // 2
    return {
        "c": c,
        "k": k,
        "h1": h,
        "w1": w,
        "p1": p1h * p1w,
        "c2": c2h * c2w,
        "p2": p2h * p2w,
        "features": 16 * p2h * p2w,
    }


def param_counts(arch: Arch) -> ParamCounts:
    """Exact parameters, tensors and per-block split of ``arch``."""
    if arch.kind == "lenet":
        d = _lenet_dims(arch)
        conv1 = 6 * d["c"] * d["k"] ** 2 + 6
        conv2 = 16 * 6 * d["k"] ** 2 + 16
        head = d["features"] * 120 + 120 + 120 * 84 + 84 + 84 * arch.num_classes + arch.num_classes
        return ParamCounts(conv1 + conv2 + head, 10, (conv1, conv2, head))
    h, f, b = arch.hidden, arch.ffn, int(arch.bias)
    if arch.kind == "gpt":
        if not h:  # --params alone: no shape, no blocks
            return ParamCounts(arch.params or 0, 0, ())
        ln = h * (1 + b)
        block = (
            2 * ln + (3 * h * h + 3 * h * b) + (h * h + h * b) + (h * f + f * b) + (f * h + h * b)
        )
        tensors = arch.layers * (6 * (1 + b)) + 2 + (1 + b)  # wte, wpe, ln_f; head tied
        root = arch.vocab * h + arch.positions * h + ln
        return _override(
            arch, ParamCounts(root + arch.layers * block, tensors, (block,) * arch.layers)
        )
    if arch.kind in ("bert", "roberta"):
        # Every Linear and LayerNorm of BERT/RoBERTa has a bias.
        emb = (arch.vocab + arch.positions + arch.type_vocab) * h + 2 * h
        attn = 4 * (h * h + h) + 2 * h  # query, key, value, output dense; LayerNorm
        mlp = (h * f + f) + (f * h + h) + 2 * h  # intermediate, output; LayerNorm
        block = attn + mlp
        # BERT: pooler (dense) + classifier; RoBERTa: classification head dense + out_proj.
        head = (h * h + h) + (h * arch.num_labels + arch.num_labels)
        tensors = 5 + 16 * arch.layers + 4
        return _override(
            arch, ParamCounts(emb + head + arch.layers * block, tensors, (block,) * arch.layers)
        )
    raise ConfigError(f"unknown architecture kind {arch.kind!r}")


def _override(arch: Arch, counts: ParamCounts) -> ParamCounts:
    """``--params`` given with a shape: its count replaces the shape's (the blocks keep
    the shape's sizes, the rest is put in the root)."""
    if arch.params is None:
        return counts
    blocks = counts.per_block if sum(counts.per_block) <= arch.params else ()
    return ParamCounts(arch.params, counts.tensors, blocks)


def buffer_bytes(arch: Arch) -> int:
    """Bytes of the model's buffers: BERT/RoBERTa keep ``position_ids`` and
    ``token_type_ids`` (1 x positions, int64 each); the others none."""
    return 2 * 8 * arch.positions if arch.kind in ("bert", "roberta") else 0


def describe(arch: Arch) -> str:
    """One line naming the shape."""
    if arch.kind == "lenet":
        c, h, w = arch.image
        return f"LeNet-5 on {c}x{h}x{w} inputs, {arch.num_classes} classes"
    if not arch.hidden:
        return f"{arch.params:,} parameters (no shape given)"
    family = {"gpt": "GPT (pre-norm decoder, tied head)", "bert": "BERT", "roberta": "RoBERTa"}
    return (
        f"{family[arch.kind]}: {arch.layers} layers x {arch.hidden} wide, {arch.heads} heads, "
        f"vocabulary {arch.vocab:,}"
    )


__all__ = [
    "ALIASES",
    "KINDS",
    "NAMED",
    "Arch",
    "ParamCounts",
    "buffer_bytes",
    "custom",
    "describe",
    "has_shape",
    "named",
    "param_counts",
    "with_dropout",
]
