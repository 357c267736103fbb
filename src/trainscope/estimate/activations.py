"""Saved activations, per op, per architecture and checkpointing policy (no torch).

What a training step keeps for backward is what each op saves through autograd (the
memory meter counts exactly that: :class:`trainscope.profiling.memory.SavedActivations`).
The plans below list, op by op, the tensors the models here save, from how the ops are
written in PyTorch and ``transformers``:

- ``Linear`` saves its input (and its weight, a parameter: not an activation);
- ``LayerNorm`` saves its input and its per-row mean and rstd (fp32);
- ``GELU`` saves its input, ``ReLU`` and ``tanh`` their output, ``MaxPool2d`` its input and
  the int64 indices of the maxima, ``Conv2d`` its input;
- dropout with p > 0 saves its mask: on a GPU a 1-byte bool mask (``native_dropout``); on
  the CPU a mask of the input's dtype scaled by 1 / (1 - p) (``at::dropout`` multiplies by
  it), so 4 bytes per element in fp32;
- attention (``scaled_dot_product_attention``) on a fused kernel (flash, or the memory-
  efficient one) saves q, k, v, its output and the row logsumexp (fp32), never the T x T
  scores. PyTorch's CPU flash kernel takes no dropout: with attention dropout on the CPU
  the math kernel runs, which upcasts to fp32 and saves copies of q, k, v, the softmax
  output, the dropout mask and the dropped probabilities (three B x a x T x T tensors:
  the ``5as/h`` term of Korthikanti et al. 2022, in fp32);
- cross entropy saves its log-softmax output (B x T x V for a language model), the
  int64 targets and a one-element fp32 weight total; an embedding saves its int64 ids.

A tensor's dtype class says what its element size is under each precision (see
:func:`nbytes`). A checkpointed block keeps only its inputs; the selective policy also
keeps the outputs of its matmuls and attention kernels
(:func:`trainscope.techniques.activation_checkpointing._saved_ops`), which the meter counts apart.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

from trainscope.config import checkpointing_policy
from trainscope.errors import ConfigError
from trainscope.estimate.archs import Arch, _lenet_dims

DTYPES = ("stream", "low", "cast", "f32", "i64", "bool")
"""Dtype classes of a saved tensor:

- ``stream``: the residual stream and what autocast computes in fp32 (LayerNorm inputs,
  the log-softmax): fp32 under fp32 and autocast, 16-bit under amp and bf16;
- ``low``: matmul outputs and the element-wise ops after them: fp32 only under fp32;
- ``cast``: a Linear's (or conv's) input taken from the stream: the stream tensor itself,
  except under autocast, where each such op saves its own 16-bit copy;
- ``f32``: always fp32 (norm statistics, logsumexp, the math attention kernel);
- ``i64`` / ``bool``: ids and indices / masks.
"""


@dataclass(frozen=True)
class Saved:
    """One tensor saved for backward."""

    what: str
    elements: int
    dtype: str
    mask: bool = False
    """A dropout mask: 1 byte per element on a GPU, the dropped tensor's dtype on the CPU."""
    key: str | None = None
    """Tensors with the same key are one storage (counted once per step)."""
    casts: int = 1
    """``cast`` under autocast: how many ops each save their own copy (BERT's q, k, v: 3)."""
    autocast_elements: int | None = None
    """``cast`` under autocast, when the copy is smaller than the storage a view keeps
    (BERT's pooler reads the [CLS] row: a view keeps the whole output, a cast copies a row)."""


@dataclass(frozen=True)
class BlockPlan:
    """What one block (a unit of ``model.blocks``) saves, under each policy."""

    saved: tuple[Saved, ...]
    """Without checkpointing: every tensor its ops save (its input among them)."""
    inputs: tuple[Saved, ...]
    """Checkpointed: what the checkpoint keeps (its inputs)."""
    kept: tuple[Saved, ...] = ()
    """Selective: the matmul and attention outputs the policy keeps as well."""
    matmul_weights: int = 0
    """Weight elements its matmuls and convolutions read (autocast copies them)."""


@dataclass(frozen=True)
class ActivationPlan:
    """Everything a step saves: outside the blocks (embeddings, head, loss) and per block."""

    outside: tuple[Saved, ...]
    blocks: tuple[BlockPlan, ...]
    outside_matmul_weights: int = 0
    attention: str = "none"
    """fused | math | none: the attention kernel the estimate assumes."""
    notes: tuple[str, ...] = ()


