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
