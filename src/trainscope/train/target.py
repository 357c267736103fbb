"""Evaluations at a steady interval of steps, and the rule that ends a run early: a target
met (``--target val_loss<=1.88``) or a time limit passed (``--time-limit``).

Every ``--eval-every-steps`` global steps the loop stops between two steps; the pending
step records are resolved first, so no evaluation lands in a step's stage times. The
validation split (and the test split, when the target reads it) is evaluated on its
fixed batches, with the random generators forked so that the training that follows is
the same as without the evaluation. Each evaluation is an ``eval`` line of
``metrics.jsonl`` with the training time it came at; its seconds are the run's
``evaluation`` stage and are not training time.

Times to the target, both recorded: *training time* (the epochs' durations so far:
setup, compilation, evaluation and checkpoint-free waits excluded) and *process time*
(from the interpreter's start to the end of the evaluation that showed the target met:
what a user waits for). Process time is only a run's own when its process ran nothing
before it; otherwise the record says so instead of giving a number.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from trainscope.config import TrainConfig
from trainscope.errors import ConfigError
from trainscope.records import RunWriter
from trainscope.runtime.dist import DistInfo, broadcast_object
from trainscope.train.progress import RunProgress
from trainscope.util.checks import show
from trainscope.util.target import Target, parse_target

if TYPE_CHECKING:
    from trainscope.train.state import TrainState

EvaluateSplit = Callable[[str], "dict[str, Any]"]
"""``evaluate_split("val" | "test") -> figures``: one evaluation of a split (the trainer's,
which also times it as the ``evaluation`` stage)."""


def _figures(metrics: dict[str, Any]) -> dict[str, Any]:
    """An evaluation's scalar figures (per-class lists stay out of the eval lines)."""
    return {k: v for k, v in metrics.items() if isinstance(v, (int, float)) or v is None}


def check_splits(
    target: Target | None, val_loader: Any, test_set: Any, figures: dict[str, Any]
) -> None:
    """One clear error, before training, when the target reads a split the run does not
    have or a figure its evaluation does not compute (``figures``: an empty evaluation's)."""
    if target is None:
        return
    _need_figure(target, figures)
    missing = val_loader is None if target.split == "val" else test_set is None
    if not missing:
        try:
            missing = target.split == "test" and len(test_set) == 0
        except TypeError:  # a split without len(): assume it has samples
            pass
    if missing:
        name = "validation" if target.split == "val" else "test"
        raise ConfigError(
            f"--target {show(target.text)}: this workload has no {name} split to evaluate"
        )


def _need_figure(target: Target, metrics: dict[str, Any]) -> None:
    if target.figure not in metrics:
        have = ", ".join(f"{target.split}_{k}" for k in _figures(metrics))
        raise ConfigError(
            f"--target {show(target.text)}: the evaluation has no {target.figure} (it has {have})"
        )


