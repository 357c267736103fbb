"""The run as one object: set up, train an epoch, validate, test, finish.

:func:`trainscope.train.run.run` prepares what a run needs (device, process group,
precision, strategy, the claimed run directory) into a :class:`RunContext`, and a
:class:`Trainer` does the rest in short phases, each contributing its figures to the
run's :class:`~trainscope.train.record.RunSummary`. Everything a resumed run needs lives
in the :class:`~trainscope.train.loop.TrainState` and the run's
:class:`~trainscope.train.progress.RunProgress`; the
:class:`~trainscope.train.checkpointer.Checkpointer` decides when both are saved. The
trainer holds what is rebuilt on every start (loaders, timer).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from trainscope import registry
from trainscope.config import RunConfig
from trainscope.data.loaders import make_loader
from trainscope.profiling.comm_probe import CommProbe
from trainscope.profiling.memory import MemoryProbe
from trainscope.profiling.system import peak_rss_bytes
from trainscope.profiling.timer import ProgressTimer, device_sync, make_stage_timer
from trainscope.records import RunWriter, atomic_write_json
from trainscope.records.steady_state import steady_state
from trainscope.runtime.captured import import_log
from trainscope.runtime.device import seed_everything
from trainscope.runtime.dist import DistInfo
from trainscope.strategies.base import Strategy, grad_layout
from trainscope.tracking import Sinks
from trainscope.train import fault_injection, ranks
from trainscope.train.checkpointer import Checkpointer
from trainscope.train.compose import compile_warmup, compiled_graphs, compose
from trainscope.train.console import RunConsole
from trainscope.train.figures import memory_figures, throughput_figures
from trainscope.train.loop import (
    EpochOptions,
    TrainState,
    data_step,
    evaluate,
    train_epoch,
    train_step,
)
from trainscope.train.preemption import stop_between_epochs
from trainscope.train.progress import FIRST_LOSSES, RunProgress
from trainscope.train.record import Results, RunSummary, SetupFacts
from trainscope.train.resume import data_fingerprint, resume_into
from trainscope.train.schedule import build_optimizer, make_scheduler
from trainscope.train.target import StepEvaluations, check_splits
from trainscope.workloads import build_workload
from trainscope.workloads.base import example_inputs

IMPORT_LOG = "imports.log"
"""What third-party libraries printed while the workload imported them
(trainscope.runtime.captured)."""
NO_VALIDATION = "no validation data: the workload has no validation split (or it is empty)"
AFTER_WALL_NOT_TIMED = (
    "stopping the system sampler, writing summary.json, tracking uploads and the interpreter's exit"
)


@dataclass
class RunContext:
    """What a run is made of before it trains: checked, built, and shared by its phases."""

    cfg: RunConfig
    device: torch.device
    info: DistInfo
    t_start: float
    """The run's clock origin (a perf_counter reading): every ``t`` counts from it."""
    precision: Any
    strategy: Strategy
    sinks: Sinks
    console: RunConsole
    origin: float | None = None
    """Where the run's time axis starts (a perf_counter reading): ``t_start`` for a first
    attempt; for a resumed one the first attempt's start, so that every attempt's ``t``
    lies on one axis (the gap between them shows)."""
    attempt: int = 1
    """1, or the how-manieth attempt at this run a resume is."""
    previous: dict[str, Any] | None = None
    """A resumed run: this rank's summary as the previous attempt left it."""
    restarted: bool = False
    """Restarted by torchrun after a rank failed (resume from a checkpoint if any)."""
    cpu: Any = None
    """The run's :class:`~trainscope.runtime.threads.CpuMeter` (threads, cores, load)."""
    stop_vote: Any = None
    """A run a scheduler may preempt: its :class:`~trainscope.train.preemption.StopVote`,
    asked at every log interval (None: a preemption signal ends the run at once)."""

    def __post_init__(self) -> None:
        if self.origin is None:
            self.origin = self.t_start


def cache_dir() -> Path:
    """Where downloaded data lives: $TRAINSCOPE_CACHE, else ~/.cache/trainscope."""
    return Path(os.environ.get("TRAINSCOPE_CACHE", Path.home() / ".cache" / "trainscope"))


