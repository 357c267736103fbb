"""trainscope inside a Hugging Face ``Trainer``, as a ``TrainerCallback``::

    from trainscope.integrations.hf import Callback

    trainer = Trainer(model=model, args=args, ..., callbacks=[Callback(out="runs/hf")])
    trainer.train()

The callback opens the record at ``on_train_begin`` and closes it at ``on_train_end``.
The model and the optimizer the Trainer hands it get per-instance hooks, as
``trainscope profile``'s global ones time them: the model's outermost call is forward
(evaluation, under ``no_grad`` or in eval mode), the optimizer's own ``step`` is the
optimizer stage and the end of a training step. Backward runs from the moment autograd
reaches the model's loss to the Trainer's next event (``on_substep_end`` while gradients
accumulate, ``on_pre_optimizer_step`` before the step: gradient clipping is in it).

A checkpoint runs from the event after which the Trainer saves (``on_step_end``, or
``on_evaluate`` when it evaluates first) to ``on_save``. A ``TrainerCallback`` is not
told when the Trainer fetches a batch: data wait stays in ``other``, and the record says
so.

The record is the one ``trainscope profile`` writes (``source.kind: hf``). Needs
``pip install transformers accelerate``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from transformers import TrainerCallback

from trainscope.integrations.driver import Driver

NOT_SEEN = (
    "measured by trainscope's Hugging Face TrainerCallback, which is not told when the "
    "Trainer fetches a batch: data wait is in other"
)


def _loss_of(output: Any) -> torch.Tensor | None:
    """The loss a model's output carries (``ModelOutput.loss``, ``{"loss": ...}``, or the
    output itself when it is one number), or None."""
    loss = getattr(output, "loss", None)
    if loss is None and isinstance(output, Mapping):
        loss = output.get("loss")
    if loss is None and isinstance(output, torch.Tensor) and output.numel() == 1:
        loss = output
    return loss if isinstance(loss, torch.Tensor) and loss.numel() == 1 else None


class Callback(TrainerCallback):
    """A TrainerCallback that writes a trainscope record to ``out`` (default
    ``runs/hf-<time>``); see the module docs."""

    def __init__(self, out: str | None = None, *, overwrite: bool = False,
                 log_every: int = 10, warmup_steps: int = 5) -> None:  # fmt: skip
        self.driver = Driver("hf", out, overwrite=overwrite, log_every=log_every,
                             warmup_steps=warmup_steps)  # fmt: skip
        self._handle: Any = None

    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None,
                       optimizer: Any = None, **kwargs: Any) -> None:  # fmt: skip
        if not state.is_world_process_zero:
            return
        self.driver.begin()
        hooks = self.driver.hooks
        if hooks is None or model is None:
            return
        hooks.adopt_model(model)
        self._handle = model.register_forward_hook(self._after_forward)
        if optimizer is not None:  # accelerate's wrapper steps the torch optimizer inside
            hooks.adopt_optimizer(getattr(optimizer, "optimizer", optimizer))

    def _after_forward(self, module: torch.nn.Module, args: Any, output: Any) -> None:
        """A training forward's loss: recorded, and backward starts when autograd reaches it."""
        hooks = self.driver.hooks
        loss = _loss_of(output)
        if hooks is None or loss is None or loss.grad_fn is None or not module.training:
            return
        hooks.loss(loss)
        loss.grad_fn.register_prehook(self._backward_starts)

    def _backward_starts(self, grad_outputs: Any) -> None:
        self.driver.enter("backward")

    def _backward_ends(self) -> None:
        if self.driver.holds("backward"):
            self.driver.leave("backward")

    def on_substep_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._backward_ends()

    def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._backward_ends()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if control.should_save and not control.should_evaluate:  # saved after logging
            self.driver.enter("checkpoint")

    def on_evaluate(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if control.should_save:  # saved after this evaluation
            self.driver.enter("checkpoint")

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.driver.holds("checkpoint"):
            self.driver.leave("checkpoint")

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.driver.session is None:
            return
        if self._handle is not None:
            self._handle.remove()
        self.driver.session.record.note(NOT_SEEN)
        self.driver.end()


__all__ = ["Callback"]
