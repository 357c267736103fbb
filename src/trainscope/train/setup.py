"""A run's setup: :func:`build_parts` builds everything the Trainer trains with, in one
typed :class:`~trainscope.train.parts.Parts` (rebuilt on every start, a resume's too).

The order matters and is here, in one function: the model is composed before the
loaders are made (a pipeline times its blocks on example inputs), the schedule needs the
loader's length, compilation needs the composed model and the batch, and a resume comes
last, so that the random generators go on exactly from the checkpoint's states.
"""

from __future__ import annotations

import os
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from trainscope.data.loaders import make_loader
from trainscope.profiling.comm_probe import CommProbe
from trainscope.profiling.memory import MemoryProbe
from trainscope.profiling.timer import ProgressTimer, device_sync, make_stage_timer
from trainscope.runtime.captured import import_log
from trainscope.runtime.device import seed_everything
from trainscope.strategies.base import grad_layout
from trainscope.train import fault_injection, ranks
from trainscope.train.checkpointer import Checkpointer
from trainscope.train.compose import compile_warmup, compiled_graphs, compose
from trainscope.train.loop import data_step, evaluate, train_step
from trainscope.train.parts import Loaders, Parts, RunContext, RunPlace
from trainscope.train.record import SetupFacts
from trainscope.train.resume import data_fingerprint, resume_into
from trainscope.train.schedule import build_optimizer, make_scheduler
from trainscope.train.state import TrainState
from trainscope.train.target import StepEvaluations, check_splits
from trainscope.workloads import build_workload
from trainscope.workloads.base import Workload, example_inputs

IMPORT_LOG = "imports.log"
"""What third-party libraries printed while the workload imported them
(trainscope.runtime.captured)."""
NO_VALIDATION = "no validation data: the workload has no validation split (or it is empty)"


def cache_dir() -> Path:
    """Where downloaded data lives: $TRAINSCOPE_CACHE, else ~/.cache/trainscope."""
    return Path(os.environ.get("TRAINSCOPE_CACHE", Path.home() / ".cache" / "trainscope"))


def num_samples(dataset: Any) -> int | None:
    """len(dataset), or None for a split that has no length (or no split)."""
    try:
        return len(dataset) if dataset is not None else None
    except TypeError:
        return None


def has_samples(dataset: Any) -> bool:
    """A split to evaluate on: present and not empty (a split without len() counts)."""
    return dataset is not None and num_samples(dataset) != 0


def build_parts(place: RunPlace) -> Parts:
    """Data, model, optimizer, loaders, timer, checkpointer and stop rule, the workload's
    facts into the record, then the checkpoint's state if the run resumes."""
    cfg, ctx = place.cfg, place.ctx
    seed_everything(cfg.train.seed)
    workload = _workload(place)
    num_parameters = sum(p.numel() for p in workload.model.parameters())  # before sharding
    state, composed, lr = _state(place, workload)
    loaders = _loaders(place, workload)
    total_steps = _schedule(place, state, len(loaders.train))
    compile_graphs = None
    if cfg.runtime.compile and not cfg.train.data_only:
        compile_graphs = _compile(place, state, workload, loaders.local_batch, composed)
    step_fn, comm_probe = _step_fn(place, total_steps)
    timer, watch_timer, fault = _timer(place, state)
    facts = _setup_facts(workload, state, timer.kind, loaders.local_batch, lr, num_parameters,
                         ctx.strategy.describe())  # fmt: skip
    place.record.set_setup(facts)
    fingerprint: dict[str, Any] | None = None
    checkpointer = Checkpointer(
        cfg.train, place.writer, place.progress,
        lambda: run_facts(ctx, fingerprint),  # reads the fingerprint when it saves
        ctx.origin, fault,
    )  # fmt: skip
    evaluate_split = Evaluator(place, workload, state, loaders)
    stop_rule = StepEvaluations(
        cfg.train, evaluate_split, writer=place.writer, progress=place.progress,
        info=ctx.info, origin=ctx.origin, own_process=lambda: own_process_s(place),
        has_val=loaders.val is not None,
    )  # fmt: skip
    empty = workload.new_metrics(ctx.device).compute()  # the figures it computes
    check_splits(stop_rule.target, loaders.val, workload.test_set, empty)
    if checkpointer.enabled or cfg.resume or ctx.stop_vote is not None:
        fingerprint = data_fingerprint(workload.train_set)
    if cfg.resume:  # last: the generators go on exactly from the checkpoint's states
        resume_into(place, state, run_facts(ctx, fingerprint))
        if watch_timer is not None:  # the stall watchdog's step count
            watch_timer.step = state.step
    _close_setup(place, facts)
    return Parts(
        workload=workload, state=state, composed=composed, lr=lr,
        num_parameters=facts.num_parameters, loaders=loaders, total_steps=total_steps,
        step_fn=step_fn, comm_probe=comm_probe, timer=timer, watch_timer=watch_timer,
        fault=fault, checkpointer=checkpointer, stop_rule=stop_rule,
        reduce_losses=ranks.make_loss_reducer(ctx.info, ctx.strategy.loss_share()),
        fingerprint=fingerprint, evaluate=evaluate_split, compile_graphs=compile_graphs,
        facts=facts,
    )  # fmt: skip


