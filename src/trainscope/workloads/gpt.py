"""``gpt-char``: a GPT-2-style decoder trained on Tiny Shakespeare one character at a time.

The model is the standard pre-norm transformer decoder: token + learned position
embeddings, ``n_layer`` blocks of (LayerNorm -> causal self-attention -> residual,
LayerNorm -> 4x GELU MLP -> residual), a final LayerNorm, and an output head that shares
its weight with the token embedding. Attention goes through
``torch.nn.functional.scaled_dot_product_attention(is_causal=True)``, so PyTorch picks the
fastest kernel the device has (flash / memory-efficient on GPUs).

Presets (``options.preset``): ``shakespeare`` (the default) is the well-known 6-layer,
6-head, 384-wide model with a 256-character context and dropout 0.2 (10.7M parameters);
``tiny`` (2 layers, 2 heads, 64 wide, context 64, no dropout) trains in seconds on a CPU;
``cpu`` (4 layers, 4 heads, 128 wide, context 64, no dropout: 0.8M parameters) is the
model nanoGPT's README trains on a CPU, with a time-to-target recipe of its own
(trainscope.recipes).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from trainscope.config import WorkloadConfig, gib, memory_budget_bytes, show
from trainscope.errors import ConfigError, DataError
from trainscope.workloads.base import LMMetrics, Workload, lm_loss  # noqa: F401 (re-exported)

# --------------------------------------------------------------------------- config


# Model shape and dropout per preset; vocab_size always comes from the corpus.
PRESETS: dict[str, dict[str, Any]] = {
    "tiny": {
        "n_layer": 2,
        "n_head": 2,
        "n_embd": 64,
        "block_size": 64,
        "dropout": 0.0,
        "bias": False,
    },
    "cpu": {  # nanoGPT's README CPU command: --n_layer=4 --n_head=4 --n_embd=128 ...
        "n_layer": 4,
        "n_head": 4,
        "n_embd": 128,
        "block_size": 64,
        "dropout": 0.0,
        "bias": False,
    },
    "shakespeare": {
        "n_layer": 6,
        "n_head": 6,
        "n_embd": 384,
        "block_size": 256,
        "dropout": 0.2,
        "bias": False,
    },
}
DEFAULT_PRESET = "shakespeare"
_DEFAULTS = PRESETS[DEFAULT_PRESET]


@dataclass
class GPTConfig:
    """The shape of a GPT model (validated on construction). The defaults are the default
    preset's (:data:`PRESETS`), with the 65 characters of Tiny Shakespeare."""

    vocab_size: int = 65
    """Number of distinct tokens (characters of the corpus for gpt-char)."""
    block_size: int = _DEFAULTS["block_size"]
    """Context length T: the longest sequence the model reads (position embeddings)."""
    n_layer: int = _DEFAULTS["n_layer"]
    """Number of transformer blocks L."""
    n_head: int = _DEFAULTS["n_head"]
    """Attention heads H per block; the head dimension is n_embd / n_head."""
    n_embd: int = _DEFAULTS["n_embd"]
    """Width C of the residual stream."""
    dropout: float = _DEFAULTS["dropout"]
    """Dropout on embeddings, attention weights and both residual branches (0 disables)."""
    bias: bool = _DEFAULTS["bias"]
    """Biases in the Linear and LayerNorm layers (GPT-2 had them; without is a little
    faster and trains as well)."""

    def __post_init__(self) -> None:
        for name in ("vocab_size", "block_size", "n_layer", "n_head", "n_embd"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"gpt {name} must be a positive integer, got {show(value)}")
        if self.n_embd % self.n_head:
            raise ConfigError(
                f"gpt n_embd ({show(self.n_embd)}) must be divisible by n_head "
                f"({show(self.n_head)})"
            )
        if isinstance(self.dropout, bool) or not isinstance(self.dropout, (int, float)):
            raise ConfigError(f"gpt dropout must be a number in [0, 1), got {show(self.dropout)}")
        if not 0.0 <= self.dropout < 1.0:  # NaN fails this too
            raise ConfigError(f"gpt dropout must be in [0, 1), got {show(self.dropout)}")
        self.dropout = float(self.dropout)
        if not isinstance(self.bias, bool):
            raise ConfigError(f"gpt bias must be true or false, got {self.bias!r}")
        # The model is built in host memory first: refuse a shape whose fp32 weights alone
        # cannot fit there, rather than fail (or swap) allocating them.
        n_params = flop_params(self) + self.block_size * self.n_embd
        budget = memory_budget_bytes()
        if 4 * n_params > budget:
            raise ConfigError(
                f"gpt model of {n_params:.3g} parameters needs {gib(4 * n_params)} for its "
                f"weights alone, more than the {gib(budget)} allowed (half of this machine's "
                f"memory): lower n_layer, n_embd or block_size"
            )

    @property
    def head_dim(self) -> int:
        """Q = n_embd / n_head."""
        return self.n_embd // self.n_head