@dataclass
class ActivationBytes:
    """Saved-activation bytes of one step, split as the memory meter splits them."""

    saved_by_autograd: int = 0
    selective_saved: int = 0
    autocast_weight_copies: int = 0
    outside_blocks: int = 0
    blocks: int = 0
    """Of the total, the part saved by (or for) the blocks."""
    checkpointed_blocks: int = 0
    recompute_peak: int = 0
    """Bytes a checkpointed block saves again while backward recomputes it (the largest)."""
    attention: str = "none"
    notes: list[str] = field(default_factory=list)

    @property
    def total(self) -> int:
        """Activations proper, as the meter reports them (weight copies apart)."""
        return self.saved_by_autograd + self.selective_saved


def element_size(dtype: str, precision: str) -> int:
    """Bytes per element of dtype class ``dtype`` under ``precision`` (see :data:`DTYPES`)."""
    if dtype in ("stream", "cast"):
        return 4 if precision in ("fp32", "autocast") else 2
    if dtype == "low":
        return 4 if precision == "fp32" else 2
    return {"f32": 4, "i64": 8, "bool": 1}[dtype]


def nbytes(s: Saved, precision: str, device: str) -> int:
    """Bytes of one saved tensor."""
    if s.mask and device == "cuda":
        return s.elements  # native_dropout's bool mask
    if s.dtype == "cast" and precision == "autocast":
        return 2 * s.casts * (s.autocast_elements or s.elements)
    return element_size(s.dtype, precision) * s.elements


def _total(terms: Iterable[Saved], precision: str, device: str, seen: set[str]) -> int:
    """Bytes of ``terms``, a keyed storage once (``seen`` carries keys across calls)."""
    n = 0
    for s in terms:
        if s.key is not None:
            if s.key in seen:
                continue
            seen.add(s.key)
        n += nbytes(s, precision, device)
    return n


# --------------------------------------------------------------------------- plans


def _attention_kernel(arch: Arch, device: str) -> str:
    """The kernel SDPA runs in training: PyTorch's CPU flash kernel has no dropout, so
    attention dropout on the CPU means the math kernel; GPUs run fused kernels with it."""
    return "math" if device == "cpu" and arch.attn_dropout > 0 else "fused"


def _lse(b: int, a: int, t: int, device: str) -> int:
    # The CUDA memory-efficient kernel pads logsumexp's rows to a multiple of 32.
    return b * a * (math.ceil(t / 32) * 32 if device == "cuda" else t)


def gpt_plan(arch: Arch, batch: int, seq_len: int, device: str) -> ActivationPlan:
    """trainscope's GPT (:class:`trainscope.workloads.gpt.Block`), op by op."""
    b, t, c, a, f, v = batch, seq_len, arch.hidden, arch.heads, arch.ffn, arch.vocab
    bt, btc, btf, scores = b * t, b * t * c, b * t * f, b * a * t * t
    p = arch.dropout
    kernel = _attention_kernel(arch, device)
    s: list[Saved] = [
        Saved("ln_1 input: the block's input (residual stream)", btc, "stream"),
        Saved("ln_1 mean, rstd", 2 * bt, "f32"),
        Saved("qkv Linear input (ln_1 output)", btc, "cast"),
    ]
    s += _saved_attention(kernel, btc, scores, _lse(b, a, t, device), "proj Linear")
    s += _saved_mlp(arch, bt, btc, btf)
    block = BlockPlan(
        saved=tuple(s),
        inputs=(Saved("block input", btc, "stream"),),
        kept=tuple(_kept(arch, kernel, btc, btf, scores, _lse(b, a, t, device))),
        matmul_weights=4 * c * c + 2 * c * f,
    )
    outside = [
        Saved("token ids (token embedding)", bt, "i64"),
        Saved("positions (position embedding)", t, "i64"),
    ]
    if p > 0:
        outside.append(Saved("embedding dropout mask", btc, "stream", mask=True))
    outside += [
        Saved("ln_f input: the last block's output", btc, "stream"),
        Saved("ln_f mean, rstd", 2 * bt, "f32"),
        Saved("head Linear input (ln_f output)", btc, "cast"),
        *_cross_entropy(bt, v),
    ]
    return ActivationPlan(
        tuple(outside),
        (block,) * arch.layers,
        outside_matmul_weights=v * c,  # the tied head
        attention=kernel,
    )