def _workload(place: RunPlace) -> Workload:
    """The workload, with what its imports printed kept apart and its notes recorded."""
    with import_log(place.writer.run_dir / IMPORT_LOG) as chatter:
        workload = build_workload(place.cfg.workload, cache_dir())
    if chatter.lines:  # in the record and the report; never on the console
        place.record.note(
            f"{chatter.lines} line(s) third-party libraries printed while "
            f"being imported are in {IMPORT_LOG} (the first: {chatter.first})"
        )
    for note in workload.notes:  # e.g. a pretrained model's new head
        place.note(note)
    return workload


def _state(place: RunPlace, workload: Workload) -> tuple[TrainState, dict[str, Any], float]:
    """The model composed (precision, checkpointing, compile, strategy) and the
    TrainState around it; what compose applied; the learning rate."""
    cfg, ctx = place.cfg, place.ctx
    if ctx.strategy.example_size():  # e.g. a pipeline that times its blocks to split
        n = ctx.strategy.example_size()
        ctx.strategy.example = example_inputs(workload, n, ctx.device)
    model, composed = compose(workload.model, ctx.strategy, ctx.device, cfg.runtime)
    lr = cfg.train.lr * (ctx.info.world_size if cfg.dist.scale_lr else 1)
    state = TrainState(
        model=model,
        optimizer=build_optimizer(replace(cfg.train, lr=lr), model),
        grad_clip=cfg.train.grad_clip,
        precision=ctx.precision,
        loss_fn=workload.loss_fn,
        device=ctx.device,
        strategy=ctx.strategy,
        progress=place.watch,
    )
    return state, composed, lr


def _loaders(place: RunPlace, workload: Workload) -> Loaders:
    """Training loader (workers chosen if asked), validation loader if there is data."""
    cfg, ctx = place.cfg, place.ctx
    args = {"device": ctx.device, "num_workers": _num_workers(place, workload),
            "collate_fn": workload.collate_fn}  # fmt: skip
    local_batch = ctx.strategy.local_batch_size(cfg.data.batch_size)
    n_train = num_samples(workload.train_set)
    if n_train and cfg.data.batch_size > n_train and not cfg.data.drop_last:
        # As in PyTorch: the whole training set is one (short) batch per epoch; say so.
        place.note(
            f"batch size {cfg.data.batch_size} > {n_train} training samples: one batch per epoch"
        )
    index, shards = ctx.strategy.data_shard()  # a pipeline's ranks load the same batches
    train_data, changed = ctx.strategy.training_data(cfg.data, n_train)
    if changed:
        place.note(changed)
    train = make_loader(workload.train_set, train_data, train=True, batch_size=local_batch,
                        rank=index, world_size=shards, **args)  # fmt: skip
    # Data-only runs measure the input pipeline alone: no validation, no test. Every
    # rank evaluates the whole split (the same figures everywhere; FSDP needs all ranks).
    val = None
    if has_samples(workload.val_set) and not cfg.train.data_only:
        val = make_loader(workload.val_set, cfg.data, train=False, **args)
    elif not cfg.train.data_only:
        # Never a loss of 0 / accuracy of 0 from an empty split: say there is none.
        place.note(NO_VALIDATION)
    return Loaders(train=train, val=val, args=args, local_batch=local_batch)


def _num_workers(place: RunPlace, workload: Workload) -> int:
    """The DataLoader workers: as configured, or chosen by measuring (``auto``)."""
    cfg, ctx = place.cfg, place.ctx
    workers = cfg.data.num_workers
    auto = None
    if cfg.data.loader == "torch" and workers == "auto":
        # Imported here: the autotuner (and its cache) only when a run asks for it.
        from trainscope.data.autotune import choose_num_workers

        auto = choose_num_workers(
            workload.train_set, cfg.data, ctx.device, workload=cfg.workload.name,
            cache_dir=cache_dir(), log=ctx.console.note,
        ).to_dict()  # fmt: skip
        workers = auto["chosen"]
        place.writer.log("num_workers_auto", **auto)
    elif workers == "auto":
        workers = 0  # the fast path has no workers to choose
    place.record.set_num_workers(workers, auto)
    return workers


def _schedule(place: RunPlace, state: TrainState, per_epoch: int) -> int:
    """The lr schedule over every optimizer step the run will take (all epochs); returns
    their number."""
    train = place.cfg.train
    if train.max_steps_per_epoch:
        per_epoch = min(per_epoch, train.max_steps_per_epoch)
    total = per_epoch * train.epochs
    state.scheduler = make_scheduler(state.optimizer, train, total)
    return total


