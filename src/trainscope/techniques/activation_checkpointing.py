"""Activation checkpointing: trade recomputation in backward for activations not kept.

A block's forward normally leaves every tensor its backward needs saved (for a GPT block
on the CPU, about 18 tensors of B x T x C and more), and they live until backward reaches
it. Checkpointing a block keeps only its inputs; backward runs the block's forward again
to get the rest. For L blocks the saved activations of the blocks fall from L x (one
block's) to L x (its input) plus one block's during its recomputation: O(n) -> O(c) in the
seeds' words, for roughly one more forward of every checkpointed block.

Policies (``--checkpointing``):

- ``none``: nothing recomputed.
- ``full``: every block of ``model.blocks`` checkpointed.
- ``every-K``: blocks 0, K, 2K, ... checkpointed (``every-1`` is ``full``): a point
  between the two.
- ``selective``: every block checkpointed, but the outputs of its matmuls and attention
  kernels are saved, so backward recomputes only the cheap element-wise ops (norms,
  activations, dropout, additions). Built on PyTorch's
  ``create_selective_checkpoint_contexts``.

The checkpoint is PyTorch's non-reentrant one (``use_reentrant=False``): it composes with
autograd hooks, keyword arguments and inputs that need no gradient. It replaces each
block's ``forward`` on the instance, so the module tree and ``state_dict`` keys stay as
they were (weights saved with checkpointing load without it). A block being measured
(:mod:`trainscope.profiling.memory`) reports the op outputs a selective checkpoint keeps,
which autograd's saved-tensor hooks cannot see.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from trainscope.config import CHECKPOINTING_HELP, checkpointing_policy
from trainscope.errors import ConfigError
from trainscope.workloads.base import model_blocks

POLICY_HELP = CHECKPOINTING_HELP


def parse_policy(text: str) -> tuple[str, int]:
    """``--checkpointing`` text -> (kind, k); see ``trainscope.config.checkpointing_policy``."""
    return checkpointing_policy(text)


def _saved_ops() -> set[Any]:
    """The ops whose outputs selective checkpointing keeps: matmuls and attention kernels
    (the expensive ones; ``nn.Linear`` reaches the dispatcher as mm / addmm)."""
    aten = torch.ops.aten
    names = (
        "mm",
        "addmm",
        "bmm",
        "baddbmm",
        "_scaled_dot_product_flash_attention",
        "_scaled_dot_product_flash_attention_for_cpu",
        "_scaled_dot_product_efficient_attention",
        "_scaled_dot_product_cudnn_attention",
    )
    return {getattr(aten, n).default for n in names if hasattr(aten, n)}


@dataclass
class Kept:
    """What one checkpointed block call keeps for backward out of sight of autograd's
    saved-tensor hooks, reported to a memory probe. (The block's inputs need no report:
    the checkpoint saves them through autograd, where the hooks see them.)"""

    saved: list[torch.Tensor] = field(default_factory=list)
    """Selective policy: the op outputs saved instead of recomputed."""


def _checkpointed(block: nn.Module, forward: Callable[..., Any], selective: bool) -> Callable:
    """``forward`` run under a non-reentrant checkpoint; while ``block._trainscope_kept``
    is a list (a memory probe is counting), each call appends what it keeps."""
    from torch.utils.checkpoint import (
        CheckpointPolicy,
        checkpoint,
        create_selective_checkpoint_contexts,
    )

    saved_ops = _saved_ops()

    def policy(ctx: Any, op: Any, *args: Any, **kwargs: Any) -> CheckpointPolicy:
        return CheckpointPolicy.MUST_SAVE if op in saved_ops else CheckpointPolicy.PREFER_RECOMPUTE

    @functools.wraps(forward)
    def run(*args: Any, **kwargs: Any) -> Any:
        if not torch.is_grad_enabled():  # evaluation: nothing to save, nothing to recompute
            return forward(*args, **kwargs)
        modes: list[Any] = []

        def contexts() -> Any:
            pair = create_selective_checkpoint_contexts(policy)
            modes.append(pair[0])  # the caching mode: its .storage holds what it saved
            return pair

        extra: dict[str, Any] = {}
        if selective:
            # Compiled, the graph itself saves what the policy keeps (and autograd's hooks
            # see it); dynamo accepts a partial here but not a closure.
            compiling = torch.compiler.is_compiling()
            extra["context_fn"] = (
                functools.partial(create_selective_checkpoint_contexts, policy)
                if compiling
                else contexts
            )
        out = checkpoint(forward, *args, use_reentrant=False, **extra, **kwargs)
        kept = getattr(block, "_trainscope_kept", None)
        if kept is not None:
            record = Kept()
            for mode in modes[:1]:
                for entries in getattr(mode, "storage", {}).values():
                    record.saved += _unwrap(entries)
            kept.append(record)
        return out

    return run


def _unwrap(entries: Any) -> list[torch.Tensor]:
    """Selective checkpointing keeps op outputs as pytrees of ``_VersionWrapper`` (the
    tensor in ``.val``): the tensors among their leaves."""
    flat, _ = torch.utils._pytree.tree_flatten(entries)
    vals = (getattr(leaf, "val", leaf) for leaf in flat)
    return [v for v in vals if isinstance(v, torch.Tensor)]


def apply_checkpointing(model: nn.Module, policy: str) -> int:
    """Checkpoint ``model``'s blocks under ``policy`` (see module docs); returns how many.

    Raises ConfigError when a policy other than ``none`` meets a model without ``blocks``:
    there would be nothing to checkpoint, and a study must not report a no-op as a policy.
    """
    kind, k = parse_policy(policy)
    if kind == "none":
        return 0
    blocks = model_blocks(model)
    if not blocks:
        raise ConfigError(
            f"--checkpointing {policy}: {type(model).__name__} has no blocks to checkpoint "
            "(a model exposes its repeated units as `model.blocks`, an nn.ModuleList)"
        )
    return len(checkpoint_blocks(blocks, policy))


def checkpoint_blocks(blocks: list[nn.Module], policy: str) -> list[nn.Module]:
    """Checkpoint ``blocks`` under ``policy`` (not ``none``); returns the blocks wrapped
    now (a block already wrapped is left as it is). :func:`uncheckpoint` undoes it."""
    kind, k = parse_policy(policy)
    wrapped = []
    for i, block in enumerate(blocks):
        if kind == "none" or (kind == "every" and i % k):
            continue
        if getattr(block, "_trainscope_checkpointed", False):
            continue
        block.forward = _checkpointed(block, block.forward, selective=kind == "selective")
        block._trainscope_checkpointed = True
        wrapped.append(block)
    return wrapped


def uncheckpoint(blocks: list[nn.Module]) -> None:
    """Put back the forward of blocks :func:`checkpoint_blocks` wrapped."""
    for block in blocks:
        if block.__dict__.pop("forward", None) is not None:
            block.__dict__.pop("_trainscope_checkpointed", None)


def checkpointed_blocks(model: nn.Module) -> list[nn.Module]:
    """The modules :func:`apply_checkpointing` wrapped (for a memory probe to ask)."""
    return [m for m in model.modules() if getattr(m, "_trainscope_checkpointed", False)]


__all__ = [
    "POLICY_HELP",
    "Kept",
    "apply_checkpointing",
    "checkpoint_blocks",
    "checkpointed_blocks",
    "uncheckpoint",
    "parse_policy",
]
