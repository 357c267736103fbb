"""Precision objects: how the forward runs, how the loss is backpropagated, how the step is taken.

Each precision is an object with no-op defaults (fp32 changes nothing), in the spirit of
Lightning Fabric's precision plugins. A precision that the current device cannot run is a
:class:`DeviceError` at construction, never a silent fallback to fp32: a study comparing
precisions must not report fp32 numbers under a bf16 label.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from contextlib import AbstractContextManager as ContextManager

import torch

from trainscope.errors import DeviceError

NormFn = Callable[[list[torch.Tensor]], "torch.Tensor | None"]
"""The global gradient norm of a list of parameters, or None for their local norm."""


class Precision:
    """fp32: full precision, nothing changed."""

    name = "fp32"
    skips_nonfinite_steps = False
    """True where a non-finite loss is expected now and then and its step is skipped
    (fp16's GradScaler); elsewhere a non-finite loss ends the run."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.skipped_steps = 0

    def autocast(self) -> ContextManager[None]:
        """Context for forward and loss; a no-op here."""
        return contextlib.nullcontext()

    def backward(self, loss: torch.Tensor) -> None:
        """Backpropagate the loss."""
        loss.backward()

    def step(
        self, optimizer: torch.optim.Optimizer, clip: float = 0.0, norm: NormFn | None = None
    ) -> None:
        """Take the optimizer step, the gradients' global norm clipped to ``clip`` first
        (0: not clipped); ``norm`` computes that norm where gradients span ranks."""
        if clip:
            clip_gradients(optimizer, clip, norm)
        optimizer.step()

    def state_dict(self) -> dict:
        """State a resumed run needs (the GradScaler's, for fp16): plain JSON data."""
        return {"skipped_steps": self.skipped_steps}

    def load_state_dict(self, state: dict) -> None:
        """Put back what :meth:`state_dict` returned."""
        self.skipped_steps = int(state.get("skipped_steps", 0))

    def close(self) -> None:
        """Undo any global switch this precision turned on."""


class TF32(Precision):
    """fp32 tensors, with matmuls and convolutions on TF32 tensor cores (Ampere and newer)."""

    name = "tf32"

    def __init__(self, device: torch.device) -> None:
        super().__init__(device)
        if device.type != "cuda":
            raise DeviceError("precision tf32 needs an NVIDIA GPU (Ampere or newer); not on CPU")
        major, _ = torch.cuda.get_device_capability(device)
        if major < 8:
            raise DeviceError(
                f"precision tf32 needs compute capability >= 8.0; "
                f"{torch.cuda.get_device_name(device)} has {major}.x"
            )
        # TF32 is a process-wide switch in PyTorch; remember the old values and restore them
        # in close() so one run does not change the next.
        self._saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True

    def close(self) -> None:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = self._saved


class BF16(Precision):
    """bfloat16 autocast: fp32 range, no loss scaling needed."""

    name = "bf16"

    def __init__(self, device: torch.device) -> None:
        super().__init__(device)
        if device.type == "cuda" and not torch.cuda.is_bf16_supported():
            raise DeviceError(f"precision bf16 is not supported on {torch.cuda.get_device_name()}")
        if device.type not in ("cuda", "cpu"):
            raise DeviceError(f"precision bf16 is not supported on device {device}")

    def autocast(self) -> ContextManager[None]:
        return torch.autocast(device_type=self.device.type, dtype=torch.bfloat16)


class FP16(Precision):
    """float16 autocast with dynamic loss scaling (GradScaler); skipped steps are counted."""

    name = "fp16"
    skips_nonfinite_steps = True

    def __init__(self, device: torch.device) -> None:
        super().__init__(device)
        if device.type != "cuda":
            # CPU fp16 autocast exists in recent PyTorch but runs through slow paths; we do
            # not offer it as "mixed precision" because it would mislead a speed study.
            raise DeviceError("precision fp16 (with GradScaler) needs a CUDA GPU; not on CPU")
        self.scaler = torch.amp.GradScaler(device.type)

    def autocast(self) -> ContextManager[None]:
        return torch.autocast(device_type=self.device.type, dtype=torch.float16)

    def backward(self, loss: torch.Tensor) -> None:
        self.scaler.scale(loss).backward()

    def step(
        self, optimizer: torch.optim.Optimizer, clip: float = 0.0, norm: NormFn | None = None
    ) -> None:
        if clip:  # clip the true gradients: unscale them first (GradScaler's recipe)
            self.scaler.unscale_(optimizer)
            clip_gradients(optimizer, clip, norm)
        # GradScaler.step() already reads found_inf on the host (one sync per step), so
        # comparing the scale before and after update() adds no extra synchronisation
        # worth mentioning. The scale only drops when a step was skipped for inf/NaN.
        before = self.scaler.get_scale()
        self.scaler.step(optimizer)
        self.scaler.update()
        if self.scaler.get_scale() < before:
            self.skipped_steps += 1

    def state_dict(self) -> dict:
        return {**super().state_dict(), "scaler": self.scaler.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        if state.get("scaler"):
            self.scaler.load_state_dict(state["scaler"])


def clip_gradients(
    optimizer: torch.optim.Optimizer, max_norm: float, norm: NormFn | None = None
) -> None:
    """Scale the optimizer's gradients down so that their global L2 norm is at most
    ``max_norm`` (no host sync: the norm stays on the device). ``norm`` gives the global
    norm where it spans ranks (a pipeline's stages); None: these gradients alone."""
    params = [p for g in optimizer.param_groups for p in g["params"] if p.grad is not None]
    total = norm(params) if norm is not None else None
    if total is None:
        torch.nn.utils.clip_grad_norm_(params, max_norm, foreach=True)
        return
    # clip_grad_norm_'s own rule, applied to each rank's local gradients (plain tensors
    # and DTensor shards alike: one foreach over both kinds would mix them).
    coef = (max_norm / (total + 1e-6)).clamp(max=1.0)
    for p in params:
        grad = p.grad
        local = grad.to_local() if hasattr(grad, "to_local") else grad
        local.mul_(coef.to(local.device))


_PRECISIONS: dict[str, type[Precision]] = {
    "fp32": Precision,
    "tf32": TF32,
    "bf16": BF16,
    "fp16": FP16,
}


def make_precision(name: str, device: torch.device) -> Precision:
    """The precision object for ``name`` on ``device`` (DeviceError if it cannot run there)."""
    try:
        cls = _PRECISIONS[name]
    except KeyError:
        raise DeviceError(f"unknown precision {name!r}") from None
    return cls(device)