DEFAULT_EVAL_WINDOWS = 640
"""Validation windows: 20 batches of the default batch size 32. A window count rather than
a batch count, so the validation estimate does not change with the batch size."""
MAX_EVAL_TOKENS = 1 << 26
"""eval_windows x block_size at most: the validation windows are held in memory as int64
inputs and targets (512 MiB each at this bound; the default is 640 x 256)."""
OPTION_KEYS = ("preset", *PRESETS[DEFAULT_PRESET], "eval_windows")


def check_options(options: Mapping[str, Any]) -> None:
    """Raise ConfigError for any bad gpt-char option, without reading the corpus (a run
    checks this before it creates its run directory). The corpus's size stands in for the
    vocabulary, which only the corpus knows."""
    _, fields, eval_windows = resolve_options(options)
    GPTConfig(vocab_size=65, **fields)
    _check_eval_size(eval_windows, fields["block_size"])


def layout(options: Mapping[str, Any]) -> dict[str, Any]:
    """Blocks and heads of the model these options make (for checks before a run)."""
    _, fields, _ = resolve_options(options)
    return {"blocks": fields["n_layer"], "heads": fields["n_head"], "pipeline": True,
            "tp": True, "sequence_parallel": True, "sequence": fields["block_size"]}  # fmt: skip


def resolve_options(options: Mapping[str, Any]) -> tuple[str, dict[str, Any], int]:
    """``cfg.options`` -> (preset name, GPTConfig fields except vocab_size, eval_windows).

    A preset's values are the defaults; any model key given overrides it. Raises
    ConfigError naming an unknown key (and listing the allowed ones), an unknown preset,
    or a bad eval_windows; the model values themselves are checked by :class:`GPTConfig`.
    """
    unknown = [k for k in options if k not in OPTION_KEYS]
    if unknown:
        raise ConfigError(
            f"gpt-char: unknown option {unknown[0]!r}; allowed: {', '.join(OPTION_KEYS)}"
        )
    preset = options.get("preset", DEFAULT_PRESET)
    if preset not in PRESETS:
        raise ConfigError(
            f"gpt-char: unknown preset {preset!r}; choose one of {', '.join(PRESETS)}"
        )
    fields = dict(PRESETS[preset])
    fields.update({k: options[k] for k in fields if k in options})
    eval_windows = options.get("eval_windows", DEFAULT_EVAL_WINDOWS)
    if isinstance(eval_windows, bool) or not isinstance(eval_windows, int) or eval_windows < 1:
        raise ConfigError(
            f"gpt-char: eval_windows must be a positive integer, got {show(eval_windows)}"
        )
    return preset, fields, eval_windows


def _check_eval_size(eval_windows: int, block_size: int) -> None:
    """The validation windows are held in memory whole: bound their tokens."""
    if eval_windows * block_size > MAX_EVAL_TOKENS:
        raise ConfigError(
            f"gpt-char: eval_windows x block_size = {eval_windows} x {block_size} validation "
            f"tokens, more than the {MAX_EVAL_TOKENS} held in memory at most: lower "
            f"eval_windows or block_size"
        )


def min_corpus_chars(block_size: int) -> int:
    """The fewest characters a corpus needs for gpt-char: a window of ``block_size`` plus
    its next character in both the training and the validation part of the split."""
    from trainscope.data.text import TRAIN_FRACTION

    n = max(int((block_size + 1) / (1 - TRAIN_FRACTION)) - 10, 2)
    while not (block_size < int(n * TRAIN_FRACTION) < n - block_size):
        n += 1
    return n