def _saved_attention(kernel: str, btc: int, scores: int, lse: int, proj: str) -> list[Saved]:
    """What attention saves without checkpointing. The math kernel (fp32) keeps copies of
    q, k, v, the T x T softmax output, its dropout mask and the dropped probabilities, and
    the heads side by side (a copy) as the ``proj`` Linear's input; a fused kernel keeps q,
    k, v, the row logsumexp and its output (a view of which is that input)."""
    if kernel == "math":
        return [
            Saved("attention, math kernel (fp32): q, k, v copies for the bmm", 3 * btc, "f32"),
            Saved("attention softmax output", scores, "f32"),
            Saved("attention dropout mask", scores, "f32", mask=True),
            Saved("dropped attention probabilities (bmm input)", scores, "f32"),
            Saved(f"{proj} input (attention output, heads side by side: a copy)", btc, "low"),
        ]
    return [
        Saved("attention, fused kernel: q, k, v", 3 * btc, "low"),
        Saved("attention logsumexp", lse, "f32"),
        Saved(f"attention output (a view of it is the {proj} input)", btc, "low"),
    ]


def _kept_attention(kernel: str, btc: int, scores: int, lse: int) -> list[Saved]:
    """What selective checkpointing keeps of attention: the math kernel's two bmm outputs
    (the T x T scores, the context), or a fused kernel's output and row logsumexp."""
    if kernel == "math":
        return [
            Saved("attention scores q k^T (bmm output)", scores, "f32"),
            Saved("attention output (bmm output)", btc, "f32"),
        ]
    return [Saved("attention output", btc, "low"), Saved("attention logsumexp", lse, "f32")]


# The tensors GPT's block and BERT's layer both save, named as GPT names them -> as BERT
# (and RoBERTa) does: the same ops, with the LayerNorm between attention and the MLP
# GPT's ln_2 (pre-norm) and BERT's attention LayerNorm (post-norm).
_BERT_NAMES = {
    "residual dropout mask (attention branch)": "attention output dropout mask",
    "ln_2 input (residual stream)": "attention LayerNorm input (residual sum)",
    "ln_2 mean, rstd": "attention LayerNorm mean, rstd",
    "fc Linear input (ln_2 output)": "intermediate Linear input",
    "GELU input (fc output)": "GELU input (intermediate output)",
    "proj Linear input (GELU output)": "output Linear input (GELU output)",
    "residual dropout mask (MLP branch)": "output dropout mask",
    "qkv output": "query, key, value outputs",
    "attention proj output": "attention output dense output",
    "fc output": "intermediate output",
    "MLP proj output": "output dense output",
}


def _named(arch: Arch, name: str, elements: int, dtype: str, mask: bool = False) -> Saved:
    """A tensor both GPT and BERT save, under ``arch``'s name for it (see _BERT_NAMES)."""
    return Saved(name if arch.kind == "gpt" else _BERT_NAMES[name], elements, dtype, mask=mask)


def _saved_mlp(arch: Arch, bt: int, btc: int, btf: int) -> list[Saved]:
    """What a transformer block saves from its attention branch's dropout to its MLP's:
    the dropout masks (with dropout), a LayerNorm, and the 4x GELU MLP's inputs."""
    p = arch.dropout
    s: list[Saved] = []
    if p > 0:
        s.append(_named(arch, "residual dropout mask (attention branch)", btc, "low", True))
    s += [
        _named(arch, "ln_2 input (residual stream)", btc, "stream"),
        _named(arch, "ln_2 mean, rstd", 2 * bt, "f32"),
        _named(arch, "fc Linear input (ln_2 output)", btc, "cast"),
        _named(arch, "GELU input (fc output)", btf, "low"),
        _named(arch, "proj Linear input (GELU output)", btf, "low"),
    ]
    if p > 0:
        s.append(_named(arch, "residual dropout mask (MLP branch)", btc, "low", True))
    return s


def _kept(arch: Arch, kernel: str, btc: int, btf: int, scores: int, lse: int) -> list[Saved]:
    """What selective checkpointing keeps of a transformer block: its matmul outputs and
    those of attention (see :func:`_kept_attention`)."""
    return [
        _named(arch, "qkv output", 3 * btc, "low"),
        *_kept_attention(kernel, btc, scores, lse),
        _named(arch, "attention proj output", btc, "low"),
        _named(arch, "fc output", btf, "low"),
        _named(arch, "MLP proj output", btc, "low"),
    ]


def _cross_entropy(rows: int, classes: int) -> list[Saved]:
    return [
        Saved("cross entropy: log-softmax output", rows * classes, "stream"),
        Saved("cross entropy: targets", rows, "i64"),
        Saved("cross entropy: weight total", 1, "f32"),
    ]