def _compile(
    place: RunPlace, state: TrainState, workload: Workload, batch: int, composed: dict
) -> int | None:
    """Compile now (one forward and backward that leave no trace): its own stage.
    Returns the graphs torch.compile captured."""
    seconds = compile_warmup(state, workload, batch)
    place.progress.add_stage("compile", seconds)
    graphs = compiled_graphs()
    composed["compile"].update(seconds=seconds, graphs=graphs)
    if graphs == 0:
        place.note("--compile: torch.compile captured no graph; the model ran eagerly")
    place.writer.log("compile", seconds=seconds, graphs=graphs)
    return graphs


def _step_fn(place: RunPlace, total_steps: int) -> tuple[Any, CommProbe]:
    """The step function (with its memory probe) and the collectives' probe."""
    # The memory meter counts on the second step of this attempt (the first when the
    # run takes one step only): by then the optimizer's states exist, as in every later
    # step. Data-only runs take no model step: nothing to count.
    probe_at = 2 if total_steps > 1 else 1
    # Collectives that pass through the dispatcher (DTensor's: tp, fsdp) are counted on
    # one later step (the memory probe's hooks would be in its timings).
    comm_probe = CommProbe(train_step, min(3, total_steps))
    if place.cfg.train.data_only:
        return data_step, comm_probe
    return MemoryProbe(comm_probe, probe_at), comm_probe


def _timer(place: RunPlace, state: TrainState) -> tuple[Any, ProgressTimer | None, Any]:
    """The stage timer, the stall watchdog's view of it, and a planted fault if any."""
    ctx = place.ctx
    # A strategy that times its own parts of the step does so on the host clock (with a
    # device synchronize on CUDA): the stages around them must use the same clock.
    mode = "exact" if ctx.strategy.runs_schedule else place.cfg.runtime.timing
    timer: Any = make_stage_timer(ctx.device, mode)
    watch_timer = ProgressTimer(timer, place.watch) if place.watch is not None else None
    if watch_timer is not None:
        timer = watch_timer
    # Tests of resume and restarts make a process die at a chosen point (train.fault_injection).
    fault = fault_injection.from_env(ctx.info.rank, ctx.attempt)
    if fault is not None:
        timer = fault_injection.FaultTimer(timer, fault, lambda: state.step + 1)
    return timer, watch_timer, fault


def _setup_facts(
    workload: Workload, state: TrainState, timing: str, local_batch: int, lr: float,
    num_parameters: int, parallel: Any,
) -> SetupFacts:  # fmt: skip
    """What the record says of the run as set up."""
    return SetupFacts(
        model=type(workload.model).__name__,
        num_parameters=num_parameters,
        workload_description=workload.description,
        workload_info=workload.info,
        task=workload.task,
        timing_mode=timing,
        train_samples=len(workload.train_set),
        local_batch_size=local_batch,
        lr=lr,
        parallel=parallel,
        gradients=grad_layout(workload.model),
        optimizer=getattr(state.optimizer, "describe", lambda: None)(),
    )


def _close_setup(place: RunPlace, facts: SetupFacts) -> None:
    """This attempt's setup time (a resume adds earlier ones' in its progress) as its
    stage, less compilation, which is its own."""
    ctx = place.ctx
    if ctx.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(ctx.device)
    own = time.perf_counter() - ctx.t_start - place.progress.stages.get("compile", 0.0)
    place.progress.add_stage("setup", own)
    place.writer.log("setup", seconds=own, model=facts.model, num_parameters=facts.num_parameters)


class Evaluator:
    """One evaluation of the ``val`` or ``test`` split, timed as the evaluation stage
    (the test loader made at its first use)."""

    def __init__(
        self, place: RunPlace, workload: Workload, state: TrainState, loaders: Loaders
    ) -> None:
        self.place, self.workload, self.state, self.loaders = place, workload, state, loaders

    def __call__(self, split: str) -> dict[str, Any]:
        t0 = time.perf_counter()
        loaders = self.loaders
        if split == "val":
            loader = loaders.val
        else:
            if loaders.test is None:
                loaders.test = make_loader(self.workload.test_set, self.place.cfg.data,
                                           train=False, **loaders.args)  # fmt: skip
            loader = loaders.test
        figures = evaluate(self.state, self.workload, loader)
        device_sync(self.place.ctx.device)
        self.place.progress.add_stage("evaluation", time.perf_counter() - t0)
        return figures


def run_facts(ctx: RunContext, fingerprint: dict[str, Any] | None) -> dict[str, Any]:
    """What decides this run's numbers: a checkpoint records them, a resume compares."""
    config = {**ctx.cfg.to_dict(), "out": None, "overwrite": False, "resume": False}
    return {
        "config": config,
        "world_size": ctx.info.world_size,
        "device_type": ctx.device.type,
        "data": fingerprint,
    }


def own_process_s(place: RunPlace) -> float | None:
    """Seconds since this process started, when the process is this run's alone (it ran
    no run before and this is the first attempt); else None."""
    ctx, process = place.ctx, place.record.facts.process or {}
    if ctx.attempt > 1 or process.get("runs_before") or "startup_s" not in process:
        return None
    return process["startup_s"] + time.perf_counter() - ctx.t_start
