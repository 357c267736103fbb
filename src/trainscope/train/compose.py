"""The model as trained: every feature applied to it, in one fixed order.

    precision conversion -> activation checkpointing -> compile -> strategy wrapping

Each step needs the one before:

1. **Precision conversion** of the parameters comes first, so that everything after sees
   the dtype the run trains in. Every precision trainscope runs (fp32, tf32, fp16, bf16)
   keeps fp32 weights and casts inside autocast, so nothing is converted today; pure
   low-precision weights would be converted here.
2. **Activation checkpointing** replaces blocks' forwards by checkpointed ones. It acts on
   the plain module, before compilation traces those forwards (so the compiled graph
   knows what to recompute) and before a strategy wraps or shards the blocks (FSDP's
   hooks then sit outside the checkpointed region and unshard for the recomputation).
3. **Compilation** (``torch.compile``, in place, block by block where the model has
   blocks, as torchtitan does: identical blocks reuse one compiled graph, and per-block
   units compose with FSDP's per-block sharding). It is lazy: the work happens at the
   first forward and backward, which :func:`compile_warmup` does ahead of training so
   that the compile time is its own stage, never inside step times.
4. **Strategy wrapping** (DDP, FSDP sharding) comes last, around the finished module.

The optimizer is built afterwards, from the wrapped model's parameters (FSDP replaces them
by shards). Compiling in place (``nn.Module.compile``) keeps ``state_dict`` keys as they
were, so checkpoints and saved weights load into a model built without compilation.
"""

from __future__ import annotations

import time
from typing import Any

import torch
from torch import nn

from trainscope.config import RuntimeConfig
from trainscope.errors import ConfigError
from trainscope.profiling.timer import device_sync
from trainscope.strategies.base import Strategy
from trainscope.techniques.activation_checkpointing import apply_checkpointing
from trainscope.train.state import TrainState, rng_states, set_rng_states
from trainscope.workloads.base import Workload, model_blocks, move_to


def compose(
    model: nn.Module,
    strategy: Strategy,
    device: torch.device,
    runtime: RuntimeConfig | None = None,
) -> tuple[nn.Module, dict[str, Any]]:
    """The model ready to train, and what was applied (for the summary)."""
    runtime = runtime or RuntimeConfig()
    model = model.to(device)
    # 1. precision conversion: none (every precision here is autocast over fp32 weights).
    # 2. activation checkpointing on the plain module's blocks.
    n_ckpt = apply_checkpointing(model, runtime.checkpointing)
    applied: dict[str, Any] = {
        "checkpointing": {"policy": runtime.checkpointing, "blocks": n_ckpt},
        "compile": None,
    }
    # 3. compilation, in place.
    if runtime.compile:
        blocks = model_blocks(model)
        # Dynamo does not trace frames of torch's own modules: a block that is a plain
        # nn.Sequential compiled alone would silently run eagerly. Compile the whole model
        # then (its forward inlines the containers).
        if any(type(b).__module__.startswith("torch.") for b in blocks):
            blocks = []
        for block in blocks:
            block.compile()
        if not blocks:
            model.compile()
        applied["compile"] = {"units": f"{len(blocks)} blocks" if blocks else "whole model"}
    # 4. strategy wrapping, around the finished module.
    return strategy.wrap(model), applied


def compile_warmup(state: TrainState, workload: Workload, batch_size: int) -> float:
    """Run forward and backward once on the first training samples, and a forward as
    evaluation runs it, so that compilation happens now, not in the first steps or the
    first validation; returns the seconds it took. ``batch_size``: the training batch
    (the samples it runs on: as many, from the start of the training set).

    Nothing of it remains: gradients are dropped (no optimizer step) and every random
    generator is put back, so training goes on exactly as it would have. (A model with
    batch-norm layers would see its running statistics updated once.)
    """
    t0 = time.perf_counter()
    saved = rng_states()
    n = min(batch_size, len(workload.train_set))
    samples = [workload.train_set[i] for i in range(n)]
    collate = workload.collate_fn or torch.utils.data.default_collate
    inputs, targets = collate(samples)
    inputs = move_to(inputs, state.device)
    targets = targets.to(state.device)
    state.model.train()
    try:
        with state.precision.autocast():
            loss = state.loss_fn(state.model(inputs), targets)
        loss.backward()
        state.model.eval()  # evaluation's graph (no grad, eval mode) is compiled now too
        with torch.no_grad(), state.precision.autocast():
            state.model(inputs)
        state.model.train()
    except Exception as e:  # dynamo and inductor errors: one line, not a traceback
        from torch._dynamo.exc import TorchDynamoException

        if not isinstance(e, TorchDynamoException) and "inductor" not in type(e).__module__:
            raise
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise ConfigError(
            f"--compile: torch.compile could not compile the model ({type(e).__name__}: "
            f"{first}); run without --compile"
        ) from None
    state.optimizer.zero_grad(set_to_none=True)
    device_sync(state.device)
    set_rng_states(saved)
    return time.perf_counter() - t0


def compiled_graphs() -> int | None:
    """Graphs torch.compile has captured in this process so far (None if unknown): a
    count that grows during training means recompilations inside step times."""
    try:
        from torch._dynamo.utils import counters
    except ImportError:  # pragma: no cover - dynamo is part of every supported torch
        return None
    return int(counters["stats"]["unique_graphs"])


__all__ = ["compile_warmup", "compiled_graphs", "compose"]
