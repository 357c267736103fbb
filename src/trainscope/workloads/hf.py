"""Hugging Face ``transformers`` models behind trainscope's ``model(inputs) -> outputs``.

A ``transformers`` model takes named tensors and returns an output object; the training
loop hands a model one batch's inputs and wants a tensor back. :class:`HFModel` adapts
the one to the other and exposes the model's repeated layers as ``blocks`` (what
activation checkpointing and FSDP wrap one by one). :func:`load_by_name` loads a model
by hub name or local folder for a task, so a workload factory can name one instead of
building it.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from trainscope.errors import ConfigError
from trainscope.runtime.captured import quiet_import


def require_transformers(who: str) -> Any:
    """``transformers``, or one line saying how to install it."""
    try:
        return quiet_import("transformers")  # its import chatter: to the run's log
    except ImportError:
        raise ConfigError(f"{who} needs 'transformers': pip install 'trainscope[text]'") from None


def first_line(e: BaseException) -> str:
    """An exception's first line (transformers' messages run to paragraphs)."""
    lines = str(e).strip().splitlines()
    return lines[0] if lines else type(e).__name__


def is_hf_model(model: Any) -> bool:
    """Whether ``model`` is a ``transformers`` model (checked without importing it: a
    model object exists only if its library was imported already)."""
    import sys

    transformers = sys.modules.get("transformers")
    return transformers is not None and isinstance(model, transformers.PreTrainedModel)


def find_blocks(net: nn.Module, num_layers: int, who: str = "model") -> str:
    """The dotted path of a model's layer list (``encoder.layer`` in BERT, ``h`` in GPT-2,
    ``layers`` in Llama): a ModuleList of ``num_layers`` entries, by its usual names first."""
    lists = [(n, m) for n, m in net.named_modules() if isinstance(m, nn.ModuleList)]
    for name, mod in lists:
        if len(mod) == num_layers and name.rsplit(".", 1)[-1] in ("layer", "layers", "h"):
            return name
    same = [n for n, m in lists if len(m) == num_layers]
    if same:
        return same[0]
    raise ConfigError(f"{who}: cannot find the {num_layers} layers of the model")


def _num_layers(net: nn.Module) -> int | None:
    config = getattr(net, "config", None)
    for key in ("num_hidden_layers", "n_layer", "num_layers"):
        value = getattr(config, key, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


class HFModel(nn.Module):
    """A ``transformers`` model behind ``model(inputs) -> logits``.

    ``inputs`` is a mapping of named tensors (input_ids, attention_mask, ...) passed as
    keyword arguments, or one tensor of token ids. The logits are a classifier's (B,
    labels) or a language model's (B, T, vocabulary).
    """

    def __init__(self, net: nn.Module, num_layers: int | None = None) -> None:
        super().__init__()
        self.net = net  # the attribute name fixes the state_dict keys: "net.<hf name>"
        num_layers = num_layers or _num_layers(net)
        # Only the path is stored: registering the ModuleList a second time here would
        # duplicate every layer's weights in state_dict().
        self._blocks_path = find_blocks(net, num_layers) if num_layers else None

    @property
    def blocks(self) -> nn.ModuleList | None:
        """The model's layers, in order (replacing ``blocks[i]`` replaces the layer inside
        the model); None when the layer count is unknown."""
        return None if self._blocks_path is None else self.net.get_submodule(self._blocks_path)

    def forward(self, inputs: Mapping[str, torch.Tensor] | torch.Tensor) -> torch.Tensor:
        """The logits for one batch of inputs."""
        if isinstance(inputs, Mapping):
            return self.net(**inputs).logits
        return self.net(input_ids=inputs).logits


AUTO_CLASSES = {
    "classification": "AutoModelForSequenceClassification",
    "regression": "AutoModelForSequenceClassification",
    "language-modelling": "AutoModelForCausalLM",
}


HEAD_NAMES = ("pre_classifier", "classifier", "score")
"""Top-level modules of a sequence classifier's head (new when a checkpoint has none)."""


def from_pretrained(auto: Any, name: str, **kwargs: Any) -> tuple[nn.Module, str]:
    """``auto.from_pretrained(name, **kwargs)`` with transformers' own load report and
    progress bar held back, and a line of trainscope's instead: what was loaded, and that
    a head the checkpoint lacks is new (expected for a new task; transformers reports it
    as "MISSING" in a table). Other weights the checkpoint lacked or did not use are
    named in that line too: those are not expected."""
    log = importlib.import_module("transformers.utils.logging")
    level, bars = log.get_verbosity(), log.is_progress_bar_enabled()
    log.set_verbosity_error()
    log.disable_progress_bar()
    try:
        model, info = auto.from_pretrained(name, output_loading_info=True, **kwargs)
    finally:
        log.set_verbosity(level)
        if bars:
            log.enable_progress_bar()
    return model, load_note(name, type(model).__name__, info)


def load_note(name: str, model_class: str, info: Mapping[str, Any]) -> str:
    """One line on what loading ``name`` found (see :func:`from_pretrained`)."""
    missing = sorted(info.get("missing_keys") or [])
    unused = sorted(info.get("unexpected_keys") or [])
    head = [k for k in missing if k.split(".")[0] in HEAD_NAMES]
    other = [k for k in missing if k not in head]
    text = f"pretrained {name}: weights loaded into {model_class}"
    if head:
        text += (
            f"; its classification head ({', '.join(head)}) is new, randomly initialised as "
            "expected for a new task (transformers lists it as MISSING)"
        )
    if other:
        text += f"; not in the checkpoint, so random too: {_some(other)}"
    if unused:
        text += f"; in the checkpoint but unused: {_some(unused)}"
    return text


def _some(keys: list[str], shown: int = 4) -> str:
    more = f" and {len(keys) - shown} more" if len(keys) > shown else ""
    return f"{len(keys)} weight(s) ({', '.join(keys[:shown])}{more})"


def load_by_name(name: str, task: str, num_classes: int | None, who: str) -> tuple[nn.Module, str]:
    """A ``transformers`` model for ``task`` from a hub name or local folder, with the
    task's head (a new, randomly initialised head where the checkpoint has none), and a
    line saying what loading found (:func:`from_pretrained`).

    Classification needs ``num_classes``; regression gets one output. Loading follows
    transformers' own rules (its cache; HF_HUB_OFFLINE=1 stays offline).
    """
    transformers = require_transformers(who)
    if task not in AUTO_CLASSES:
        raise ConfigError(f"{who}: a model by name supports {', '.join(AUTO_CLASSES)}")
    kwargs: dict[str, Any] = {}
    if task == "classification":
        if not num_classes:
            raise ConfigError(f"{who}: a classifier by name needs num_classes")
        kwargs["num_labels"] = num_classes
    elif task == "regression":
        kwargs.update(num_labels=1, problem_type="regression")
    auto = getattr(transformers, AUTO_CLASSES[task])
    try:
        return from_pretrained(auto, name, **kwargs)
    except (OSError, ValueError, KeyError) as e:
        raise ConfigError(f"{who}: cannot load model {name!r}: {first_line(e)}") from None
