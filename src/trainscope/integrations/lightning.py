"""trainscope inside a Lightning ``Trainer``, in Lightning's own conventions::

    from trainscope.integrations.lightning import Callback, Profiler

    trainer = L.Trainer(profiler=Profiler(out="runs/lit"), callbacks=[Callback()])
    trainer.fit(model, train_loader, val_loader)

:class:`Profiler` is a Lightning profiler: Lightning calls its ``start``/``stop`` around
every action it runs, and the action names map onto trainscope's stages
(:data:`ACTIONS`): ``train_dataloader_next`` is data wait, ``training_step`` forward,
``backward`` backward, ``optimizer_step`` the optimizer (the forward and backward its
closure runs taken apart), validation and test steps and their batches evaluation,
``save_checkpoint`` checkpoint; what no action covers is ``other``, and the time before
the first action setup. An ``optimizer_step`` that ends is a training step.

:class:`Callback` adds what a profiler is not shown: the model and its optimizers (the
record's model, parameters, device and precision), each batch's size (samples per
second) and each step's loss. It finds the profiler through ``trainer.profiler``; with
no trainscope profiler it does nothing but say so once.

The record is the one ``trainscope profile`` writes (``source.kind: lightning``), read
by ``trainscope report``, ``compare`` and ``doctor``. Needs ``pip install lightning``.
"""

from __future__ import annotations

import warnings
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.profilers import Profiler as LightningProfiler

from trainscope.integrations.driver import Driver

ACTIONS = (
    # (how the action name starts, how it ends, the stage): the first that matches
    ("", "train_dataloader_next", "data_wait"),
    ("[Strategy]", ".backward", "backward"),
    ("[Strategy]", ".validation_step", "evaluation"),
    ("[Strategy]", ".test_step", "evaluation"),
    ("[_EvaluationLoop]", "_next", "evaluation"),
    ("", "save_checkpoint", "checkpoint"),
)
"""Lightning's action names (as its ``SimpleProfiler`` lists them) -> trainscope stages.
Forward and the optimizer are not among them: the Callback times the model's own call
and the optimizer's own step, as ``trainscope profile`` does (``training_step`` and
``optimizer_step`` also hold the LightningModule's logging and Lightning's closure)."""


def stage_of(action: str) -> str | None:
    """The stage a Lightning action is (None: it is not one of the stages)."""
    for start, end, stage in ACTIONS:
        if action.startswith(start) and action.endswith(end):
            return stage
    return None


class Profiler(LightningProfiler):
    """A Lightning profiler that writes a trainscope record to ``out`` (default
    ``runs/lightning-<time>``); see the module docs."""

    def __init__(self, out: str | None = None, *, overwrite: bool = False,
                 log_every: int = 10, warmup_steps: int = 5) -> None:  # fmt: skip
        super().__init__()
        self.driver = Driver("lightning", out, overwrite=overwrite, log_every=log_every,
                             warmup_steps=warmup_steps)  # fmt: skip

    def setup(self, stage: str, local_rank: int | None = None, log_dir: str | None = None) -> None:
        super().setup(stage, local_rank, log_dir)
        if stage == "fit" and self.local_rank == 0:
            self.driver.begin()

    def start(self, action_name: str) -> None:
        stage = stage_of(action_name)
        if stage is not None:
            self.driver.enter(stage)

    def stop(self, action_name: str) -> None:
        stage = stage_of(action_name)
        if stage is not None:
            self.driver.leave(stage)

    def summary(self) -> str:
        """Where the record is and its stage shares (what Lightning prints at the end)."""
        summary = self.driver.summary
        if not summary:
            return ""
        wall = summary.get("wall_time_s") or 0.0
        stages = summary.get("stages_s") or {}
        shares = ", ".join(f"{k} {100 * v / wall:.1f}%" for k, v in stages.items() if wall and v)
        return f"trainscope: {self.driver.options.out or 'runs/'} ({shares})"

    def teardown(self, stage: str | None) -> None:
        if stage == "fit" or (stage is None and self.driver.session is not None):
            self.driver.end()
        super().teardown(stage)


class Callback(pl.Callback):
    """What the trainscope :class:`Profiler` is not shown: the model, its optimizers,
    each batch's size and each step's loss (see the module docs)."""

    def _driver(self, trainer: pl.Trainer) -> Driver | None:
        profiler = getattr(trainer, "profiler", None)
        if isinstance(profiler, Profiler):
            return profiler.driver
        if not getattr(self, "_warned", False):
            self._warned = True
            warnings.warn("trainscope's Lightning Callback needs Trainer(profiler="
                          "trainscope.integrations.lightning.Profiler(...)): nothing is "
                          "recorded", stacklevel=2)  # fmt: skip
        return None

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        driver = self._driver(trainer)
        if driver is None or driver.hooks is None:
            return
        driver.hooks.adopt_model(pl_module)
        for opt in trainer.optimizers:
            driver.hooks.adopt_optimizer(getattr(opt, "optimizer", opt))  # unwrap Lightning's

    def on_before_backward(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                           loss: Any) -> None:  # fmt: skip
        driver = self._driver(trainer)
        if driver is not None and driver.hooks is not None:
            driver.hooks.loss(loss)

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                     exception: BaseException) -> None:  # fmt: skip
        driver = self._driver(trainer)
        if driver is not None:
            driver.end(exception)  # the record says how the run ended


__all__ = ["ACTIONS", "Callback", "Profiler", "stage_of"]