class StepEvaluations:
    """Evaluations every ``eval_every_steps`` steps and the stop rule over them; its
    :meth:`between_steps` is the loop's ``between_steps`` hook."""

    def __init__(
        self,
        train: TrainConfig,
        evaluate_split: EvaluateSplit,
        *,
        writer: RunWriter,
        progress: RunProgress,
        info: DistInfo,
        origin: float,
        own_process: Callable[[], float | None],
        has_val: bool = True,
    ) -> None:
        self.every = train.eval_every_steps
        self.log_every = train.log_every
        self.limit = train.time_limit_s
        self.target: Target | None = parse_target(train.target) if train.target else None
        self.evaluate_split, self.writer, self.progress = evaluate_split, writer, progress
        self.info, self.origin = info, origin
        self.splits = ("val",) if has_val else ()
        """What every evaluation between steps covers (and the target's split)."""
        self.own_process = own_process
        """Seconds from the process's start to now, or None when the process is not this
        run's own (it ran another run before, or this is a resumed attempt)."""
        self.reached: dict[str, Any] | None = None
        self.stopped_by: str | None = None
        self.results: dict[str, dict[str, Any]] = {}
        """The latest evaluation of each split, at step :attr:`at_step`."""
        self.at_step: int | None = None
        # Kept in the run's progress, so that a checkpoint saves it and a resume goes on.
        self.state: dict[str, Any] = progress.stop_rule
        self.state.setdefault("evaluations", 0)

    @property
    def active(self) -> bool:
        """Whether the run has anything of this: an interval, a target or a time limit."""
        return bool(self.every or self.target is not None or self.limit)

    def between_steps(
        self, state: TrainState, flush: Callable[[], None], epoch_s: float
    ) -> tuple[bool, float]:
        """After a step: evaluate if one is due, then ask the stop rule; whether the run
        ends here, and the seconds spent evaluating."""
        step = state.step
        due = bool(self.every) and step % self.every == 0
        if not due and not (self.limit and step % self.log_every == 0):
            return False, 0.0
        train_s = self.progress.train_time + epoch_s
        paused = 0.0
        if due:
            flush()  # every step up to here is in the record before the evaluation
            t0 = time.perf_counter()
            # The evaluation's loaders draw seeds from the generators: forked, training
            # goes on with the same random numbers as a run that does not evaluate.
            devices = [state.device] if state.device.type == "cuda" else []
            with torch.random.fork_rng(devices=devices):
                self._evaluate(step, state.epoch + 1, train_s, self.splits)
            state.model.train()
            paused = time.perf_counter() - t0
        return self._decide(train_s), paused

    def after_epoch(self, state: TrainState, val: dict[str, Any] | None, train_s: float) -> bool:
        """After an epoch (its validation ``val``, if it had one): record it as an
        evaluation unless one was taken at this very step, then ask the stop rule."""
        if val is not None and self.at_step != state.step:
            self._evaluate(state.step, state.epoch, train_s, (), given={"val": val})
        return self._decide(train_s)

    def result_at(self, step: int, split: str) -> dict[str, Any] | None:
        """The evaluation of ``split`` taken at ``step``, if there is one (reused rather
        than evaluated twice)."""
        return self.results.get(split) if self.at_step == step else None

    def _evaluate(
        self, step: int, epoch: int, train_s: float, splits: tuple[str, ...],
        given: dict[str, dict[str, Any]] | None = None,
    ) -> None:  # fmt: skip
        """Evaluate ``splits`` (and the target's), log each as an ``eval`` line, and
        check the target on its split."""
        results = dict(given or {})
        wanted = list(splits)
        if self.target is not None and self.target.split not in (*wanted, *results):
            wanted.append(self.target.split)
        for split in wanted:
            t0 = time.perf_counter()
            metrics = self.evaluate_split(split)
            results[split] = metrics
            self.writer.log(
                "eval", step=step, epoch=epoch, split=split, t=t0 - self.origin,
                seconds=time.perf_counter() - t0, train_time_s=train_s, **_figures(metrics),
            )  # fmt: skip
        for split in results.keys() - set(wanted):  # the epoch's validation, already taken
            self.writer.log(
                "eval", step=step, epoch=epoch, split=split, train_time_s=train_s,
                **_figures(results[split]),
            )  # fmt: skip
        self.writer.flush()
        self.results, self.at_step = results, step
        self.state["evaluations"] += 1
        if self.target is not None:
            self._check(results[self.target.split], step, epoch, train_s)

    def _check(self, metrics: dict[str, Any], step: int, epoch: int, train_s: float) -> None:
        """Note the best figure so far and, the first time the target is met, when."""
        assert self.target is not None
        figure = self.target.figure
        _need_figure(self.target, metrics)
        value = metrics[figure]
        if self.target.better(value, self.state.get("best_value")):
            self.state.update(best_value=value, best_step=step, best_train_time_s=train_s)
        if self.reached is None and self.target.met(value):
            process_s = self.own_process()
            self.reached = {
                "step": step, "epoch": epoch, "value": value, "train_time_s": train_s,
                "run_time_s": time.perf_counter() - self.origin, "process_time_s": process_s,
            }  # fmt: skip

    def _decide(self, train_s: float) -> bool:
        """Whether the run ends now: the target met, or the time limit passed. Rank 0's
        verdict holds on every rank (their clocks differ a little)."""
        verdict = None
        if self.reached is not None:
            verdict = "target"
        elif self.limit and train_s >= self.limit:
            verdict = "time_limit"
        verdict = broadcast_object(verdict, self.info)
        self.stopped_by = verdict
        return verdict is not None

    def section(self) -> dict[str, Any]:
        """The record's ``target`` section: the rule, how the run ended, and when the
        target was met (or the best figure it reached instead)."""
        target, reached = self.target, self.reached
        out: dict[str, Any] = {
            "target": target.text if target else None,
            "metric": target.metric if target else None,
            "op": target.op if target else None,
            "threshold": target.threshold if target else None,
            "eval_every_steps": self.every or None,
            "time_limit_s": self.limit or None,
            "evaluations": self.state["evaluations"],
            "stopped_by": self.stopped_by,
            "reached": (reached is not None) if target else None,
        }
        out.update(reached or dict.fromkeys(
            ("step", "epoch", "value", "train_time_s", "run_time_s", "process_time_s")
        ))  # fmt: skip
        if reached is not None and reached["process_time_s"] is None:
            out["process_time_note"] = (
                "not this run's own: its process ran another run first, or it was resumed"
            )
        out["best"] = {
            "value": self.state.get("best_value"),
            "step": self.state.get("best_step"),
            "train_time_s": self.state.get("best_train_time_s"),
        }
        return out

    def message(self) -> str | None:
        """One line on how the stop rule ended the run (None: it did not)."""
        target, reached = self.target, self.reached
        if reached is not None and target is not None:
            proc = reached["process_time_s"]
            since = f", {proc:.1f} s since the process started" if proc is not None else ""
            return (
                f"target {target.text} met at step {reached['step']} "
                f"({target.metric} {reached['value']:.4g}): {reached['train_time_s']:.1f} s "
                f"of training{since}"
            )
        if self.stopped_by == "time_limit":
            best = self.state.get("best_value")
            if target is None:
                return f"time limit of {self.limit:g} s of training reached"
            got = (
                f"best {target.metric} {best:.4g} at step {self.state.get('best_step')}"
                if best is not None
                else f"no evaluation gave {target.metric}"
            )
            return f"target {target.text} not met within {self.limit:g} s of training ({got})"
        if target is not None and self.reached is None:
            return f"target {target.text} not met by the end of training"
        return None


__all__ = ["EvaluateSplit", "StepEvaluations", "check_splits"]
