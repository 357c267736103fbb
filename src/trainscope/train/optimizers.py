"""Muon for a model's hidden matrices and AdamW for the rest, as one optimizer.

The speedruns (modded-nanogpt, Keller Jordan's Muon) train the hidden 2-D weight matrices
with Muon, which orthogonalises each matrix's momentum update (Newton-Schulz iterations),
and everything else with AdamW: embeddings, the output head, biases and norms. Muon is
``torch.optim.Muon``, which takes 2-D parameters only. :class:`MuonWithAdamW` holds one
``torch.optim.Muon`` and one ``torch.optim.AdamW`` and shows their groups as its own. An
lr schedule therefore moves both, each from its own learning rate, and a checkpoint saves
and restores both as one optimizer's state.

``torch.optim.Muon`` runs its Newton-Schulz iterations in bfloat16, the fast path of a
GPU. A CPU without native bf16 units (no avx512_bf16 or amx_bf16) converts every bf16
matmul and runs it slower than fp32: 94 ms against 18 ms per step for the 16 hidden
matrices of a 4-layer, 128-wide GPT on one core of this project's Xeon
(benchmarks/muon_newton_schulz.py). There :class:`MuonNS` runs the same iterations in
fp32; elsewhere it is torch's Muon unchanged (``--muon-ns-dtype`` chooses).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from trainscope.errors import ConfigError
from trainscope.runtime.device import cpu_low_precision

MUON_MOMENTUM = 0.95
"""torch.optim.Muon's default, and Keller Jordan's (Nesterov, 5 Newton-Schulz steps)."""


NS_DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}


def ns_dtype(choice: str, device: torch.device) -> torch.dtype:
    """The Newton-Schulz dtype for ``--muon-ns-dtype`` (auto: fp32 on a CPU without
    native bf16 units, torch's bf16 everywhere else)."""
    if choice != "auto":
        return NS_DTYPES[choice]
    if device.type == "cpu":
        units = cpu_low_precision()
        if units is not None and not units["bf16"]:
            return torch.float32
    return torch.bfloat16


def orthogonalize(
    update: torch.Tensor, coefficients: tuple[float, float, float], steps: int, eps: float,
    dtype: torch.dtype,
) -> torch.Tensor:  # fmt: skip
    """Muon's quintic Newton-Schulz iteration in ``dtype``: the operations of
    ``torch.optim.Muon``, in its order (in bf16 the two give the same bits; tested)."""
    a, b, c = coefficients
    x = update.to(dtype)
    tall = update.size(0) > update.size(1)
    if tall:
        x = x.T
    x.div_(x.norm().clamp(min=eps))  # the spectral norm at most 1
    for _ in range(steps):
        gram = x @ x.T
        x = torch.addmm(x, torch.addmm(gram, gram, gram, beta=b, alpha=c), x, beta=a)
    return x.T if tall else x


class MuonNS(torch.optim.Muon):
    """``torch.optim.Muon`` with its Newton-Schulz iterations in ``ns_dtype``: in bf16 it
    is torch's own step; in fp32 the same update (momentum, Nesterov, orthogonalisation,
    the shape's lr scale, decoupled weight decay), with the same state."""

    def __init__(self, params: Any, *, ns_dtype: torch.dtype, **kwargs: Any) -> None:
        super().__init__(params, **kwargs)
        self.ns_dtype = ns_dtype

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]
        """One Muon step over every parameter that has a gradient."""
        if self.ns_dtype == torch.bfloat16:
            return super().step(closure)
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            lr, momentum = group["lr"], group["momentum"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if "momentum_buffer" not in state:
                    state["momentum_buffer"] = torch.zeros_like(p.grad)
                buf = state["momentum_buffer"]
                buf.lerp_(p.grad, 1 - momentum)
                update = p.grad.lerp(buf, momentum) if group["nesterov"] else buf
                update = orthogonalize(update, group["ns_coefficients"], group["ns_steps"],
                                       group["eps"], self.ns_dtype)  # fmt: skip
                p.mul_(1 - lr * group["weight_decay"])
                p.add_(update, alpha=-lr * _lr_scale(group["adjust_lr_fn"], p.shape))
        return loss


def _lr_scale(adjust_lr_fn: str | None, shape: torch.Size) -> float:
    """torch.optim.Muon's per-shape learning-rate factor."""
    rows, cols = shape[:2]
    if adjust_lr_fn is None or adjust_lr_fn == "original":
        return math.sqrt(max(1, rows / cols))
    if adjust_lr_fn == "match_rms_adamw":
        return 0.2 * math.sqrt(max(rows, cols))
    return 1.0


def muon_split(model: torch.nn.Module) -> tuple[list[str], list[str]]:
    """The names of the trainable parameters Muon trains (the 2-D weights of the model's
    ``nn.Linear`` layers, except the last one, its head, and any weight an embedding
    shares) and of those AdamW trains (all the rest), in ``named_parameters`` order."""
    embedded = {id(m.weight) for m in model.modules() if isinstance(m, torch.nn.Embedding)}
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    hidden = {id(m.weight) for m in linears[:-1] if m.weight.dim() == 2} - embedded
    muon, rest = [], []
    for name, p in model.named_parameters():  # each shared tensor once
        if p.requires_grad:
            (muon if id(p) in hidden else rest).append(name)
    return muon, rest


class MuonWithAdamW(torch.optim.Optimizer):
    """Muon over ``muon_params``, AdamW over ``adamw_groups``: one optimizer whose groups
    are the two's (Muon's first), sharing one state."""

    def __init__(
        self, muon_params: list[torch.nn.Parameter], adamw_groups: list[dict[str, Any]], *,
        muon_lr: float, lr: float, betas: tuple[float, float], weight_decay: float,
        adamw_flags: dict[str, bool] | None = None, ns: torch.dtype = torch.bfloat16,
        ns_steps: int = 5,
    ) -> None:  # fmt: skip
        self.muon = MuonNS(
            muon_params,
            lr=muon_lr,
            momentum=MUON_MOMENTUM,
            weight_decay=weight_decay,
            ns_dtype=ns,
            ns_steps=ns_steps,
        )
        self.adamw = torch.optim.AdamW(adamw_groups, lr=lr, betas=betas, **(adamw_flags or {}))
        for g in self.muon.param_groups:
            g["optimizer"] = "muon"
        for g in self.adamw.param_groups:
            g["optimizer"] = "adamw"
        # The same group dicts: a schedule that sets a group's lr sets the inner one's.
        super().__init__([*self.muon.param_groups, *self.adamw.param_groups], {})
        self._link()

    def _link(self) -> None:
        """Point the inner optimizers at this one's groups and state."""
        n = len(self.muon.param_groups)
        self.muon.param_groups, self.adamw.param_groups = (
            self.param_groups[:n], self.param_groups[n:])  # fmt: skip
        self.muon.state = self.adamw.state = self.state

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]
        """One step of each."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        self.muon.step()
        self.adamw.step()
        return loss

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """As ``torch.optim.Optimizer`` loads it, then the inner optimizers linked again
        (loading replaces the groups and the state)."""
        super().load_state_dict(state_dict)
        self._link()

    def describe(self) -> dict[str, Any]:
        """What goes to the run record: the two optimizers' shares of the parameters."""

        def count(groups: list[dict[str, Any]]) -> dict[str, int]:
            params = [p for g in groups for p in g["params"]]
            return {"tensors": len(params), "parameters": sum(p.numel() for p in params)}

        def lr(groups: list[dict[str, Any]]) -> float | None:  # before any schedule moved it
            return groups[0].get("initial_lr", groups[0]["lr"]) if groups else None

        muon, adamw = self.muon.param_groups, self.adamw.param_groups
        ns = "fp32" if self.muon.ns_dtype == torch.float32 else "bf16"
        steps = muon[0]["ns_steps"] if muon else None
        return {"name": "muon", "muon": {**count(muon), "lr": lr(muon), "newton_schulz": ns,
                                         "newton_schulz_steps": steps},
                "adamw": {**count(adamw), "lr": lr(adamw)}}  # fmt: skip


