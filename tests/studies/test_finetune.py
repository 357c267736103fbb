"""``study finetune``'s plan: one configuration per LoRA rank (0: full fine-tuning), each
at its recipe's learning rate unless --lr gives one, and the refusals."""

from __future__ import annotations

import argparse

import pytest
import torch

from trainscope.config import from_dict
from trainscope.errors import ConfigError
from trainscope.recipes import TEXT_CLS_LORA, TEXT_CLS_PRETRAINED
from trainscope.studies import finetune

pytestmark = pytest.mark.timeout(60)
CPU = torch.device("cpu")


def base(**options: object) -> dict:
    workload = {"name": "text-cls", "options": {"pretrained": "some/minilm", **options}}
    return from_dict({"workload": workload, "train": {"epochs": 1}}).to_dict()


def test_one_configuration_per_rank_each_at_its_recipes_learning_rate() -> None:
    plan = finetune.plan(base(), CPU, repeats=2, ranks=[0, 8, 16])
    first = {r.config: r for r in plan.runs if r.repeat == 1}
    assert list(first) == ["full", "lora-r8", "lora-r16"]
    assert first["full"].overrides["workload.options.lora_r"] == 0
    assert first["full"].overrides["train.lr"] == TEXT_CLS_PRETRAINED.train["lr"]
    assert first["lora-r8"].overrides["train.lr"] == TEXT_CLS_LORA.train["lr"]
    assert first["lora-r16"].labels["lora_r"] == 16
    assert plan.runs[0].id == "full/warmup"
    assert sum(1 for r in plan.runs if r.repeat >= 1) == 6
    assert plan.options["ranks"] == [0, 8, 16] and plan.options["own_lr"] is True


def test_a_learning_rate_given_by_the_user_is_kept_for_every_configuration() -> None:
    plan = finetune.plan(base(), CPU, repeats=1, ranks=[0, 8], own_lr=False)
    assert all("train.lr" not in r.overrides for r in plan.runs)
    args = argparse.Namespace(lora_ranks="0,4", config=None)
    own, _ = finetune.options_from_args(args, overrides := {"train.lr": 1e-3})
    assert own == {"ranks": [0, 4], "own_lr": False}
    assert overrides["workload.name"] == "text-cls"
    own, _ = finetune.options_from_args(args, {})
    assert own["own_lr"] is True


def test_a_model_that_is_not_pretrained_text_cls_is_refused_in_one_line() -> None:
    with pytest.raises(ConfigError, match="--pretrained"):
        finetune.plan(from_dict({}).to_dict(), CPU)
    no_weights = from_dict({"workload": {"name": "text-cls"}}).to_dict()
    with pytest.raises(ConfigError, match="pretrained"):
        finetune.plan(no_weights, CPU)


@pytest.mark.parametrize("text", ["", "a", "8,8", "0,99999", "-1"])
def test_bad_ranks_are_refused(text: str) -> None:
    with pytest.raises(ConfigError, match="--lora-ranks"):
        finetune.parse_ranks(text)
    assert finetune.parse_ranks(" 0, 8 ,16") == [0, 8, 16]
