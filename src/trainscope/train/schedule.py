"""Learning-rate schedules as one pure function of the step, the optimizer's groups, and
the optimizer itself.

``lr_factor`` multiplies the configured lr; ``torch.optim.lr_scheduler.LambdaLR`` applies
it, stepped once per optimizer step, so a checkpoint resumes it from its step count
alone. The shapes are the ones the field uses:

- ``constant``: the lr throughout (after the warm-up, if any);
- ``cosine``: after a linear warm-up, half a cosine from lr down to ``min_lr_ratio`` x lr at
  the last step (nanoGPT: warm-up 100 steps, min_lr = lr / 10);
- ``linear``: after a linear warm-up, a straight line down to ``min_lr_ratio`` x lr (0 in
  Hugging Face's ``get_linear_schedule_with_warmup``);
- ``one-cycle``: Smith's one cycle as ``torch.optim.lr_scheduler.OneCycleLR`` draws it by
  default: a cosine rise from lr / 25 to lr over the warm-up (30% of the run when none is
  given), then a cosine fall to lr / 25 / 10^4.

Weight decay is applied to matrices and embeddings only (parameters of two or more
dimensions); biases and normalisation weights are left alone, as nanoGPT and the Hugging
Face Trainer do.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from trainscope.config import TrainConfig
from trainscope.train.optimizers import build_muon

ONE_CYCLE_START = 1 / 25  # OneCycleLR's div_factor
ONE_CYCLE_END = ONE_CYCLE_START / 1e4  # its final_div_factor
ONE_CYCLE_RISE = 0.3  # its pct_start


def lr_factor(
    step: int, total: int, schedule: str, warmup: int = 0, min_ratio: float = 0.0
) -> float:
    """The lr multiplier for optimizer step ``step`` (0-based) of ``total``."""
    total = max(total, 1)
    if schedule == "one-cycle":
        # The peak is at step rise - 1, as in OneCycleLR (pct_start x total - 1).
        peak = (warmup or max(int(ONE_CYCLE_RISE * total), 1)) - 1
        if step < peak:
            return _cos_between(ONE_CYCLE_START, 1.0, step / peak)
        return _cos_between(1.0, ONE_CYCLE_END, _progress(step, peak, total))
    if step < warmup:  # a linear ramp that never starts at 0 (a wasted step): nanoGPT's
        return (step + 1) / (warmup + 1)
    p = _progress(step, warmup, total)
    if schedule == "cosine":
        return _cos_between(1.0, min_ratio, p)
    if schedule == "linear":
        return 1.0 - (1.0 - min_ratio) * p
    return 1.0


def _progress(step: int, start: int, total: int) -> float:
    """How far ``step`` is from ``start`` to the last step, in [0, 1]."""
    return min(max((step - start) / max(total - 1 - start, 1), 0.0), 1.0)


def _cos_between(a: float, b: float, p: float) -> float:
    """Half a cosine from ``a`` (p = 0) to ``b`` (p = 1)."""
    return b + (a - b) * 0.5 * (1.0 + math.cos(math.pi * p))


def make_scheduler(optimizer: Any, cfg: Any, total_steps: int) -> Any:
    """A LambdaLR applying :func:`lr_factor` for TrainConfig ``cfg`` over ``total_steps``
    optimizer steps (None for a constant lr without warm-up: nothing to schedule)."""
    if cfg.schedule == "constant" and not cfg.warmup_steps:
        return None
    import functools

    from torch.optim.lr_scheduler import LambdaLR

    factor = functools.partial(
        lr_factor,
        total=total_steps,
        schedule=cfg.schedule,
        warmup=cfg.warmup_steps,
        min_ratio=cfg.min_lr_ratio,
    )
    return LambdaLR(optimizer, factor)


def param_groups(model: Any, weight_decay: float) -> list[dict[str, Any]]:
    """Parameters in two groups: decayed (two or more dimensions) and not (biases,
    normalisation weights). Without weight decay, one group of every parameter, as a
    plain ``optimizer(model.parameters())`` has (so checkpoints keep their layout)."""
    params = list(model.parameters())
    if not weight_decay:
        return [{"params": params}]
    decay = [p for p in params if p.dim() >= 2]
    rest = [p for p in params if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": weight_decay}]
    return groups + ([{"params": rest, "weight_decay": 0.0}] if rest else [])


__all__ = ["lr_factor", "make_scheduler", "param_groups"]


# train.optimizer_impl -> torch.optim's keywords; auto passes neither, so torch picks
# (the for-loop on CPU, foreach on CUDA) as it did before the setting existed.
IMPL_FLAGS: dict[str, dict[str, bool]] = {
    "auto": {},
    "for-loop": {"foreach": False},
    "foreach": {"foreach": True},
    "fused": {"fused": True},
}


def build_optimizer(cfg: TrainConfig, model: torch.nn.Module) -> torch.optim.Optimizer:
    """The optimizer a TrainConfig names, over ``model``'s parameters (weight decay on
    matrices only: see trainscope.train.schedule.param_groups), run as
    ``cfg.optimizer_impl`` says."""
    impl = IMPL_FLAGS[cfg.optimizer_impl]
    betas = tuple(cfg.betas) if cfg.betas else (0.9, 0.999)
    if cfg.optimizer == "muon":
        return build_muon(
            model,
            cfg.lr,
            cfg.muon_lr,
            betas,
            cfg.weight_decay,
            impl,
            cfg.muon_ns_dtype,
            ns_steps=cfg.muon_ns_steps,
        )
    groups = param_groups(model, cfg.weight_decay)
    if cfg.optimizer == "sgd":
        return torch.optim.SGD(groups, lr=cfg.lr, momentum=cfg.momentum, **impl)
    if cfg.optimizer == "adam":
        return torch.optim.Adam(groups, lr=cfg.lr, betas=betas, **impl)
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=betas, **impl)