def build_muon(
    model: torch.nn.Module, lr: float, muon_lr: float, betas: tuple[float, float],
    weight_decay: float, adamw_flags: dict[str, bool], ns: str = "auto", *, ns_steps: int = 5,
) -> MuonWithAdamW:  # fmt: skip
    """Muon for the hidden matrices, AdamW (decay on matrices only) for the rest; a model
    without a hidden matrix is one clear error."""
    muon_names, rest_names = muon_split(model)
    if not muon_names:
        raise ConfigError(
            "--optimizer muon: this model has no hidden 2-D weight matrix for Muon (only "
            "its head, embeddings, convolutions or vectors): use adamw"
        )
    named = dict(model.named_parameters())
    rest = [named[n] for n in rest_names]
    decay = [p for p in rest if p.dim() >= 2]
    groups = [{"params": decay, "weight_decay": weight_decay}] if decay else []
    groups += [{"params": [p for p in rest if p.dim() < 2], "weight_decay": 0.0}]
    groups = [g for g in groups if g["params"]]
    device = named[muon_names[0]].device
    return MuonWithAdamW(
        [named[n] for n in muon_names], groups, muon_lr=muon_lr, lr=lr, betas=betas,
        weight_decay=weight_decay, adamw_flags=adamw_flags, ns=ns_dtype(ns, device),
        ns_steps=ns_steps,
    )  # fmt: skip


__all__ = [
    "MUON_MOMENTUM",
    "MuonNS",
    "MuonWithAdamW",
    "build_muon",
    "muon_split",
    "ns_dtype",
    "orthogonalize",
]
