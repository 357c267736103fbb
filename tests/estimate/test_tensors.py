"""Every parameter tensor of a named architecture, in order, against the model itself
(built on the meta device: nothing is allocated)."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from tests.estimate.models import gpt_builder, hf_classifier
from trainscope.errors import ConfigError
from trainscope.estimate import archs
from trainscope.estimate.tensors import tensor_numels
from trainscope.workloads.base import model_blocks


def _meta(build: Any) -> torch.nn.Module:
    with torch.device("meta"):
        return build()


def _check(arch: archs.Arch, module: torch.nn.Module, blocks: list[torch.nn.Module]) -> None:
    flat, units = tensor_numels(arch)
    assert flat == [p.numel() for p in module.parameters()]
    assert [sum(u) for u in units[1:]] == [sum(p.numel() for p in b.parameters()) for b in blocks]
    assert sum(map(sum, units)) == sum(flat) == archs.param_counts(arch).total


def test_gpt_tensors_in_order(monkeypatch: pytest.MonkeyPatch) -> None:
    for bias in (True, False):
        arch = archs.Arch(**{**archs.named("gpt2-small").__dict__, "bias": bias})
        model = _meta(gpt_builder(arch, monkeypatch))
        _check(arch, model, model_blocks(model))


@pytest.mark.parametrize("name", ["bert-base", "roberta-base"])
def test_bert_and_roberta_tensors_in_order(name: str) -> None:
    arch = archs.named(name)
    bert = arch.kind == "bert"
    model = _meta(hf_classifier(arch))
    layers = list((model.bert if bert else model.roberta).encoder.layer)
    _check(arch, model, layers)


def test_lenet_tensors_in_order() -> None:
    from trainscope.workloads.lenet import LeNet5

    for image in ((1, 28, 28), (1, 8, 8)):
        arch = archs.Arch("lenet5", "lenet", layers=3, image=image)
        model = _meta(lambda image=image: LeNet5(image[0], image[1:], 10))
        _check(arch, model, model_blocks(model))


def test_a_bare_parameter_count_has_no_tensors() -> None:
    with pytest.raises(ConfigError, match="tensors unknown"):
        tensor_numels(archs.Arch("x", "gpt", params=1000))
