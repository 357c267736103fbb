"""Activation checkpointing (trainscope.techniques.activation_checkpointing): policies,
errors, what it saves and that it changes no number.

Full checkpointing of an L-block gpt-char must cut the saved activations the memory meter
counts by at least (L - 1) / L of the blocks' share (each block keeps its input only), and
the losses of a few SGD steps must equal those without checkpointing, step for step.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from trainscope.errors import ConfigError
from trainscope.profiling.memory import SavedActivations
from trainscope.techniques.activation_checkpointing import (
    apply_checkpointing,
    checkpointed_blocks,
    parse_policy,
)
from trainscope.workloads.gpt import GPT, GPTConfig, lm_loss

L = 4


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def _gpt(dropout: float = 0.0, seed: int = 0) -> GPT:
    torch.manual_seed(seed)
    return GPT(
        GPTConfig(vocab_size=65, block_size=32, n_layer=L, n_head=2, n_embd=64, dropout=dropout)
    )


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("none", ("none", 0)),
        ("full", ("full", 1)),
        ("selective", ("selective", 1)),
        ("every-1", ("full", 1)),
        ("every-3", ("every", 3)),
    ],
)
def test_parse_policy(text: str, parsed: tuple[str, int]) -> None:
    assert parse_policy(text) == parsed


@pytest.mark.parametrize("bad", ["", "Full", "every-0", "every-x", "every-", "every-2x", None, 2])
def test_parse_policy_refuses_anything_else(bad: object) -> None:
    with pytest.raises(ConfigError, match="checkpointing policy") as err:
        parse_policy(bad)  # type: ignore[arg-type]
    assert "\n" not in str(err.value)


def test_apply_checkpointing_counts_blocks_and_wraps_once() -> None:
    model = _gpt()
    assert apply_checkpointing(model, "none") == 0 and checkpointed_blocks(model) == []
    assert apply_checkpointing(model, "every-3") == 2  # blocks 0 and 3
    assert checkpointed_blocks(model) == [model.blocks[0], model.blocks[3]]
    assert apply_checkpointing(model, "full") == 2  # the two left; none wrapped twice
    assert len(checkpointed_blocks(model)) == L
    assert set(model.state_dict()) == set(_gpt().state_dict())  # keys unchanged


def test_apply_checkpointing_errors() -> None:
    plain = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    assert apply_checkpointing(plain, "none") == 0  # nothing asked, nothing to refuse
    for policy in ("full", "every-2", "selective"):
        with pytest.raises(ConfigError, match="has no blocks to checkpoint"):
            apply_checkpointing(plain, policy)
    with pytest.raises(ConfigError, match="unknown checkpointing policy"):
        apply_checkpointing(_gpt(), "sometimes")


def _saved(model: GPT, x: torch.Tensor, y: torch.Tensor) -> tuple[int, int]:
    """(saved activations of one forward + loss, the part saved while a block ran)."""
    inside = [0]
    marks: list[int] = []
    with SavedActivations(model) as saved:
        hooks = []
        for block in model.blocks:
            hooks.append(
                block.register_forward_pre_hook(lambda *_: marks.append(saved.tally.bytes))
            )
            hooks.append(
                block.register_forward_hook(
                    lambda *_: inside.__setitem__(0, inside[0] + saved.tally.bytes - marks.pop())
                )
            )
        loss = lm_loss(model(x), y)
    for h in hooks:
        h.remove()
    loss.backward()
    return saved.count.total_bytes, inside[0]


def test_full_checkpointing_keeps_one_input_per_block() -> None:
    x, y = torch.randint(0, 65, (4, 32)), torch.randint(0, 65, (4, 32))
    total_none, blocks_none = _saved(_gpt(), x, y)
    model = _gpt()
    apply_checkpointing(model, "full")
    total_full, blocks_full = _saved(model, x, y)
    assert blocks_none > 0.8 * total_none  # the blocks hold most of it
    assert total_none - total_full >= (L - 1) / L * blocks_none
    assert blocks_full == L * 4 * 32 * 64 * 4  # each block's fp32 input (B x T x C)


@pytest.mark.parametrize("policy", ["full", "every-2", "selective"])
@pytest.mark.parametrize("dropout", [0.0, 0.1])
def test_losses_equal_no_checkpointing_step_for_step(policy: str, dropout: float) -> None:
    def losses(policy: str) -> list[float]:
        model = _gpt(dropout)
        apply_checkpointing(model, policy)
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        data = torch.Generator().manual_seed(1)
        torch.manual_seed(2)  # dropout draws the same masks in both runs
        out = []
        for _ in range(4):
            x = torch.randint(0, 65, (4, 32), generator=data)
            y = torch.randint(0, 65, (4, 32), generator=data)
            loss = lm_loss(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            out.append(loss.item())
        return out

    reference, checkpointed = losses("none"), losses(policy)
    assert checkpointed == reference  # bit for bit: the recomputation is the same forward
    assert reference[-1] < reference[0]
