"""The run as one object: train an epoch, validate, test, finish.

:func:`trainscope.train.run.run` prepares what a run needs (device, process group,
precision, strategy, the claimed run directory) into a
:class:`~trainscope.train.parts.RunContext`; :func:`train` builds its
:class:`~trainscope.train.parts.Parts` (:func:`trainscope.train.setup.build_parts`) and a
:class:`Trainer` does the rest in short phases, each contributing its figures to the
run's :class:`~trainscope.train.record.RunSummary`. Everything a resumed run needs lives
in the :class:`~trainscope.train.state.TrainState` and the run's
:class:`~trainscope.train.progress.RunProgress`; the
:class:`~trainscope.train.checkpointer.Checkpointer` decides when both are saved.
"""

from __future__ import annotations

import time
from typing import Any

from trainscope import registry
from trainscope.profiling.system import peak_rss_bytes
from trainscope.profiling.timer import device_sync
from trainscope.records import RunWriter, atomic_write_json
from trainscope.records.steady_state import steady_state
from trainscope.train import ranks
from trainscope.train.figures import memory_figures, throughput_figures
from trainscope.train.loop import EpochOptions, train_epoch
from trainscope.train.parts import Parts, RunContext, RunPlace
from trainscope.train.preemption import stop_between_epochs
from trainscope.train.progress import RunProgress
from trainscope.train.record import Results, RunSummary
from trainscope.train.setup import build_parts, has_samples

AFTER_WALL_NOT_TIMED = (
    "stopping the system sampler, writing summary.json, tracking uploads and the interpreter's exit"
)