def bert_plan(arch: Arch, batch: int, seq_len: int, device: str) -> ActivationPlan:
    """``transformers``' BERT/RoBERTa sequence classifiers (SDPA attention), op by op.

    ``seq_len`` is the padded length of the batch (text-cls pads to the longest sequence
    in each batch, at most max_length). With more than one sequence a batch is assumed to
    hold padding, so an attention mask exists (transformers drops an all-ones one).
    """
    b, t, c, a, f = batch, seq_len, arch.hidden, arch.heads, arch.ffn
    bt, btc, btf, bc, scores = b * t, b * t * c, b * t * f, b * c, b * a * t * t
    p = arch.dropout
    # transformers' classifier dropout falls back to the hidden dropout when unset.
    pc = p if arch.classifier_dropout is None else arch.classifier_dropout
    padded = b > 1
    kernel = _attention_kernel(arch, device)
    s: list[Saved] = [
        Saved("query/key/value Linear input: the layer's input", btc, "cast", casts=3)
    ]
    s += _saved_attention(kernel, btc, scores, _lse(b, a, t, device), "output dense")
    if kernel != "math":
        if padded:  # the fused kernels take the padding mask as an additive float mask
            s.append(Saved("padding mask as an additive float mask (per layer)", b * t * t, "low"))
    s += _saved_mlp(arch, bt, btc, btf)
    s += [
        Saved("output LayerNorm input (residual sum)", btc, "stream"),
        Saved("output LayerNorm mean, rstd", 2 * bt, "f32"),
    ]
    kept = _kept(arch, kernel, btc, btf, scores, _lse(b, a, t, device))
    inputs = [Saved("layer input", btc, "stream")]
    if padded:  # a checkpoint keeps every tensor argument: the bool mask, one for all layers
        inputs.append(
            Saved("padding mask (bool, shared by the layers)", b * t * t, "bool", key="mask")
        )
    block = BlockPlan(tuple(s), tuple(inputs), tuple(kept), 4 * c * c + 2 * c * f)

    roberta = arch.kind == "roberta"
    outside = [
        Saved("input ids (word embedding)", bt, "i64"),
        Saved("token type ids (token type embedding)", bt, "i64"),
        # BERT slices its position_ids buffer: the slice keeps the whole buffer alive.
        Saved("position ids (RoBERTa: from the input ids)", bt, "i64")
        if roberta
        else Saved("position ids: a slice of the position_ids buffer", arch.positions, "i64"),
        Saved("embedding LayerNorm input (sum of the embeddings)", btc, "stream"),
        Saved("embedding LayerNorm mean, rstd", 2 * bt, "f32"),
    ]
    if p > 0:
        outside.append(Saved("embedding dropout mask", btc, "stream", mask=True))
    cls_view = Saved(
        "first dense input: the [CLS] row, a view keeping the last layer's whole output",
        btc,
        "cast",
        autocast_elements=bc,
    )
    if roberta:  # dropout -> dense -> tanh -> dropout -> out_proj
        if pc > 0:
            outside += [
                Saved("head dropout mask", bc, "stream", mask=True),
                Saved("head dense input (dropout output)", bc, "cast"),
            ]
        else:
            outside.append(cls_view)
    else:  # pooler dense -> tanh, then dropout -> classifier
        outside.append(cls_view)
    outside.append(Saved("tanh output", bc, "low"))
    if pc > 0:
        outside += [
            Saved("classifier dropout mask", bc, "low", mask=True),
            Saved("classifier input (dropout output)", bc, "low"),
        ]
    outside += _cross_entropy(b, arch.num_labels)
    return ActivationPlan(
        tuple(outside),
        (block,) * arch.layers,
        outside_matmul_weights=c * c + c * arch.num_labels,
        attention=kernel,
    )


def lenet_plan(arch: Arch, batch: int) -> ActivationPlan:
    """:class:`trainscope.workloads.lenet.LeNet5`'s three blocks, op by op."""
    d, b, k = _lenet_dims(arch), batch, arch.num_classes
    c, h, w = arch.image
    conv = BlockPlan(
        saved=(
            Saved("conv1 input (the images)", b * c * h * w, "cast"),
            Saved("ReLU output (also the max-pool input)", b * 6 * h * w, "low"),
            Saved("max-pool indices", b * 6 * d["p1"], "i64"),
        ),
        inputs=(Saved("block input (the images)", b * c * h * w, "stream"),),
        matmul_weights=6 * c * d["k"] ** 2,
    )
    conv2 = BlockPlan(
        saved=(
            Saved("conv2 input (max-pool output)", b * 6 * d["p1"], "low"),
            Saved("ReLU output (also the max-pool input)", b * 16 * d["c2"], "low"),
            Saved("max-pool indices", b * 16 * d["p2"], "i64"),
        ),
        inputs=(Saved("block input", b * 6 * d["p1"], "low"),),
        matmul_weights=16 * 6 * d["k"] ** 2,
    )
    head = BlockPlan(
        saved=(
            Saved("Linear input (max-pool output, flattened: a view)", b * d["features"], "low"),
            Saved("ReLU outputs (also the next Linear's inputs)", b * (120 + 84), "low"),
        ),
        inputs=(Saved("block input", b * d["features"], "low"),),
        kept=(Saved("Linear outputs", b * (120 + 84 + k), "low"),),
        matmul_weights=d["features"] * 120 + 120 * 84 + 84 * k,
    )
    return ActivationPlan(tuple(_cross_entropy(b, k)), (conv, conv2, head))