# --------------------------------------------------------------------------- model


class CausalSelfAttention(nn.Module):
    """Multi-head self-attention where position t only sees positions <= t."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.n_head = cfg.n_head
        self.head_dim = cfg.n_embd // cfg.n_head
        self.qkv = nn.Linear(cfg.n_embd, 3 * cfg.n_embd, bias=cfg.bias)  # one matmul for all
        self.proj = nn.Linear(cfg.n_embd, cfg.n_embd, bias=cfg.bias)
        self.attn_dropout = cfg.dropout
        self.resid_dropout = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        # Sizes from the projection's output, not the config: under tensor parallelism a
        # rank's qkv holds only its own heads' queries, keys and values.
        q, k, v = self.qkv(x).chunk(3, dim=2)
        # (B, T, C) -> (B, H, T, Q): heads become a batch dimension of the attention kernel.
        q, k, v = (z.view(b, t, -1, self.head_dim).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(
            q, k, v, dropout_p=self.attn_dropout if self.training else 0.0, is_causal=True
        )
        y = y.transpose(1, 2).reshape(b, t, -1)  # heads back side by side
        return self.resid_dropout(self.proj(y))


class MLP(nn.Module):
    """Position-wise feed-forward: C -> 4C -> GELU -> C."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.fc = nn.Linear(cfg.n_embd, 4 * cfg.n_embd, bias=cfg.bias)
        self.act = nn.GELU(approximate="tanh")  # GPT-2's GELU
        self.proj = nn.Linear(4 * cfg.n_embd, cfg.n_embd, bias=cfg.bias)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.proj(self.act(self.fc(x))))


class Block(nn.Module):
    """One pre-norm transformer block: x + attn(ln(x)), then x + mlp(ln(x))."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.n_embd, bias=cfg.bias)
        self.attn = CausalSelfAttention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.n_embd, bias=cfg.bias)
        self.mlp = MLP(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    """A GPT-2-style decoder: ``forward(idx (B, T) int64) -> logits (B, T, vocab_size)``.

    ``blocks`` is the ``nn.ModuleList`` of transformer blocks, the units that activation
    checkpointing and FSDP wrap one by one.
    """

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.config = cfg
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.pos_emb = nn.Embedding(cfg.block_size, cfg.n_embd)
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.n_embd, bias=cfg.bias)
        self.head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        # Weight tying: reading a token and predicting one use the same vectors, which
        # saves V*C parameters and helps small models generalise.
        self.head.weight = self.tok_emb.weight
        self.apply(self._init_weights)
        # GPT-2's residual scaling: each block adds two branches to the residual stream, so
        # the projections that write into it start 1/sqrt(2L) smaller, keeping the stream's
        # variance from growing with depth.
        for block in self.blocks:
            for proj in (block.attn.proj, block.mlp.proj):
                nn.init.normal_(proj.weight, mean=0.0, std=0.02 / math.sqrt(2 * cfg.n_layer))

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    # What runs before the first block and after the last, by module name: a pipeline
    # puts the first on its first stage and the second on its last (strategies.pipeline).
    pipeline_in = ("tok_emb", "pos_emb", "drop")
    pipeline_out = ("ln_f", "head")
    # Tensor parallelism inside each block (strategies.tensor_parallel): Megatron-LM's
    # split, the fused Q/K/V by heads.
    tp_plan = {
        "attn.qkv": "colwise-fused3",
        "attn.proj": "rowwise",
        "mlp.fc": "colwise",
        "mlp.proj": "rowwise",
    }

    # Sequence parallelism (tp --sequence-parallel): the norms, dropouts and residual
    # stream run on each rank's share of the sequence; attention and the MLP gather the
    # whole sequence first (their own split is tp_plan's), and so does the head.
    sp_plan = {"ln_1": "sequence", "attn": "gather", "ln_2": "sequence", "mlp": "gather"}
    sp_ends = {"drop": "scatter", "ln_f": "sequence", "head": "gather"}

    def forward_in(self, idx: torch.Tensor) -> torch.Tensor:
        """Token ids (B, T), T <= block -> the first block's input (B, T, C)."""
        _, t = idx.shape
        if t > self.config.block_size:
            raise ValueError(f"sequence of {t} tokens exceeds block_size {self.config.block_size}")
        pos = torch.arange(t, device=idx.device)
        return self.drop(self.tok_emb(idx) + self.pos_emb(pos))

    def forward_out(self, x: torch.Tensor) -> torch.Tensor:
        """The last block's output (B, T, C) -> next-token logits (B, T, vocab_size)."""
        return self.head(self.ln_f(x))

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        """Next-token logits at every position of a batch of token ids (B, T), T <= block."""
        x = self.forward_in(idx)
        for block in self.blocks:
            x = block(x)
        return self.forward_out(x)


