"""The real models behind the named architectures, for tests that check the estimator's
shapes against them (build them under ``torch.device("meta")``: nothing is allocated)."""

from __future__ import annotations

from typing import Any

import pytest

from trainscope.estimate import archs


def hf_classifier(arch: archs.Arch) -> Any:
    """A function building transformers' BERT/RoBERTa sequence classifier of ``arch``
    (skips the test without transformers)."""
    transformers = pytest.importorskip("transformers")
    bert = arch.kind == "bert"
    config = (transformers.BertConfig if bert else transformers.RobertaConfig)(
        vocab_size=arch.vocab,
        hidden_size=arch.hidden,
        num_hidden_layers=arch.layers,
        num_attention_heads=arch.heads,
        intermediate_size=arch.ffn,
        max_position_embeddings=arch.positions,
        type_vocab_size=arch.type_vocab,
        num_labels=2,
    )
    cls = (
        transformers.BertForSequenceClassification
        if bert
        else transformers.RobertaForSequenceClassification
    )
    return lambda: cls(config)


def gpt_builder(arch: archs.Arch, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A function building trainscope's GPT of ``arch`` (its memory guard lifted: on the
    meta device nothing is allocated)."""
    from trainscope.workloads.gpt import GPT, GPTConfig

    monkeypatch.setattr("trainscope.workloads.gpt.memory_budget_bytes", lambda: 1 << 60)
    cfg = GPTConfig(
        vocab_size=arch.vocab,
        block_size=arch.positions,
        n_layer=arch.layers,
        n_head=arch.heads,
        n_embd=arch.hidden,
        dropout=0.1,
        bias=arch.bias,
    )
    return lambda: GPT(cfg)