def plan(arch: Arch, batch: int, seq_len: int, device: str) -> ActivationPlan:
    """The activation plan of ``arch`` for a micro-batch of ``batch`` x ``seq_len``."""
    if batch < 1 or (arch.kind != "lenet" and seq_len < 1):
        raise ConfigError(f"--batch-size and --seq-len must be positive, got {batch}, {seq_len}")
    if arch.kind == "gpt":
        return gpt_plan(arch, batch, seq_len, device)
    if arch.kind in ("bert", "roberta"):
        return bert_plan(arch, batch, seq_len, device)
    return lenet_plan(arch, batch)


# --------------------------------------------------------------------------- bytes


def checkpointed(policy: str, n_blocks: int) -> list[bool]:
    """Which blocks ``policy`` checkpoints, as
    :func:`trainscope.techniques.activation_checkpointing.apply_checkpointing` chooses them."""
    kind, k = checkpointing_policy(policy)
    if kind == "none":
        return [False] * n_blocks
    if kind == "every":
        return [i % k == 0 for i in range(n_blocks)]
    return [True] * n_blocks


def activation_bytes(
    p: ActivationPlan, policy: str, precision: str, device: str
) -> ActivationBytes:
    """Saved-activation bytes of one step of plan ``p`` under a checkpointing policy."""
    out = ActivationBytes(attention=p.attention, notes=list(p.notes))
    seen: set[str] = set()
    selective = checkpointing_policy(policy)[0] == "selective"
    out.outside_blocks = _total(p.outside, precision, device, seen)
    copies = p.outside_matmul_weights
    for block, ckpt in zip(p.blocks, checkpointed(policy, len(p.blocks))):
        if not ckpt:
            out.blocks += _total(block.saved, precision, device, seen)
            copies += block.matmul_weights
            continue
        out.checkpointed_blocks += 1
        out.blocks += _total(block.inputs, precision, device, seen)
        if selective:
            out.selective_saved += _total(block.kept, precision, device, seen)
        again = _total(block.saved, precision, device, set())
        out.recompute_peak = max(out.recompute_peak, again)
    out.saved_by_autograd = out.outside_blocks + out.blocks
    out.blocks += out.selective_saved
    # Autocast casts each weight once per forward (its cache) and the matmul saves the
    # copy; inside a checkpointed block the copies are remade in backward, not kept.
    out.autocast_weight_copies = 2 * copies if precision == "autocast" else 0
    return out


def per_block_bytes(p: ActivationPlan, precision: str, device: str) -> int:
    """What the largest block saves without checkpointing."""
    return max((_total(b.saved, precision, device, set()) for b in p.blocks), default=0)


def korthikanti_bytes(arch: Arch, batch: int, seq_len: int, policy: str = "none") -> int:
    """Korthikanti et al. 2022 (Reducing Activation Recomputation in Large Transformer
    Models), sec. 4 and 5, for a transformer's layers with 16-bit activations and the
    attention scores materialised: ``s b h (34 + 5 a s / h)`` bytes per layer, ``34 s b h``
    with selective recomputation, ``2 s b h`` (the layer input) for a checkpointed layer.
    Embeddings, head and loss are outside it."""
    s, b, h, a = seq_len, batch, arch.hidden, arch.heads
    selective = checkpointing_policy(policy)[0] == "selective"
    full_layer = s * b * h * (34 + 5 * a * s / h)
    layer = 34 * s * b * h if selective else 2 * s * b * h
    ckpt = checkpointed(policy, arch.layers)
    return int(sum(layer if c else full_layer for c in ckpt))


__all__ = [
    "DTYPES",
    "ActivationBytes",
    "ActivationPlan",
    "BlockPlan",
    "Saved",
    "activation_bytes",
    "checkpointed",
    "element_size",
    "korthikanti_bytes",
    "nbytes",
    "per_block_bytes",
    "plan",
]