def _num_samples(dataset: Any) -> int | None:
    """len(dataset), or None for a split that has no length (or no split)."""
    try:
        return len(dataset) if dataset is not None else None
    except TypeError:
        return None


def _has_samples(dataset: Any) -> bool:
    """A split to evaluate on: present and not empty (a split without len() counts)."""
    return dataset is not None and _num_samples(dataset) != 0


class Trainer:
    """One run's phases over its state; :meth:`run` calls them in order."""

    def __init__(
        self, ctx: RunContext, writer: RunWriter, record: RunSummary, watch: Any = None
    ) -> None:
        self.ctx = ctx
        self.cfg = ctx.cfg
        self.writer = writer
        self.record = record  # summary.json's owner: the phases contribute their sections
        self.watch = watch  # where this rank is, for a multi-process stall watchdog
        self.progress = RunProgress(started=ctx.t_start, attempt=ctx.attempt)
        self.fingerprint: dict[str, Any] | None = None

    def run(self) -> None:
        """Set up, train every epoch (validating as configured), test, finish."""
        self.setup()
        train = self.cfg.train
        rule = self.stop_rule
        for e in range(self.state.epoch, train.epochs):  # a resumed run: from its epoch on
            row = self.train_one_epoch(e)
            ended = rule.stopped_by is not None  # inside the epoch: a target, a time limit
            last = e + 1 == train.epochs or ended
            val = None
            if self.val_loader is not None and ((e + 1) % train.eval_every == 0 or last):
                val = self.validate(row)
            self.end_epoch(row)
            if rule.active and not ended:
                ended = rule.after_epoch(self.state, val, self.progress.train_time)
                last = last or ended
            # After the epoch's row and validation: a resume from it starts the next epoch.
            saved = self.checkpointer.due_at_epoch_end(self.state.step)
            if saved:
                self.checkpointer.save(self.state)
            if ended:
                break
            if self.ctx.stop_vote is not None and not last:  # a preemption: stop here
                stop_between_epochs(self.ctx.stop_vote, self.checkpointer, self.state, saved)
        self.test()
        self.finish()

    # --- setup -----------------------------------------------------------------------

    def setup(self) -> None:
        """Data, model, optimizer, loaders and timer; the workload's facts into the record."""
        cfg, ctx = self.cfg, self.ctx
        seed_everything(cfg.train.seed)
        with import_log(self.writer.run_dir / IMPORT_LOG) as chatter:
            workload = self.workload = build_workload(cfg.workload, cache_dir())
        if chatter.lines:  # in the record and the report; never on the console
            self.record.note(
                f"{chatter.lines} line(s) third-party libraries printed while "
                f"being imported are in {IMPORT_LOG} (the first: {chatter.first})"
            )
        for note in workload.notes:  # e.g. a pretrained model's new head
            self._note(note)
        self._build_state()
        self._make_loaders()
        self._schedule()
        if cfg.runtime.compile and not cfg.train.data_only:
            self._compile()
        self._make_step()
        facts = self._setup_facts()
        self.record.set_setup(facts)
        self.checkpointer = Checkpointer(
            cfg.train, self.writer, self.progress, self.run_facts, ctx.origin, self.fault
        )
        self.stop_rule = StepEvaluations(
            cfg.train, self._evaluate_split, writer=self.writer, progress=self.progress,
            info=ctx.info, origin=ctx.origin, own_process=self._own_process_s,
            has_val=self.val_loader is not None,
        )  # fmt: skip
        empty = self.workload.new_metrics(ctx.device).compute()  # the figures it computes
        check_splits(self.stop_rule.target, self.val_loader, self.workload.test_set, empty)
        if self.checkpointer.enabled or cfg.resume or ctx.stop_vote is not None:
            self.fingerprint = data_fingerprint(workload.train_set)
        if cfg.resume:
            resume_into(self)  # last: the generators go on exactly from the checkpoint's states
            if self.watch_timer is not None:  # the stall watchdog's step count
                self.watch_timer.step = self.state.step
        if ctx.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(ctx.device)
        # This attempt's setup (a resume adds earlier ones); compilation is its own stage.
        own = time.perf_counter() - ctx.t_start - self.progress.stages.get("compile", 0.0)
        self.progress.add_stage("setup", own)
        self.writer.log(
            "setup", seconds=own, model=facts.model, num_parameters=facts.num_parameters
        )
        self.reduce_losses = ranks.make_loss_reducer(ctx.info, ctx.strategy.loss_share())

    def _build_state(self) -> None:
        """The model composed (precision, checkpointing, compile, strategy) and the
        TrainState around it."""
        cfg, ctx, workload = self.cfg, self.ctx, self.workload
        self.num_parameters = sum(p.numel() for p in workload.model.parameters())
        if ctx.strategy.example_size():  # e.g. a pipeline that times its blocks to split
            n = ctx.strategy.example_size()
            ctx.strategy.example = example_inputs(workload, n, ctx.device)
        model, self.composed = compose(workload.model, ctx.strategy, ctx.device, cfg.runtime)
        self.lr = cfg.train.lr * (ctx.info.world_size if cfg.dist.scale_lr else 1)
        self.state = TrainState(
            model=model,
            optimizer=build_optimizer(replace(cfg.train, lr=self.lr), model),
            grad_clip=cfg.train.grad_clip,
            precision=ctx.precision,
            loss_fn=workload.loss_fn,
            device=ctx.device,
            strategy=ctx.strategy,
            progress=self.watch,
        )

    def _make_step(self) -> None:
        """The step function (with its memory probe) and the stage timer."""
        cfg, ctx = self.cfg, self.ctx
        # The memory meter counts on the second step of this attempt (the first when the
        # run takes one step only): by then the optimizer's states exist, as in every later
        # step. Data-only runs take no model step: nothing to count.
        probe_at = 2 if self.total_steps > 1 else 1  # the run's steps, as the schedule counts
        # Collectives that pass through the dispatcher (DTensor's: tp, fsdp) are counted
        # on one later step (the memory probe's hooks would be in its timings).
        self.comm_probe = CommProbe(train_step, min(3, self.total_steps))
        self.step_fn = data_step if cfg.train.data_only else MemoryProbe(self.comm_probe, probe_at)
        # A strategy that times its own parts of the step does so on the host clock (with
        # a device synchronize on CUDA): the stages around them must use the same clock.
        mode = "exact" if ctx.strategy.runs_schedule else cfg.runtime.timing
        timer = make_stage_timer(ctx.device, mode)
        self.watch_timer = ProgressTimer(timer, self.watch) if self.watch is not None else None
        self.timer = self.watch_timer if self.watch_timer is not None else timer
        # Tests of resume and restarts make a process die at a chosen point (train.fault_injection).
        self.fault = fault_injection.from_env(ctx.info.rank, ctx.attempt)
        if self.fault is not None:
            self.timer = fault_injection.FaultTimer(
                self.timer, self.fault, lambda: self.state.step + 1
            )

    def _setup_facts(self) -> SetupFacts:
        workload, strategy = self.workload, self.ctx.strategy
        return SetupFacts(
            model=type(workload.model).__name__,
            num_parameters=self.num_parameters,
            workload_description=workload.description,
            workload_info=workload.info,
            task=workload.task,
            timing_mode=self.timer.kind,
            train_samples=len(workload.train_set),
            local_batch_size=self.local_batch,
            lr=self.lr,
            parallel=strategy.describe(),
            gradients=grad_layout(workload.model),
            optimizer=getattr(self.state.optimizer, "describe", lambda: None)(),
        )

    def _note(self, text: str) -> None:
        self.record.note(text)
        self.ctx.console.note(text)

    def _make_loaders(self) -> None:
        """Training loader (workers chosen if asked), validation loader if there is data."""
        cfg, ctx, workload = self.cfg, self.ctx, self.workload
        workers = self._num_workers()
        self.loader_args = {
            "device": ctx.device,
            "num_workers": workers,
            "collate_fn": workload.collate_fn,
        }
        self.local_batch = ctx.strategy.local_batch_size(cfg.data.batch_size)
        n_train = _num_samples(workload.train_set)
        if n_train and cfg.data.batch_size > n_train and not cfg.data.drop_last:
            # As in PyTorch: the whole training set is one (short) batch per epoch; say so.
            self._note(
                f"batch size {cfg.data.batch_size} > {n_train} training samples: one batch "
                "per epoch"
            )
        index, shards = ctx.strategy.data_shard()  # a pipeline's ranks load the same batches
        shard = {"rank": index, "world_size": shards}
        train_data, changed = ctx.strategy.training_data(cfg.data, n_train)
        if changed:
            self._note(changed)
        self.train_loader = make_loader(
            workload.train_set,
            train_data,
            train=True,
            batch_size=self.local_batch,
            **shard,
            **self.loader_args,
        )
        # Data-only runs measure the input pipeline alone: no validation, no test. Every
        # rank evaluates the whole split (the same figures everywhere; FSDP needs all ranks).
        self.test_loader = None
        self.val_loader = (
            make_loader(workload.val_set, cfg.data, train=False, **self.loader_args)
            if _has_samples(workload.val_set) and not cfg.train.data_only
            else None
        )
        if self.val_loader is None and not cfg.train.data_only:
            # Never a loss of 0 / accuracy of 0 from an empty split: say there is none.
            self._note(NO_VALIDATION)

    def _num_workers(self) -> int:
        """The DataLoader workers: as configured, or chosen by measuring (``auto``)."""
        cfg, ctx = self.cfg, self.ctx
        workers = cfg.data.num_workers
        auto = None
        if cfg.data.loader == "torch" and workers == "auto":
            from trainscope.data.autotune import choose_num_workers

            auto = choose_num_workers(
                self.workload.train_set,
                cfg.data,
                ctx.device,
                workload=cfg.workload.name,
                cache_dir=cache_dir(),
                log=ctx.console.note,
            ).to_dict()
            workers = auto["chosen"]
            self.writer.log("num_workers_auto", **auto)
        elif workers == "auto":
            workers = 0  # the fast path has no workers to choose
        self.record.set_num_workers(workers, auto)
        return workers

    def _schedule(self) -> None:
        """The lr schedule over every optimizer step the run will take (all epochs)."""
        train = self.cfg.train
        per_epoch = len(self.train_loader)
        if train.max_steps_per_epoch:
            per_epoch = min(per_epoch, train.max_steps_per_epoch)
        self.total_steps = per_epoch * train.epochs
        self.state.scheduler = make_scheduler(self.state.optimizer, train, self.total_steps)

    def _compile(self) -> None:
        """Compile now (one forward and backward that leave no trace): its own stage."""
        seconds = compile_warmup(self)
        self.progress.add_stage("compile", seconds)
        self.compile_graphs = compiled_graphs()
        self.composed["compile"].update(seconds=seconds, graphs=self.compile_graphs)
        if self.compile_graphs == 0:
            self._note("--compile: torch.compile captured no graph; the model ran eagerly")
        self.writer.log("compile", seconds=seconds, graphs=self.compile_graphs)

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
        train = self.cfg.train
        n_steps = len(self.train_loader)
        if train.max_steps_per_epoch:
            n_steps = min(n_steps, train.max_steps_per_epoch)
        self.ctx.console.epoch_start(e + 1, train.epochs, n_steps)
        options = EpochOptions(
            max_steps=train.max_steps_per_epoch,
            log_every=train.log_every,
            on_steps=self._on_steps,
            step_fn=self.step_fn,
            reduce_losses=self.reduce_losses,
            rank_has_loss=self.ctx.strategy.loss_share() != 0.0,
            origin=self.ctx.origin,
            checkpointer=self.checkpointer,
            resumed=self.progress.take_resumed_epoch(),
            stop_vote=self.ctx.stop_vote,
            between_steps=self.stop_rule.between_steps if self.stop_rule.active else None,
        )
        res = train_epoch(self.state, self.train_loader, self.timer, options)
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
        val = self.stop_rule.result_at(self.state.step, "val")
        if val is None:
            val = self._evaluate_split("val")
        row.update(val_t=t0 - self.ctx.origin, val_s=time.perf_counter() - t0)
        row.update(val_loss=val["loss"], val_accuracy=val.get("accuracy"))
        row.update({k: v for k, v in val.items() if k in ("perplexity", "mse", "mae", "r2")})
        return val

    def _evaluate_split(self, split: str) -> dict[str, Any]:
        """One evaluation of the ``val`` or ``test`` split, timed as the evaluation stage."""
        t0 = time.perf_counter()
        if split == "val":
            loader = self.val_loader
        else:
            if self.test_loader is None:
                self.test_loader = make_loader(
                    self.workload.test_set, self.cfg.data, train=False, **self.loader_args
                )
            loader = self.test_loader
        figures = evaluate(self.state, self.workload, loader)
        device_sync(self.ctx.device)
        self.progress.add_stage("evaluation", time.perf_counter() - t0)
        return figures

    def _own_process_s(self) -> float | None:
        """Seconds since this process started, when the process is this run's alone (it
        ran no run before and this is the first attempt); else None."""
        process = self.record.facts.process or {}
        if self.ctx.attempt > 1 or process.get("runs_before") or "startup_s" not in process:
            return None
        return process["startup_s"] + time.perf_counter() - self.ctx.t_start

    def end_epoch(self, row: dict[str, Any]) -> None:
        """Record the epoch's row everywhere it goes."""
        self.progress.epochs.append(row)
        self.writer.log("epoch", **row)
        self.writer.flush()
        self.ctx.sinks.log_epoch(row)
        self.ctx.console.epoch_end(row)

    # --- checkpoints -----------------------------------------------------------------

    def run_facts(self) -> dict[str, Any]:
        """What decides this run's numbers: a checkpoint records them, a resume compares."""
        ctx = self.ctx
        config = {**self.cfg.to_dict(), "out": None, "overwrite": False, "resume": False}
        return {
            "config": config,
            "world_size": ctx.info.world_size,
            "device_type": ctx.device.type,
            "data": self.fingerprint,
        }

    # --- the end ---------------------------------------------------------------------

    def test(self) -> None:
        """The final evaluation on the test split, where there is one."""
        self.test_result = None
        if not _has_samples(self.workload.test_set) or self.cfg.train.data_only:
            return
        t0 = time.perf_counter()
        test = self.stop_rule.result_at(self.state.step, "test")
        self.test_result = test if test is not None else self._evaluate_split("test")
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
        if self.stop_rule.active:
            self.record.set_target(self.stop_rule.section())
            message = self.stop_rule.message()
            if message:
                self._note(message)
        wall, wall_end = self._close_stages()
        rss = peak_rss_bytes()
        results = self._results(wall, rss)
        self.record.set_results(results, own_wall_s=wall - self.progress.wall_before)
        self._memory_figures(rss)
        self._throughput_figures(results.samples_per_s)
        t0 = time.perf_counter()
        if self.ctx.cpu is not None:  # this rank's share of the CPU, before ranks are gathered
            self.record.set_cpu(self.ctx.cpu.section(workers=self.loader_args["num_workers"]))
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
        if not self.checkpointer.enabled:
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
                dict(zip(self.workload.class_names, test["per_class_accuracy"]))
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
        collectives = self.comm_probe.record() if not self.cfg.train.data_only else None
        if collectives is not None:
            comm["collectives"] = collectives
        return comm or None

    def _memory_figures(self, rss: int | None) -> None:
        """The peak memory and the ``memory`` section (see :func:`memory_figures`)."""
        figures = memory_figures(
            self.composed, self.ctx.device, self.step_fn, rss,
            data_only=self.cfg.train.data_only,
            sharded=bool(registry.capabilities(self.ctx.strategy.name).shards),
        )  # fmt: skip
        self.record.set_memory(figures)

    def _throughput_figures(self, rate: float | None) -> None:
        """tokens/s and MFU at ``rate`` samples/s (see :func:`throughput_figures`)."""
        cfg, ctx = self.cfg, self.ctx
        figures = throughput_figures(
            self.workload, ctx.device, cfg.runtime.precision, ctx.info.world_size, rate
        )
        self.record.set_throughput(figures)

    def _weights_fault(self) -> Any:
        """Tests of a run killed while writing its weights (train.fault_injection) die there."""
        fault, step = self.fault, self.state.step
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
        artifacts = {f"{name}.json": obj for name, obj in self.workload.artifacts.items()}
        self.writer.record(*artifacts)  # listed first: what --overwrite may remove later
        for file, obj in artifacts.items():
            atomic_write_json(self.writer.run_dir / file, obj)


__all__ = [
    "FIRST_LOSSES",
    "NO_VALIDATION",
    "RunContext",
    "Trainer",
    "build_optimizer",
    "cache_dir",
    "compose",
]
