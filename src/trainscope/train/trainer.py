"""The run as one object: set up, train an epoch, validate, test, finish.

:func:`trainscope.train.run.run` prepares what a run needs (device, process group,
precision, strategy, the claimed run directory) into a :class:`RunContext`, and a
:class:`Trainer` does the rest in short phases, filling the summary as results come in.
Everything a resumed run needs lives in the :class:`~trainscope.train.loop.TrainState`;
the trainer holds what is rebuilt on every start (loaders, timer, the record writer).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from trainscope.config import RunConfig, TrainConfig
from trainscope.data.loaders import make_loader
from trainscope.profiling.memory import MemoryProbe
from trainscope.profiling.system import peak_rss_bytes
from trainscope.profiling.timer import ProgressTimer, device_sync, make_stage_timer
from trainscope.records import STAGES, RunWriter, atomic_write_json
from trainscope.records.steady import steady_state
from trainscope.runtime import seed_everything
from trainscope.runtime.dist import DistInfo
from trainscope.strategies.base import Strategy, grad_layout
from trainscope.tracking import Sinks
from trainscope.train import faults, ranks
from trainscope.train.compose import compile_warmup, compiled_graphs, compose
from trainscope.train.console import RunConsole
from trainscope.train.loop import (
    EpochProgress,
    TrainState,
    data_step,
    evaluate,
    train_epoch,
    train_step,
)
from trainscope.train.resume import data_fingerprint
from trainscope.workloads import build_workload

FIRST_LOSSES = 5
NO_VALIDATION = "no validation data: the workload has no validation split (or it is empty)"


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

    def __post_init__(self) -> None:
        if self.origin is None:
            self.origin = self.t_start


def cache_dir() -> Path:
    """Where downloaded data lives: $TRAINSCOPE_CACHE, else ~/.cache/trainscope."""
    return Path(os.environ.get("TRAINSCOPE_CACHE", Path.home() / ".cache" / "trainscope"))


def build_optimizer(cfg: TrainConfig, model: torch.nn.Module) -> torch.optim.Optimizer:
    """The optimizer a TrainConfig names, over ``model``'s parameters (weight decay on
    matrices only: see trainscope.train.schedule.param_groups)."""
    from trainscope.train.schedule import param_groups

    groups = param_groups(model, cfg.weight_decay)
    if cfg.optimizer == "sgd":
        return torch.optim.SGD(groups, lr=cfg.lr, momentum=cfg.momentum)
    betas = tuple(cfg.betas) if cfg.betas else (0.9, 0.999)
    if cfg.optimizer == "adam":
        return torch.optim.Adam(groups, lr=cfg.lr, betas=betas)
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=betas)


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
        self, ctx: RunContext, writer: RunWriter, summary: dict[str, Any], progress: Any = None
    ) -> None:
        self.ctx = ctx
        self.cfg = ctx.cfg
        self.writer = writer
        self.summary = summary
        self.progress = progress  # where this rank is, for a multi-process stall watchdog
        self.stages = dict.fromkeys(STAGES, 0.0)
        self.epochs: list[dict[str, Any]] = []
        self.first_losses: list[float] = []
        self.step_records: list[dict[str, Any]] = []  # for the steady-state figures
        self.samples = self.steps = 0
        self.train_time = 0.0
        self.wall_before = 0.0  # a resumed run: the wall time its earlier attempts kept
        self.resumed_epoch: EpochProgress | None = None
        self.fingerprint: dict[str, Any] | None = None

    def run(self) -> None:
        """Set up, train every epoch (validating as configured), test, finish."""
        self.setup()
        train = self.cfg.train
        for e in range(self.state.epoch, train.epochs):  # a resumed run: from its epoch on
            row = self.train_one_epoch(e)
            last = e + 1 == train.epochs
            if self.val_loader is not None and ((e + 1) % train.eval_every == 0 or last):
                self.validate(row)
            self.end_epoch(row)
            # A step checkpoint due at the epoch's last step is taken here, after the epoch's
            # row and validation: a resume from it starts the next epoch.
            due = train.checkpoint_every and self.state.step % train.checkpoint_every == 0
            if train.checkpoint_every_epoch or due:
                self.checkpoint()
        self.test()
        self.finish()

    # --- setup -----------------------------------------------------------------------

    def setup(self) -> None:
        """Data, model, optimizer, loaders and timer; the run's facts into the summary."""
        cfg, ctx, summary = self.cfg, self.ctx, self.summary
        seed_everything(cfg.train.seed)
        workload = self.workload = build_workload(cfg.workload, cache_dir())
        for note in workload.notes:  # e.g. a pretrained model's new head
            self._note(note)
        n_params = sum(p.numel() for p in workload.model.parameters())
        model, self.composed = compose(workload.model, ctx.strategy, ctx.device, cfg.runtime)
        lr = cfg.train.lr * (ctx.info.world_size if cfg.dist.scale_lr else 1)
        self.state = TrainState(
            model=model,
            optimizer=build_optimizer(replace(cfg.train, lr=lr), model),
            grad_clip=cfg.train.grad_clip,
            precision=ctx.precision,
            loss_fn=workload.loss_fn,
            device=ctx.device,
            strategy=ctx.strategy,
            progress=self.progress,
        )
        self._make_loaders()
        self._schedule()
        if cfg.runtime.compile and not cfg.train.data_only:
            self._compile()
        # The memory meter counts on the second step of this attempt (the first when the
        # run takes one step only): by then the optimizer's states exist, as in every later
        # step. Data-only runs take no model step: nothing to count.
        probe_at = 2 if self.total_steps > 1 else 1  # the run's steps, as the schedule counts
        self.step_fn = data_step if cfg.train.data_only else MemoryProbe(train_step, probe_at)
        timer = make_stage_timer(ctx.device, cfg.runtime.timing)
        self.timer = ProgressTimer(timer, self.progress) if self.progress is not None else timer
        progress_timer = self.timer
        # Tests of resume and restarts make a process die at a chosen point (train.faults).
        self.fault = faults.from_env(ctx.info.rank, ctx.attempt)
        if self.fault is not None:
            self.timer = faults.FaultTimer(self.timer, self.fault, lambda: self.state.step + 1)
        summary.update(
            model=type(workload.model).__name__,
            num_parameters=n_params,
            workload_description=workload.description,
            workload_info=workload.info,
            task=workload.task,  # which figures the evaluations hold (reports read it)
            timing_mode=self.timer.kind,
            train_samples=len(workload.train_set),
            local_batch_size=self.local_batch,
            lr=lr,
            parallel=ctx.strategy.describe(),
            # Per-tensor gradient bytes: what the strategies study's predictions start from.
            gradients=grad_layout(workload.model),
        )
        if cfg.train.checkpoint_every or cfg.train.checkpoint_every_epoch or cfg.resume:
            self.fingerprint = data_fingerprint(workload.train_set)
        if cfg.resume:
            self._resume()  # last: the generators go on exactly from the checkpoint's states
            if isinstance(progress_timer, ProgressTimer):  # the stall watchdog's step count
                progress_timer.step = self.state.step
        if ctx.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(ctx.device)
        # This attempt's setup (a resume adds earlier ones); compilation is its own stage.
        own = time.perf_counter() - ctx.t_start - self.stages.get("compile", 0.0)
        self.stages["setup"] += own
        self.writer.log(
            "setup",
            seconds=own,
            **{k: summary[k] for k in ("model", "num_parameters")},
        )
        self.reduce_losses = ranks.make_loss_reducer(ctx.info)

    def _resume(self) -> None:
        """Go on from the newest checkpoint every rank has (see train.resume)."""
        from trainscope.train.resume import resume_into

        resume_into(self)

    def _note(self, text: str) -> None:
        self.summary["notes"] = [*self.summary.get("notes", []), text]
        self.ctx.console.note(text)

    def _make_loaders(self) -> None:
        """Training loader (workers chosen if asked), validation loader if there is data."""
        cfg, ctx, workload = self.cfg, self.ctx, self.workload
        workers = cfg.data.num_workers
        if cfg.data.loader == "torch" and workers == "auto":
            from trainscope.data.autotune import choose_num_workers

            auto = choose_num_workers(
                workload.train_set,
                cfg.data,
                ctx.device,
                workload=cfg.workload.name,
                cache_dir=cache_dir(),
                log=ctx.console.note,
            )
            workers = auto.chosen
            self.summary["num_workers_auto"] = auto.to_dict()
            self.writer.log("num_workers_auto", **auto.to_dict())
        elif workers == "auto":
            workers = 0  # the fast path has no workers to choose
        self.summary["num_workers"] = workers
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
        shard = {"rank": ctx.info.rank, "world_size": ctx.info.world_size}
        self.train_loader = make_loader(
            workload.train_set,
            cfg.data,
            train=True,
            batch_size=self.local_batch,
            **shard,
            **self.loader_args,
        )
        # Data-only runs measure the input pipeline alone: no validation, no test. Every
        # rank evaluates the whole split (the same figures everywhere; FSDP needs all ranks).
        self.val_loader = (
            make_loader(workload.val_set, cfg.data, train=False, **self.loader_args)
            if _has_samples(workload.val_set) and not cfg.train.data_only
            else None
        )
        if self.val_loader is None and not cfg.train.data_only:
            # Never a loss of 0 / accuracy of 0 from an empty split: say there is none.
            self._note(NO_VALIDATION)

    def _schedule(self) -> None:
        """The lr schedule over every optimizer step the run will take (all epochs)."""
        from trainscope.train.schedule import make_scheduler

        train = self.cfg.train
        per_epoch = len(self.train_loader)
        if train.max_steps_per_epoch:
            per_epoch = min(per_epoch, train.max_steps_per_epoch)
        self.total_steps = per_epoch * train.epochs
        self.state.scheduler = make_scheduler(self.state.optimizer, train, self.total_steps)

    def _compile(self) -> None:
        """Compile now (one forward and backward that leave no trace): its own stage."""
        seconds = compile_warmup(self)
        self.stages["compile"] = seconds
        self.compile_graphs = compiled_graphs()
        self.composed["compile"].update(seconds=seconds, graphs=self.compile_graphs)
        if self.compile_graphs == 0:
            self._note("--compile: torch.compile captured no graph; the model ran eagerly")
        self.writer.log("compile", seconds=seconds, graphs=self.compile_graphs)

    # --- epochs ----------------------------------------------------------------------

    def _on_steps(self, records: list[dict[str, Any]]) -> None:
        """Step records as the loop resolves them: to the record, the sinks, the console."""
        self.step_records.extend(
            {"batch_size": r["batch_size"], "stages": r["stages"]} for r in records
        )
        for r in records:
            self.writer.log("step", **r)
            if len(self.first_losses) < FIRST_LOSSES and r["loss"] is not None:
                self.first_losses.append(r["loss"])
        self.writer.flush()
        self.ctx.sinks.log_steps(records)
        self.ctx.console.steps(records)

    def train_one_epoch(self, e: int) -> dict[str, Any]:
        """Train epoch ``e`` (0-based); returns its row for the summary."""
        cfg = self.cfg
        n_steps = len(self.train_loader)
        if cfg.train.max_steps_per_epoch:
            n_steps = min(n_steps, cfg.train.max_steps_per_epoch)
        self.ctx.console.epoch_start(e + 1, cfg.train.epochs, n_steps)
        res = train_epoch(
            self.state,
            self.train_loader,
            self.timer,
            max_steps=cfg.train.max_steps_per_epoch,
            log_every=cfg.train.log_every,
            on_steps=self._on_steps,
            step_fn=self.step_fn,
            reduce_losses=self.reduce_losses,
            origin=self.ctx.origin,
            checkpoint_every=cfg.train.checkpoint_every,
            on_checkpoint=lambda _, progress: self.checkpoint(progress),
            resumed=self.resumed_epoch,
        )
        self.resumed_epoch = None
        for k, v in res.stage_s.items():
            self.stages[k] += v
        self.samples += res.samples
        self.steps += res.steps
        self.train_time += res.duration_s
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

    def validate(self, row: dict[str, Any]) -> None:
        """Evaluate on the validation split; its figures and timing go into ``row``."""
        t0 = time.perf_counter()
        val = evaluate(self.state, self.workload, self.val_loader)
        device_sync(self.ctx.device)
        self.stages["evaluation"] += time.perf_counter() - t0
        row.update(val_t=t0 - self.ctx.origin, val_s=time.perf_counter() - t0)
        row.update(val_loss=val["loss"], val_accuracy=val.get("accuracy"))
        row.update({k: v for k, v in val.items() if k in ("perplexity", "mse", "mae", "r2")})

    def end_epoch(self, row: dict[str, Any]) -> None:
        """Record the epoch's row everywhere it goes."""
        self.epochs.append(row)
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

    def checkpoint(self, progress: EpochProgress | None = None) -> None:
        """Write the TrainState as ``checkpoints/step-N`` (its files recorded as ours
        first), keep the newest ``keep_checkpoints``; the time is the checkpoint stage.

        With the state goes what the run has recorded so far (stage times, epochs, the
        epoch under way's totals ``progress``), so a resumed run's summary covers it all."""
        from trainscope.train.checkpoint import (
            CHECKPOINT_FILES,
            TMP_PREFIX,
            prune,
            write_checkpoint,
        )

        t0 = time.perf_counter()
        step = self.state.step
        folders = [f"checkpoints/step-{step}", f"checkpoints/{TMP_PREFIX}step-{step}"]
        self.writer.record(
            *(f"{d}/{name}" for d in folders for name in CHECKPOINT_FILES),
            dirs=["checkpoints", *folders],
        )
        root = self.writer.run_dir / "checkpoints"
        sd = self.state.state_dict()
        sd["run"] = {
            **self.run_facts(),
            "attempt": self.ctx.attempt,
            "stages": {k: v for k, v in self.stages.items() if k != "other"},
            "samples": self.samples,
            "steps": self.steps,
            "train_time": self.train_time,
            "epochs": self.epochs,
            "first_losses": self.first_losses,
            "epoch_progress": progress.to_dict() if progress is not None else None,
            "wall_s": self.wall_before + t0 - self.ctx.t_start,  # up to this checkpoint
        }
        fault = self.fault
        ckpt = write_checkpoint(
            root, sd, after_file=(lambda _: fault.die_at("checkpoint", step)) if fault else None
        )
        prune(root, self.cfg.train.keep_checkpoints)
        seconds = time.perf_counter() - t0
        self.stages["checkpoint"] += seconds
        self.writer.log(
            "checkpoint", step=step, path=str(ckpt.path.relative_to(self.writer.run_dir)),
            t=t0 - self.ctx.origin, seconds=seconds,
        )  # fmt: skip

    # --- the end ---------------------------------------------------------------------

    def test(self) -> None:
        """The final evaluation on the test split, where there is one."""
        self.test_result = None
        if not _has_samples(self.workload.test_set) or self.cfg.train.data_only:
            return
        t0 = time.perf_counter()
        loader = make_loader(self.workload.test_set, self.cfg.data, train=False, **self.loader_args)
        test = self.test_result = evaluate(self.state, self.workload, loader)
        device_sync(self.ctx.device)
        self.stages["evaluation"] += time.perf_counter() - t0
        self.writer.log("test", t=t0 - self.ctx.origin, seconds=time.perf_counter() - t0, **test)

    @property
    def throughput_scale(self) -> int:
        """Ranks step in lockstep, each on its share: global throughput is world x a rank's."""
        strategy = self.ctx.strategy
        return strategy.info.world_size if strategy.splits_batch_across_ranks else 1

    def finish(self) -> None:
        """Close the stages on the wall time; results, memory and ranks into the summary;
        then save the weights. What follows the wall is timed apart (``after_wall_s``)."""
        ctx, cfg, stages, summary = self.ctx, self.cfg, self.stages, self.summary
        device_sync(ctx.device)
        if not ctx.strategy.comm_stage:
            stages.pop("comm")  # no separate communication stage: it is inside backward
        if not (cfg.train.checkpoint_every or cfg.train.checkpoint_every_epoch):
            stages.pop("checkpoint")  # none asked for: the record is as it always was
        if not cfg.runtime.compile:
            stages.pop("compile")
        # wall_time_s: from the run's start (after interpreter start-up and imports) to the
        # end of its last evaluation; the stages partition it. What comes after it is timed
        # in "after_wall_s" or named in "after_wall_not_timed"; process time adds start-up.
        wall_end = time.perf_counter()
        wall = self.wall_before + wall_end - ctx.t_start
        stages["other"] = wall - sum(v for k, v in stages.items() if k != "other")
        test = self.test_result
        summary.update(
            wall_time_s=wall,
            train_time_s=self.train_time,
            stages_s=stages,
            steps=self.steps,
            samples=self.samples,
            samples_per_s=self.samples * self.throughput_scale / self.train_time
            if self.train_time > 0
            else None,
            epochs=self.epochs,
            first_losses=self.first_losses,
            skipped_steps=ctx.precision.skipped_steps,
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
            peak_rss_bytes=peak_rss_bytes(),
            comm=ctx.strategy.comm_stats() or None,
            steady_state=steady_state(
                self.step_records, cfg.runtime.timing_warmup_steps, scale=self.throughput_scale
            ),
        )
        # This process's life: start-up and its own part of the wall time.
        summary["process"]["time_s"] = summary["process"]["startup_s"] + wall - self.wall_before
        if ctx.device.type == "cuda":
            summary["peak_memory_bytes"] = torch.cuda.max_memory_allocated(ctx.device)
            summary["peak_memory_kind"] = "cuda_max_allocated"
        else:
            summary["peak_memory_bytes"] = summary["peak_rss_bytes"]
            summary["peak_memory_kind"] = "process_peak_rss"
        self._memory_figures()
        self._throughput_figures()
        t0 = time.perf_counter()
        if ctx.cpu is not None:  # this rank's share of the CPU, before ranks are gathered
            summary["cpu"] = ctx.cpu.section(workers=summary.get("num_workers") or 0)
        ranks.gather_ranks(ctx.info, summary)
        after = summary["after_wall_s"] = {"summary_figures": t0 - wall_end}
        after.update(gather_ranks=time.perf_counter() - t0, save_weights=0.0)
        summary["after_wall_not_timed"] = (
            "stopping the system sampler, writing summary.json, tracking uploads and the"
            " interpreter's exit"
        )
        if cfg.train.save_weights and not cfg.train.data_only:
            t0 = time.perf_counter()
            self.save_weights()
            after["save_weights"] = time.perf_counter() - t0

    def _memory_figures(self) -> None:
        """The ``memory`` section: what the probe step held, by component."""
        composed, summary = self.composed, self.summary
        if self.cfg.train.data_only:
            summary["memory"] = {"note": "data-only run: no model step, nothing counted"}
            return
        compiled = composed.get("compile")
        if compiled and compiled.get("graphs") is not None:
            graphs = compiled_graphs()
            # Graphs compiled after the warm-up (new shapes, say): inside step times.
            compiled["recompiled_later"] = (graphs or 0) - compiled["graphs"]
        summary["compile"] = compiled
        summary["memory"] = self.step_fn.section(
            checkpointing=composed["checkpointing"],
            sharded=self.ctx.strategy.name == "fsdp",
        )

    def _throughput_figures(self) -> None:
        """tokens/s and model FLOPs utilisation, where the workload states its sizes."""
        summary, workload, device = self.summary, self.workload, self.ctx.device
        precision, world = self.cfg.runtime.precision, self.ctx.info.world_size
        rate = summary.get("samples_per_s")
        if rate and workload.tokens_per_sample:
            summary["tokens_per_s"] = rate * workload.tokens_per_sample
        if not workload.flops_per_sample:
            summary["mfu_note"] = "the workload states no FLOPs per sample"
            return
        summary["flops_per_sample"] = workload.flops_per_sample
        from trainscope.profiling.peak import ENV_VAR, mfu, peak_flops

        peak = peak_flops(device, precision)
        summary["peak_flops_per_device"] = peak
        # Every rank's device contributes its peak: MFU is achieved / (peak x devices).
        flops = workload.flops_per_sample
        summary["mfu"] = mfu(flops, rate, peak * world) if rate and peak else None
        if peak is None:
            summary["mfu_note"] = (
                f"no known peak FLOP/s for {device.type} at {precision}; set {ENV_VAR} to give one"
            )

    def _weights_fault(self) -> Any:
        """Tests of a run killed while writing its weights (train.faults) die there."""
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
        self.summary["weights"] = {
            "file": path.name,
            "bytes": ranks.save_weights(path, full, skip, before_move=self._weights_fault()),
            # The tensors alone (the file adds a header): what the memory meter's parameter
            # and buffer bytes are to equal.
            "tensor_bytes": sum(
                v.numel() * v.element_size() for k, v in full.items() if k not in skip
            ),
        }
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
