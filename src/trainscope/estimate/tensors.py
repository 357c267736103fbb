"""Every parameter tensor of a named architecture, in registration order (no torch).

:mod:`trainscope.estimate.archs` counts parameters; communication also needs them one by
one (one all_reduce per tensor, DDP's buckets) and grouped by block (FSDP's units). The
lists are written from the layers' shapes; ``tests/estimate/test_tensors.py`` checks them,
order included, against the models built on the meta device.
"""

from __future__ import annotations

from trainscope.errors import ConfigError
from trainscope.estimate.archs import Arch, _lenet_dims, has_shape


def _linear(fan_in: int, fan_out: int, bias: bool = True) -> list[int]:
    return [fan_in * fan_out] + ([fan_out] if bias else [])


def _norm(h: int, bias: bool = True) -> list[int]:
    return [h] + ([h] if bias else [])


def _gpt_block(h: int, f: int, b: bool) -> list[int]:
    # trainscope.workloads.gpt.Block: ln_1, attn.qkv, attn.proj, ln_2, mlp.fc, mlp.proj
    return (
        _norm(h, b)
        + _linear(h, 3 * h, b)
        + _linear(h, h, b)
        + _norm(h, b)
        + _linear(h, f, b)
        + _linear(f, h, b)
    )


def _bert_block(h: int, f: int) -> list[int]:
    # BertLayer: query, key, value, attention output dense + LayerNorm, intermediate,
    # output dense + LayerNorm (RobertaLayer is the same).
    return _linear(h, h) * 3 + _linear(h, h) + _norm(h) + _linear(h, f) + _linear(f, h) + _norm(h)


def tensor_numels(arch: Arch) -> tuple[list[int], list[list[int]]]:
    """(every parameter's element count in registration order, the same split into FSDP's
    units: the root's tensors first, then each block's). ConfigError without a shape."""
    if not has_shape(arch):
        raise ConfigError(f"{arch.name}: no layer shapes (a bare --params): tensors unknown")
    if arch.kind == "lenet":
        d = _lenet_dims(arch)
        k, c = d["k"], d["c"]
        blocks = [
            _linear(c * k * k, 6),
            _linear(6 * k * k, 16),
            _linear(d["features"], 120) + _linear(120, 84) + _linear(84, arch.num_classes),
        ]
        return [t for b in blocks for t in b], [[]] + blocks
    h, f = arch.hidden, arch.ffn
    if arch.kind == "gpt":
        b = arch.bias
        blocks = [_gpt_block(h, f, b) for _ in range(arch.layers)]
        # tok_emb, pos_emb, blocks, ln_f; the head is tied to tok_emb (no tensor of its own)
        head, tail = [arch.vocab * h, arch.positions * h], _norm(h, b)
        flat = head + [t for blk in blocks for t in blk] + tail
        return flat, [head + tail] + blocks
    if arch.kind in ("bert", "roberta"):
        words, places, kinds = arch.vocab * h, arch.positions * h, arch.type_vocab * h
        if arch.kind == "bert":
            emb = [words, places, kinds] + _norm(h)
        else:  # transformers 5 registers RoBERTa's position embeddings last
            emb = [words, kinds] + _norm(h) + [places]
        blocks = [_bert_block(h, f) for _ in range(arch.layers)]
        # BERT: pooler dense + classifier; RoBERTa: classifier.dense + classifier.out_proj
        top = _linear(h, h) + _linear(h, arch.num_labels)
        flat = emb + [t for blk in blocks for t in blk] + top
        return flat, [emb + top] + blocks
    raise ConfigError(f"unknown architecture kind {arch.kind!r}")
