"""``--inject``'s model keys: what changes the outermost model an unchanged script trains.

The model is not known until it runs: the hooks (:class:`trainscope.script.hooks.ScriptHooks`)
find it at its first training forward and call :meth:`ModelSettings.on_model` then, and
:meth:`ModelSettings.on_forward` / :meth:`ModelSettings.loss_done` around each training
forward and its loss.

- ``precision=bf16``: ``torch.autocast`` entered at the model's training forward and left
  when the loss goes backward (or the optimizer steps, or an evaluation starts), so the
  loss a script computes outside the model is under it too, as it would be inside the
  script's own ``with torch.autocast(...)``. A script that already autocasts is left as
  it is, and the record says so. Evaluation forwards stay in the script's precision.
- ``compile``: the model compiled in place (``module.compile()``), which takes effect
  from its next call: its first training step runs eagerly, and the compile lands in the
  steps the steady state leaves out. Put back after the run.
- ``activation_checkpointing``: the model's repeated blocks
  (:func:`trainscope.workloads.base.find_blocks`) checkpointed as trainscope's own models
  are (:func:`trainscope.techniques.activation_checkpointing.checkpoint_blocks`), from the
  first step on. A model without such blocks ends the run, refused with the reason
  (:class:`InjectRefused`): a measurement "with checkpointing" of a model with nothing
  checkpointed would be a false one.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from trainscope.errors import ConfigError
from trainscope.techniques.activation_checkpointing import checkpoint_blocks, uncheckpoint
from trainscope.workloads.base import find_blocks

_DTYPES = {"bf16": torch.bfloat16}


class InjectRefused(BaseException):
    """An injected setting that cannot apply to the model the script trains: the script is
    ended there (a BaseException, so no ``except Exception`` in the script swallows it)."""


def _inner(module: nn.Module) -> nn.Module:
    """The user's model inside a DDP / DataParallel wrapper or a torch.compile result."""
    for attr in ("module", "_orig_mod"):
        inner = getattr(module, attr, None)
        if isinstance(inner, nn.Module):
            return _inner(inner)
    return module


def _backend(value: Any) -> str | None:
    """``compile``'s value -> the backend to use (None: do not compile)."""
    if value is False or value is None:
        return None
    if value is True:
        return "inductor"
    known = torch.compiler.list_backends(exclude_tags=())
    if value not in known:
        raise ConfigError(f"--inject compile={value}: no such backend; known: {', '.join(known)}")
    return str(value)


class ModelSettings:
    """``precision``, ``compile`` and ``activation_checkpointing`` (see module docs)."""

    def __init__(self, injected: dict[str, Any]) -> None:
        self.precision = injected.get("precision")
        self.backend = _backend(injected.get("compile"))
        self.policy = injected.get("activation_checkpointing")
        if self.policy == "none":
            self.policy = None
        self.model: nn.Module | None = None
        self._autocast: Any = None  # the torch.autocast entered, until the loss is done
        self.autocast_forwards = 0
        self.script_autocast: str | None = None
        self.compiled: nn.Module | None = None
        self.blocks: list[nn.Module] = []
        self.where = ""

    @property
    def wanted(self) -> bool:
        return bool(self.precision or self.backend or self.policy)

    def on_model(self, module: nn.Module) -> None:
        """The outermost model the script trains, at its first training forward."""
        if not self.wanted or self.model is not None:
            return
        self.model = module
        if self.policy:
            self.where, blocks = find_blocks(_inner(module))
            if not blocks:
                raise InjectRefused(
                    f"--inject activation_checkpointing={self.policy}: refused, "
                    f"{type(_inner(module)).__name__} has no repeated blocks to checkpoint "
                    "(a `blocks` attribute, or an nn.ModuleList of two or more modules of "
                    "one class)"
                )
            self.blocks = checkpoint_blocks(blocks, self.policy)
        already = getattr(module, "_compiled_call_impl", None) is not None
        if self.backend and not already and not hasattr(module, "_orig_mod"):
            module.compile(backend=self.backend)
            self.compiled = module

    def on_forward(self, module: nn.Module) -> None:
        """A training forward of the model begins: autocast entered for it and its loss."""
        if self.precision is None or module is not self.model or self._autocast is not None:
            return
        kind = next((p.device.type for p in module.parameters()), "cpu")
        if torch.is_autocast_enabled(kind):
            self.script_autocast = str(torch.get_autocast_dtype(kind)).replace("torch.", "")
            return
        self._autocast = torch.autocast(kind, dtype=_DTYPES[self.precision])
        self._autocast.__enter__()
        self.autocast_forwards += 1

    def loss_done(self) -> None:
        """Backward, a step or an evaluation begins: the autocast region ends."""
        if self._autocast is not None:
            region, self._autocast = self._autocast, None
            region.__exit__(None, None, None)

    def remove(self) -> None:
        """Everything put back: autocast left, blocks unwrapped, the compile undone."""
        self.loss_done()
        uncheckpoint(self.blocks)
        if self.compiled is not None:
            self.compiled._compiled_call_impl = None  # as before module.compile()
            self.compiled = None

    def notes(self) -> list[str]:
        notes = []
        if self.wanted and self.model is None:
            notes.append("--inject: no model trained, so precision, compile and "
                         "activation_checkpointing changed nothing")  # fmt: skip
        if self.script_autocast:
            notes.append(
                f"--inject precision={self.precision}: the script already runs its forward "
                f"under autocast {self.script_autocast}, left as it is"
            )
        return notes

    def record(self) -> dict[str, Any]:
        """What the model keys reached, for the record's ``script`` section."""
        if not self.wanted:
            return {}
        model = self.model
        return {"injected_model": {
            "model": type(_inner(model)).__name__ if model is not None else None,
            "autocast_forwards": self.autocast_forwards if self.precision else None,
            "script_autocast": self.script_autocast,
            "compiled": self.backend if self.backend and model is not None else None,
            "checkpointed_blocks": len(self.blocks) if self.policy else None,
            "blocks_at": self.where or None,
        }}  # fmt: skip


__all__ = ["InjectRefused", "ModelSettings"]
