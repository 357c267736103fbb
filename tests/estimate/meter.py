"""The memory meter on one small training step, as a run counts it (for the estimator's tests)."""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import torch

from trainscope.config import TrainConfig
from trainscope.profiling.memory import MemoryProbe
from trainscope.train.schedule import build_optimizer


def meter_step(
    model: torch.nn.Module,
    loss_fn: Callable[[Any, Any], torch.Tensor],
    batch: tuple[Any, Any],
    optimizer: str = "sgd",
    autocast: bool = False,
) -> dict[str, Any]:
    """The memory meter's section for the second of two training steps on ``batch``,
    counted by :class:`MemoryProbe` as a run counts it (optimizer states exist by then)."""
    opt = build_optimizer(TrainConfig(optimizer=optimizer, lr=1e-3), model)

    def step(state: Any, batches: Any, timer: Any) -> None:
        x, y = next(batches)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    probe = MemoryProbe(step, at=2)
    state = SimpleNamespace(model=model, optimizer=opt, device=torch.device("cpu"), step=0)
    model.train()
    for _ in range(2):
        probe(state, iter([batch]), None)
        state.step += 1
    return probe.section()