def count_params(model: nn.Module) -> int:
    """Parameters of a model, each shared tensor (the tied head) counted once."""
    return sum(p.numel() for p in model.parameters())


def flop_params(cfg: GPTConfig) -> int:
    """N of :func:`flops_per_token`: the model's parameters minus the position embeddings.

    Equal to ``count_params(GPT(cfg)) - block_size * n_embd``, computed from the shape
    alone. The tied token embedding stays in: as the output head it is a V x C matmul.
    """
    c, bias = cfg.n_embd, int(cfg.bias)
    ln = c * (1 + bias)  # weight (+ bias)
    per_layer = 2 * ln + (3 * c * c + 3 * c * bias) + (c * c + c * bias)  # norms, attention
    per_layer += (4 * c * c + 4 * c * bias) + (4 * c * c + c * bias)  # MLP
    return cfg.n_layer * per_layer + ln + cfg.vocab_size * c


def flops_per_token(cfg: GPTConfig, n_params: int | None = None) -> float:
    """Training FLOPs (forward + backward) per token: ``6 N + 12 L H Q T``.

    ``6 N``: every weight of a matmul costs 2 FLOPs per token forward (multiply + add) and
    4 backward (the gradients of the input and of the weight). N counts every parameter
    except the position embeddings (:func:`flop_params`, or ``n_params`` if given): a
    position embedding is a table lookup, costing no FLOPs. The token embedding *is*
    counted, once: its lookup is free too, but the same tensor is the output head, a
    ``C x V`` matmul. LayerNorm weights and biases are counted although they cost far less
    than 6 FLOPs each; they are a fraction of a percent of N, the usual simplification.

    ``12 L H Q T``: attention itself, weight-free. Per layer and token the scores ``q.k``
    and the weighted sum of values are each ``2 H Q T`` FLOPs forward over a context of
    T = ``block_size`` (the length of every training window); backward doubles them:
    ``3 * 2 * 2 H Q T``. The causal mask is ignored (the kernels compute whole tiles), as
    in the PaLM paper's MFU accounting, from which this formula comes.
    """
    n = flop_params(cfg) if n_params is None else n_params
    attn = 12 * cfg.n_layer * cfg.n_head * cfg.head_dim * cfg.block_size
    return float(6 * n + attn)