class Trainer:
    """One run's phases over its state; :meth:`run` calls them in order."""

    def __init__(self, place: RunPlace, parts: Parts) -> None:
        self.place, self.parts = place, parts
        self.ctx, self.cfg = place.ctx, place.cfg
        self.writer, self.record, self.progress = place.writer, place.record, place.progress
        self.state = parts.state
        self.test_result: dict[str, Any] | None = None

    def run(self) -> None:
        """Set up, train every epoch (validating as configured), test, finish."""
        train, parts = self.cfg.train, self.parts
        rule = parts.stop_rule
        for e in range(self.state.epoch, train.epochs):  # a resumed run: from its epoch on
            row = self.train_one_epoch(e)
            ended = rule.stopped_by is not None  # inside the epoch: a target, a time limit
            last = e + 1 == train.epochs or ended
            val = None
            if parts.loaders.val is not None and ((e + 1) % train.eval_every == 0 or last):
                val = self.validate(row)
            self.end_epoch(row)
            if rule.active and not ended:
                ended = rule.after_epoch(self.state, val, self.progress.train_time)
                last = last or ended
            # After the epoch's row and validation: a resume from it starts the next epoch.
            saved = parts.checkpointer.due_at_epoch_end(self.state.step)
            if saved:
                parts.checkpointer.save(self.state)
            if ended:
                break
            if self.ctx.stop_vote is not None and not last:  # a preemption: stop here
                stop_between_epochs(self.ctx.stop_vote, parts.checkpointer, self.state, saved)
        self.test()
        self.finish()

    # --- epochs ----------------------------------------------------------------------

    def _on_steps(self, records: list[dict[str, Any]]) -> None:
        """Step records as the loop resolves them: to the record, the sinks, the console."""
        self.progress.add_steps(records)
        # A pipeline's microbatches on this rank, each step's in its record (the trace
        # draws them on the rank's track).
        for r, chunks in zip(
            records, self.ctx.strategy.take_microbatches(len(records), self.ctx.origin)
        ):
            r["microbatches"] = chunks
        for r in records:
            self.writer.log("step", **r)
        self.writer.flush()
        self.ctx.sinks.log_steps(records)
        self.ctx.console.steps(records)

    def train_one_epoch(self, e: int) -> dict[str, Any]:
        """Train epoch ``e`` (0-based); returns its row for the summary."""
        train, parts = self.cfg.train, self.parts
        n_steps = len(parts.loaders.train)
        if train.max_steps_per_epoch:
            n_steps = min(n_steps, train.max_steps_per_epoch)
        self.ctx.console.epoch_start(e + 1, train.epochs, n_steps)
        options = EpochOptions(
            max_steps=train.max_steps_per_epoch,
            log_every=train.log_every,
            on_steps=self._on_steps,
            step_fn=parts.step_fn,
            reduce_losses=parts.reduce_losses,
            rank_has_loss=self.ctx.strategy.loss_share() != 0.0,
            origin=self.ctx.origin,
            checkpointer=parts.checkpointer,
            resumed=self.progress.take_resumed_epoch(),
            stop_vote=self.ctx.stop_vote,
            between_steps=parts.stop_rule.between_steps if parts.stop_rule.active else None,
        )
        res = train_epoch(self.state, parts.loaders.train, parts.timer, options)
        self.progress.add_epoch(res)
        rate = res.samples * self.throughput_scale / res.duration_s if res.duration_s > 0 else None
        return {
            "epoch": res.epoch,
            "train_loss": res.mean_loss,
            "val_loss": None,
            "val_accuracy": None,
            "duration_s": res.duration_s,
            "samples_per_s": rate,
            "loader_start_s": res.loader_start_s,
            "t_start": res.t_start,
            "t_end": res.t_end,
        }

    def validate(self, row: dict[str, Any]) -> dict[str, Any]:
        """Evaluate on the validation split (or take the stop rule's evaluation at this
        very step); its figures and timing go into ``row``. Returns the figures."""
        t0 = time.perf_counter()
        val = self.parts.stop_rule.result_at(self.state.step, "val")
        if val is None:
            val = self.parts.evaluate("val")
        row.update(val_t=t0 - self.ctx.origin, val_s=time.perf_counter() - t0)
        row.update(val_loss=val["loss"], val_accuracy=val.get("accuracy"))
        row.update({k: v for k, v in val.items() if k in ("perplexity", "mse", "mae", "r2")})
        return val

    def end_epoch(self, row: dict[str, Any]) -> None:
        """Record the epoch's row everywhere it goes."""
        self.progress.epochs.append(row)
        self.writer.log("epoch", **row)
        self.writer.flush()
        self.ctx.sinks.log_epoch(row)
        self.ctx.console.epoch_end(row)

    # --- the end ---------------------------------------------------------------------

    def test(self) -> None:
        """The final evaluation on the test split, where there is one."""
        self.test_result = None
        if not has_samples(self.parts.workload.test_set) or self.cfg.train.data_only:
            return
        t0 = time.perf_counter()
        test = self.parts.stop_rule.result_at(self.state.step, "test")
        self.test_result = test if test is not None else self.parts.evaluate("test")
        test = self.test_result
        self.writer.log("test", t=t0 - self.ctx.origin, seconds=time.perf_counter() - t0, **test)

    @property
    def throughput_scale(self) -> int:
        """Ranks step in lockstep, each on its share: global throughput is a rank's times
        the shares (the world, or a model-splitting strategy's replicas; 1 for one)."""
        return self.ctx.strategy.data_shard()[1]

    def finish(self) -> None:
        """Close the stages on the wall time; results, memory and ranks into the record;
        then save the weights. What follows the wall is timed apart (``after_wall_s``)."""
        rule = self.parts.stop_rule
        if rule.active:
            self.record.set_target(rule.section())
            message = rule.message()
            if message:
                self.place.note(message)
        wall, wall_end = self._close_stages()
        rss = peak_rss_bytes()
        results = self._results(wall, rss)
        self.record.set_results(results, own_wall_s=wall - self.progress.wall_before)
        self._memory_figures(rss)
        self._throughput_figures(results.samples_per_s)
        t0 = time.perf_counter()
        if self.ctx.cpu is not None:  # this rank's share of the CPU, before ranks are gathered
            self.record.set_cpu(
                self.ctx.cpu.section(workers=self.parts.loaders.args["num_workers"])
            )
        self.record.set_ranks(ranks.gather_ranks(self.ctx.info, self.record.to_dict()))
        self.record.time_after_wall("summary_figures", t0 - wall_end)
        self.record.time_after_wall("gather_ranks", time.perf_counter() - t0)
        self.record.time_after_wall("save_weights", 0.0, not_timed=AFTER_WALL_NOT_TIMED)
        if self.cfg.train.save_weights and not self.cfg.train.data_only:
            t0 = time.perf_counter()
            self.save_weights()
            self.record.time_after_wall("save_weights", time.perf_counter() - t0)

    def _close_stages(self) -> tuple[float, float]:
        """The stages this run has, ``other`` the wall time's rest: (wall, its end).

        wall_time_s: from the run's start (after interpreter start-up and imports) to the
        end of its last evaluation; the stages partition it. What comes after it is timed
        in "after_wall_s" or named in "after_wall_not_timed"; process time adds start-up."""
        device_sync(self.ctx.device)
        stages = self.progress.stages
        if not self.ctx.strategy.comm_stage:
            stages.pop("comm")  # no separate communication stage: it is inside backward
        if not self.ctx.strategy.runs_schedule:
            stages.pop("pipeline_wait")  # only a pipeline's ranks wait on each other
        if not self.parts.checkpointer.enabled:
            stages.pop("checkpoint")  # none asked for: the record is as it always was
        if not self.cfg.runtime.compile:
            stages.pop("compile")
        wall_end = time.perf_counter()
        wall = self.progress.wall_s(wall_end)
        stages["other"] = wall - sum(v for k, v in stages.items() if k != "other")
        return wall, wall_end

    def _results(self, wall: float, rss: int | None) -> Results:
        """Times, counts and the test's figures."""
        progress, test = self.progress, self.test_result
        train_time = progress.train_time
        return Results(
            wall_time_s=wall,
            train_time_s=train_time,
            stages_s=progress.stages,
            steps=progress.steps,
            samples=progress.samples,
            samples_per_s=progress.samples * self.throughput_scale / train_time
            if train_time > 0
            else None,
            epochs=progress.epochs,
            first_losses=progress.first_losses,
            skipped_steps=self.ctx.precision.skipped_steps,
            test_loss=test["loss"] if test else None,
            test_accuracy=test.get("accuracy") if test else None,
            # Every figure the workload's metrics computed (MSE, MAE, R² for regression).
            test_metrics={k: v for k, v in test.items() if k != "per_class_accuracy"}
            if test
            else None,
            per_class_accuracy=(
                dict(zip(self.parts.workload.class_names, test["per_class_accuracy"]))
                if test and test.get("per_class_accuracy")
                else None
            ),
            peak_rss_bytes=rss,
            comm=self._comm_figures(),
            steady_state=steady_state(
                progress.step_records,
                self.cfg.runtime.timing_warmup_steps,
                scale=self.throughput_scale,
            ),
        )

    def _comm_figures(self) -> dict[str, Any] | None:
        """The strategy's communication figures, and the probed step's collectives."""
        comm = dict(self.ctx.strategy.comm_stats())
        collectives = self.parts.comm_probe.record() if not self.cfg.train.data_only else None
        if collectives is not None:
            comm["collectives"] = collectives
        return comm or None

    def _memory_figures(self, rss: int | None) -> None:
        """The peak memory and the ``memory`` section (see :func:`memory_figures`)."""
        figures = memory_figures(
            self.parts.composed, self.ctx.device, self.parts.step_fn, rss,
            data_only=self.cfg.train.data_only,
            sharded=bool(registry.capabilities(self.ctx.strategy.name).shards),
        )  # fmt: skip
        self.record.set_memory(figures)

    def _throughput_figures(self, rate: float | None) -> None:
        """tokens/s and MFU at ``rate`` samples/s (see :func:`throughput_figures`)."""
        cfg, ctx = self.cfg, self.ctx
        figures = throughput_figures(
            self.parts.workload, ctx.device, cfg.runtime.precision, ctx.info.world_size, rate
        )
        self.record.set_throughput(figures)

    def _weights_fault(self) -> Any:
        """Tests of a run killed while writing its weights (train.fault_injection) die there."""
        fault, step = self.parts.fault, self.state.step
        return (lambda: fault.die_at("weights", step)) if fault is not None else None

    def save_weights(self) -> None:
        """model.safetensors (+ the workload's artifacts as JSON), written by rank 0.

        Every rank calls this: gathering FSDP's shards into full tensors is a collective.
        """
        strategy, state = self.ctx.strategy, self.state
        full = strategy.full_state_dict(state.model)
        if not strategy.info.is_main:
            return
        skip = ranks.tied_duplicates(strategy.unwrap(state.model))
        path = self.writer.run_dir / "model.safetensors"
        weights = {
            "file": path.name,
            "bytes": ranks.save_weights(path, full, skip, before_move=self._weights_fault()),
            # The tensors alone (the file adds a header): what the memory meter's parameter
            # and buffer bytes are to equal.
            "tensor_bytes": sum(
                v.numel() * v.element_size() for k, v in full.items() if k not in skip
            ),
        }
        self.record.set_weights(weights)
        artifacts = {f"{name}.json": obj for name, obj in self.parts.workload.artifacts.items()}
        self.writer.record(*artifacts)  # listed first: what --overwrite may remove later
        for file, obj in artifacts.items():
            atomic_write_json(self.writer.run_dir / file, obj)


def train(ctx: RunContext, writer: RunWriter, record: RunSummary, watch: Any = None) -> None:
    """Set the run up (:func:`~trainscope.train.setup.build_parts`) and train it."""
    progress = RunProgress(started=ctx.t_start, attempt=ctx.attempt)
    place = RunPlace(ctx, writer, record, progress, watch)
    Trainer(place, build_parts(place)).run()


__all__ = ["Trainer", "train"]
