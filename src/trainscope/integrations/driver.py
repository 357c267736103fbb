"""A run record fed by a framework's own events: what the Lightning and Hugging Face
integrations share.

``trainscope profile`` learns where a script's time goes from global hooks. An
integration is told instead: the framework calls it when a stage starts and stops (a
Lightning profiler's actions, a ``TrainerCallback``'s events), and gives it the model,
the optimizers, each batch and its loss. :class:`EventHooks` keeps the script hooks'
bookkeeping (the models, optimizers, step records, their losses) without installing any
global hook; :class:`Driver` opens the same :class:`~trainscope.script.session.ProfileSession`
around it, so the record (``summary.json``, ``metrics.jsonl``, ``system.jsonl``) is the one
``trainscope profile`` writes, with ``source.kind`` naming the integration.
"""

from __future__ import annotations

import atexit
import sys
from typing import Any

import torch
from torch import nn

from trainscope.script.hooks import ScriptHooks
from trainscope.script.session import ProfileOptions, ProfileSession


class EventHooks(ScriptHooks):
    """The script hooks' bookkeeping, fed by a framework's events: no global hook. The
    model and optimizers the framework names get the script hooks' own per-instance
    hooks (the model's outermost call is forward, or evaluation without gradients; an
    optimizer's ``step`` is optimizer, its closure's own code ``other``, its end the end of
    a training step), so those stages mean what they mean for ``trainscope profile``; the
    rest (data wait, backward, evaluation loops, checkpoints) comes from the framework."""

    def install(self) -> EventHooks:
        return self  # nothing global: the framework says what happens, and when

    def adopt_model(self, module: nn.Module) -> None:
        """The model the framework trains: its calls timed (the first sets the device)."""
        if any(r is module for r in self.roots):
            return
        self._trains(module)
        self._handles += [
            # keyword arguments too: a Hugging Face model is called as model(**batch)
            module.register_forward_pre_hook(self._forward_pre_kw, with_kwargs=True),
            module.register_forward_hook(self._forward_post, always_call=True),
        ]

    def _forward_pre_kw(self, module: nn.Module, args: tuple[Any, ...],
                        kwargs: dict[str, Any]) -> None:  # fmt: skip
        self._forward_pre(module, (*args, kwargs) if kwargs else args)

    def adopt_optimizer(self, opt: torch.optim.Optimizer) -> None:
        """An optimizer the framework steps: its steps timed and counted."""
        if any(o is opt for o in self.optimizers):
            return
        self.optimizers.append(opt)
        self._counts[id(opt)] = 0
        self._handles += [
            opt.register_step_pre_hook(self._step_pre),
            opt.register_step_post_hook(self._step_post),
        ]

    def loss(self, loss: Any) -> None:
        """The loss of a training batch of the step under way (read back in batches)."""
        if isinstance(loss, torch.Tensor) and loss.numel() == 1:
            self.clock.add_loss(loss.detach())


class Driver:
    """One record of a framework's run, from :meth:`begin` to :meth:`end` (both
    idempotent: a framework may tear down more than once)."""

    def __init__(self, kind: str, out: str | None, *, overwrite: bool = False,
                 log_every: int = 10, warmup_steps: int = 5) -> None:  # fmt: skip
        self.options = ProfileOptions(out=out, overwrite=overwrite, log_every=log_every,
                                      warmup_steps=warmup_steps)  # fmt: skip
        self.kind = kind
        self.session: ProfileSession | None = None
        self.summary: dict[str, Any] | None = None
        self._open: list[tuple[str, bool]] = []  # (stage, timed apart), innermost last

    @property
    def hooks(self) -> EventHooks | None:
        return self.session.hooks if self.session is not None else None  # type: ignore[return-value]

    def begin(self) -> None:
        """Open the record (``running``); the clock's setup starts now."""
        if self.session is not None:
            return
        argv = [str(a) for a in sys.argv] or [self.kind]
        source = {"kind": self.kind, "argv": argv, "path": None, "module": None,
                  "sha256": None}  # fmt: skip
        self.session = ProfileSession(self.options, source, self.kind, hooks_class=EventHooks)
        self.session.claim()
        self.session.begin()
        # A framework that raises, or a Ctrl-C, may never send its end event: the record
        # must not stay "running" (a SIGKILL leaves it so; nothing in-process can help).
        atexit.register(self._at_exit)

    def _at_exit(self) -> None:
        if self.session is not None and self.summary is None:
            self.end(RuntimeError(f"the process ended before {self.kind}'s end of training "
                                  "(an exception, Ctrl-C or sys.exit during it)"))  # fmt: skip

    def enter(self, stage: str) -> None:
        """``stage`` begins (nested stages: the clock's rules, as for a script)."""
        hooks = self.hooks
        if hooks is not None:
            # A stage nested where the clock does not time it apart is kept, untimed, so
            # that its leave is matched and ignored.
            self._open.append((stage, hooks.clock.enter(stage)))

    def leave(self, stage: str) -> None:
        """``stage`` ends: the innermost open one of that name, and any entered inside it
        and never left (a framework that skips an end hook on an exception)."""
        hooks = self.hooks
        if hooks is None or not self.holds(stage):
            return
        while self._open:
            name, timed = self._open.pop()
            if timed:
                hooks.clock.leave(name)
            if name == stage:
                return

    def holds(self, stage: str) -> bool:
        """``stage`` was entered and not left yet."""
        return any(name == stage for name, _ in self._open)

    def end(self, error: BaseException | None = None) -> dict[str, Any] | None:
        """Close the record: completed, or failed with ``error``. Returns the summary."""
        if self.session is None or self.summary is not None:
            return self.summary
        while self._open:
            self.leave(self._open[-1][0])
        atexit.unregister(self._at_exit)
        self.summary = self.session.end(error)
        return self.summary


__all__ = ["Driver", "EventHooks"]