@torch.no_grad()
def generate(
    model: nn.Module,
    idx: torch.Tensor,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Extend each row of ``idx`` (B, T0) by ``max_new_tokens`` sampled tokens.

    Each step feeds the last ``block_size`` tokens, divides the last position's logits by
    ``temperature`` (0 means greedy: always the most likely token), keeps only the
    ``top_k`` most likely tokens if given, and samples with ``generator``. The model is
    put in eval mode for the call and given back in the mode it had.
    """
    if not (math.isfinite(temperature) and temperature >= 0):
        raise ValueError(f"temperature must be a finite number >= 0, got {temperature}")
    if top_k is not None and top_k < 1:
        raise ValueError(f"top_k must be positive, got {top_k}")
    block_size = model.config.block_size
    was_training = model.training
    t0 = idx.shape[1]
    # One buffer for the whole result: appending with torch.cat would copy the sequence
    # at every step, quadratic in its length.
    out = torch.empty(idx.shape[0], t0 + max_new_tokens, dtype=idx.dtype, device=idx.device)
    out[:, :t0] = idx
    model.eval()
    try:
        for t in range(t0, t0 + max_new_tokens):
            logits = model(out[:, max(t - block_size, 0) : t])[:, -1, :].float()
            if temperature == 0:
                nxt = logits.argmax(dim=-1, keepdim=True)
            else:
                if top_k is not None and top_k < logits.shape[-1]:
                    kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]
                    logits = logits.masked_fill(logits < kth, float("-inf"))
                # Shift so the largest logit is 0 before dividing: a tiny temperature then
                # sends the others to -inf (probability 0), never the largest to inf (NaN).
                logits = (logits - logits.amax(dim=-1, keepdim=True)) / temperature
                probs = torch.softmax(logits, dim=-1)
                nxt = torch.multinomial(probs, 1, generator=generator)
            out[:, t : t + 1] = nxt
    finally:
        model.train(was_training)
    return out


# --------------------------------------------------------------------------- loss, metrics


# lm_loss and LMMetrics live in trainscope.workloads.base (any language-modelling
# workload uses them); imported above.


# --------------------------------------------------------------------------- the workload


def gpt_char(cfg: WorkloadConfig, cache_dir: Path) -> Workload:
    """Tiny Shakespeare, character level, a GPT of the chosen preset (see module docs).

    The training set is every window of ``block_size`` characters of the first 90% of the
    corpus (random windows under a shuffled loader); validation is ``eval_windows`` fixed,
    evenly spaced windows of the last 10%; there is no test set.
    """
    from trainscope.data.text import (
        CharVocab,
        CharWindows,
        ensure_shakespeare,
        fixed_windows,
        read_text,
        split_train_val,
    )

    preset, fields, eval_windows = resolve_options(cfg.options)
    # Check the model options before touching (or downloading) any data.
    GPTConfig(vocab_size=1, **fields)
    _check_eval_size(eval_windows, fields["block_size"])
    path = ensure_shakespeare(cfg.data_dir, cache_dir, download=cfg.download)
    text = read_text(path)
    t = fields["block_size"]
    need = min_corpus_chars(t)
    if len(text) < need:
        held = f"{len(text)} character" + ("" if len(text) == 1 else "s")
        raise DataError(
            f"{path} holds {held}; gpt-char with block_size {t} needs at least {need} (a "
            f"window of {t} + 1 characters in both the 90% training and the 10% validation "
            f"part): use a longer text or a smaller --block-size"
        )
    vocab = CharVocab.from_text(text)
    ids = torch.tensor(vocab.encode(text), dtype=torch.int64)
    train_ids, val_ids = split_train_val(ids)
    # The data first: a model is only built once the windows it needs exist.
    train_set = CharWindows(train_ids, t)
    val_set = fixed_windows(val_ids, t, eval_windows)
    gpt_cfg = GPTConfig(vocab_size=len(vocab), **fields)
    model = GPT(gpt_cfg)
    per_token = flops_per_token(gpt_cfg)
    n_params = count_params(model)
    info = {
        "preset": preset,
        **{k: getattr(gpt_cfg, k) for k in PRESETS[DEFAULT_PRESET]},
        "vocab_size": gpt_cfg.vocab_size,
        "train_chars": len(train_ids),
        "val_chars": len(val_ids),
        "eval_windows": len(val_set),
        "n_params": n_params,
        "n_params_flops": flop_params(gpt_cfg),
        "flops_per_token": per_token,
    }
    return Workload(
        name="gpt-char",
        model=model,
        train_set=train_set,
        val_set=val_set,
        test_set=None,
        num_classes=gpt_cfg.vocab_size,
        loss_fn=lm_loss,
        description=(
            f"Tiny Shakespeare (characters, {len(vocab)} symbols), GPT {preset}: "
            f"{gpt_cfg.n_layer} layers x {gpt_cfg.n_embd} wide, {gpt_cfg.n_head} heads, "
            f"context {t}, {n_params / 1e6:.2f}M parameters"
        ),
        task="language-modelling",
        metrics_factory=LMMetrics,
        tokens_per_sample=t,
        flops_per_sample=per_token * t,
        info=info,
        artifacts={"vocab": vocab.to_dict(), "gpt_config": dataclasses.asdict(gpt_cfg)},
    )
