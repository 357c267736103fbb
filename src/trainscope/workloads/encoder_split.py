"""How a BERT or RoBERTa sequence classifier splits: into pipeline stages at its layers,
and inside its layers for tensor parallelism.

A pipeline stage runs some of the encoder's layers; the first also runs the embeddings,
the last the pooler and the classification head. Unlike a GPT block, an encoder layer
needs more than the hidden state: the attention mask that hides the padding. The (B, T)
padding mask travels to every stage beside the microbatch (``torch.distributed.pipelining``
passes a step's keyword tensors to every stage, cut into the same microbatches), and each
stage makes the layers' mask from it with transformers' own function, as the whole model
does. The schedule's buffers have one shape for the whole run, so a pipeline pads every
batch to ``max_length``: padding is masked, so it changes no logit, but it costs compute
that a batch padded to its longest row would not spend.

Tensor parallelism splits each layer as Megatron-LM does (:data:`ENCODER_TP_PLAN`): the
query, key and value projections and the feed-forward's first layer by output columns
(each rank its own heads), the attention's and the feed-forward's output projections by
input rows. transformers' attention infers the number of heads from the projection's
width, so a rank's share of heads needs no other change.

Only transformers >= 5 is split (its layers return the hidden state alone, and its mask
function is public); with an older one the model runs whole, and a strategy that splits
says so in one line.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

ENCODER_TP_PLAN = {
    "attention.self.query": "colwise",
    "attention.self.key": "colwise",
    "attention.self.value": "colwise",
    "attention.output.dense": "rowwise",
    "intermediate.dense": "colwise",
    "output.dense": "rowwise",
}
"""Layer-relative names of a BERT/RoBERTa layer's linear layers -> their split."""

ARCHITECTURES = ("bert", "roberta")


def _mask_maker() -> Any:
    """transformers' bidirectional mask function, or None before transformers 5."""
    import transformers

    if int(transformers.__version__.split(".")[0]) < 5:
        return None
    from transformers.masking_utils import create_bidirectional_mask

    return create_bidirectional_mask


@dataclass
class EncoderSplit:
    """Where the parts of one BERT/RoBERTa classifier are, and how to run them apart."""

    base: Any
    """The transformers classifier (inside peft's wrapper, under LoRA)."""
    kind: str
    pipeline_in: tuple[str, ...]
    pipeline_out: tuple[str, ...]

    @classmethod
    def of(cls, model: nn.Module) -> EncoderSplit | None:
        """The split of a :class:`~trainscope.workloads.text_cls.SequenceClassifier`, or
        None when its architecture (or transformers' version) is not one this splits."""
        net = getattr(model, "net", None)
        base = net.get_base_model() if hasattr(net, "get_base_model") else net
        kind = getattr(getattr(base, "config", None), "model_type", None)
        if kind not in ARCHITECTURES or getattr(model, "blocks", None) is None:
            return None
        if _mask_maker() is None:
            return None
        prefix = next(name for name, m in model.named_modules() if m is base)
        if kind == "bert":
            out = (f"{prefix}.bert.pooler", f"{prefix}.dropout", f"{prefix}.classifier")
        else:  # RoBERTa's head reads the first token itself: no pooler
            out = (f"{prefix}.classifier",)
        return cls(base, kind, (f"{prefix}.{kind}.embeddings",), out)

    @property
    def body(self) -> nn.Module:
        """The encoder model (``bert`` or ``roberta``) under the head."""
        return getattr(self.base, self.kind)

    def forward_in(self, input_ids: torch.Tensor, token_type_ids: Any = None) -> torch.Tensor:
        """Token ids (B, T) and segment ids -> the embeddings (B, T, H)."""
        return self.body.embeddings(input_ids=input_ids, token_type_ids=token_type_ids)

    def forward_out(self, x: torch.Tensor) -> torch.Tensor:
        """The last layer's output (B, T, H) -> logits (B, labels), as the whole model."""
        if self.kind == "bert":
            return self.base.classifier(self.base.dropout(self.body.pooler(x)))
        return self.base.classifier(x)

    @staticmethod
    def pipeline_inputs(
        inputs: Mapping[str, torch.Tensor], pad_id: int, max_length: int
    ) -> tuple[tuple[torch.Tensor, ...], dict[str, torch.Tensor]]:
        """(input_ids[, token_type_ids]) for the first stage, {attention_mask} for every
        stage, each padded to ``max_length`` columns."""
        extra = max(0, max_length - inputs["input_ids"].shape[1])

        def pad(t: torch.Tensor, value: int) -> torch.Tensor:
            return F.pad(t, (0, extra), value=value) if extra else t

        args = [pad(inputs["input_ids"], pad_id)]
        if inputs.get("token_type_ids") is not None:
            args.append(pad(inputs["token_type_ids"], 0))
        return tuple(args), {"attention_mask": pad(inputs["attention_mask"], 0)}

    def block_kwargs(self, hidden: torch.Tensor, attention_mask: torch.Tensor) -> dict[str, Any]:
        """The layers' attention mask (None where nothing is padded), made as the whole
        model makes it."""
        make = _mask_maker()
        mask = make(config=self.base.config, inputs_embeds=hidden, attention_mask=attention_mask)
        return {"attention_mask": mask}

    @staticmethod
    def localize_heads(blocks: Any, tp: int) -> None:
        """Each layer's attention counts its own ``1/tp`` of the heads (its projections
        are split by heads: the record and any code reading the count agree)."""
        for block in blocks:
            attention = block.attention.self
            for attr in ("num_attention_heads", "all_head_size"):
                if hasattr(attention, attr):
                    setattr(attention, attr, getattr(attention, attr) // tp)
