"""One run, start to finish: check, set up, train, evaluate, and leave a complete run record."""

from __future__ import annotations

import os
import re
import time
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch

from trainscope.config import MULTIPROCESS_STRATEGIES, RunConfig, TrainConfig
from trainscope.data.loaders import make_loader
from trainscope.errors import ConfigError
from trainscope.precision import make_precision
from trainscope.profiling.system import SystemSampler, peak_rss_bytes
from trainscope.profiling.timer import device_sync, make_stage_timer
from trainscope.records import STAGES, RunWriter, atomic_write_json, prepare_run_dir
from trainscope.runtime import describe_environment, resolve_device, seed_everything
from trainscope.runtime.device import device_name
from trainscope.runtime.dist import (
    DistInfo,
    destroy_distributed,
    gather_objects,
    init_distributed,
    rank_device,
    under_torchrun,
)
from trainscope.strategies import make_strategy
from trainscope.strategies.base import Strategy
from trainscope.tracking import Sinks, make_sinks
from trainscope.train import ranks
from trainscope.train.console import RunConsole
from trainscope.train.loop import TrainState, data_step, evaluate, train_epoch, train_step
from trainscope.workloads import build_workload, check_options
from trainscope.workloads.base import Workload

FIRST_LOSSES = 5


def cache_dir() -> Path:
    """Where downloaded data lives: $TRAINSCOPE_CACHE, else ~/.cache/trainscope."""
    return Path(os.environ.get("TRAINSCOPE_CACHE", Path.home() / ".cache" / "trainscope"))


def default_out(cfg: RunConfig) -> Path:
    """runs/<workload>-<UTC timestamp> for runs without --out."""
    name = re.sub(r"[^\w.-]+", "_", cfg.workload.name)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    return Path("runs") / f"{name}-{stamp}"


def build_optimizer(cfg: TrainConfig, params: Any) -> torch.optim.Optimizer:
    """The optimizer a TrainConfig names."""
    if cfg.optimizer == "sgd":
        return torch.optim.SGD(
            params, lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay
        )
    if cfg.optimizer == "adam":
        return torch.optim.Adam(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    return torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)


def run(cfg: RunConfig, console: RunConsole | None = None) -> dict[str, Any]:
    """Train ``cfg`` and write its run directory; returns the summary.

    Every check that needs no data (device, precision, output directory) happens before
    the run directory is created, so a refused run leaves nothing behind. A run that fails
    after that point is recorded with ``status: failed`` and its error, then re-raised.

    Under torchrun (or with a multi-process strategy alone) this process joins the process
    group first; rank 0 writes the run record and every rank its ``ranks/rank<R>`` folder.
    """
    t_start = time.perf_counter()
    device = resolve_device(cfg.runtime.device)
    info = DistInfo()
    if cfg.dist.strategy in MULTIPROCESS_STRATEGIES:
        info = init_distributed(cfg.dist.backend, device.type, cfg.dist.timeout_s)
    elif under_torchrun() and int(os.environ["WORLD_SIZE"]) > 1:
        raise ConfigError(
            f"strategy {cfg.dist.strategy} runs in one process; under torchrun with several "
            f"processes use one of {', '.join(MULTIPROCESS_STRATEGIES)}"
        )
    try:
        device = rank_device(device, info)
        return _run(cfg, console, device, info, t_start)
    finally:
        destroy_distributed(info)


def _run(
    cfg: RunConfig,
    console: RunConsole | None,
    device: torch.device,
    info: DistInfo,
    t_start: float,
) -> dict[str, Any]:
    """:func:`run` once the process group (if any) exists."""
    console = console if console is not None and info.is_main else RunConsole(enabled=False)
    precision = make_precision(cfg.runtime.precision, device)
    strategy = make_strategy(cfg.dist.strategy, info, device)
    strategy.local_batch_size(cfg.data.batch_size)  # an uneven split fails before any file
    check_options(cfg.workload)  # so does a bad workload option
    # Tracking sinks mirror rank 0 only; a missing package refuses the run up front.
    sinks = make_sinks(cfg.runtime.track if info.is_main else [])
    run_dir = ranks.agree_run_dir(
        info, lambda: prepare_run_dir(cfg.out or default_out(cfg), cfg.overwrite)
    )
    # Rank 0 writes the run directory itself; every other rank its ranks/rank<R> folder.
    own_dir = run_dir if info.is_main else ranks.rank_dir(run_dir, info)
    writer = RunWriter(own_dir)
    if info.is_main:
        # Saved without out/overwrite: rerunning config.yaml makes a fresh run directory.
        writer.write_config({**cfg.to_dict(), "out": None, "overwrite": False})
        writer.write_env(describe_environment(device))
    summary: dict[str, Any] = {
        "status": "running",
        "error": None,
        "workload": cfg.workload.name,
        "device": str(device),
        "device_name": device_name(device),
        "precision": precision.name,
        "batch_size": cfg.data.batch_size,
        "loader": cfg.data.loader,
        "num_workers": cfg.data.num_workers,
        "data_only": cfg.train.data_only,
        "started_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "strategy": strategy.name,
        "world_size": info.world_size,
        "rank": info.rank,
    }
    writer.write_summary(summary)  # a killed run leaves "running", never "completed"
    console.start(run_dir, summary)
    note = strategy.describe().get("note")  # e.g. DataParallel on a single device
    if note:
        console.note(note)
    sinks.start(run_dir, cfg.to_dict(), summary)
    sampler = SystemSampler(
        own_dir / "system.jsonl",
        cfg.runtime.system_interval_s,
        gpus=device.type == "cuda",
        on_sample=sinks.log_system,
    )
    try:
        with sampler:
            _train(cfg, device, precision, strategy, writer, summary, console, t_start, sinks)
        summary["system"] = sampler.summary()
        summary["status"] = "completed"
    except BaseException as e:
        summary["status"] = "failed"
        summary["error"] = (
            "interrupted by the user"
            if isinstance(e, KeyboardInterrupt)
            else (f"{type(e).__name__}: {e}")
        )
        summary["system"] = sampler.summary()
        raise
    finally:
        summary["finished_at"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
        writer.close()
        if sinks:
            summary["tracking"] = sinks.describe()
        writer.write_summary(summary)  # the record is complete before any upload waits
        precision.close()
        if sinks:
            sinks.finish(summary)
            if sinks.warnings_list != summary["tracking"]["warnings"]:
                summary["tracking"] = sinks.describe()  # finish() itself failed
                writer.write_summary(summary)
    console.finish(summary)
    return summary


def compose(model: torch.nn.Module, strategy: Strategy, device: torch.device) -> torch.nn.Module:
    """The model as trained: moved to the device, then wrapped by the strategy.

    The order is fixed because each step needs the one before: precision conversion of
    parameters (none yet: every precision here is autocast over fp32 weights), activation
    checkpointing and compilation (not offered yet) act on the plain module, and strategy
    wrapping (DDP, FSDP sharding) comes last, around the finished module. The optimizer is
    built afterwards, from the wrapped model's parameters (FSDP replaces them by shards).
    """
    return strategy.wrap(model.to(device))


def _train(
    cfg: RunConfig,
    device: torch.device,
    precision: Any,
    strategy: Strategy,
    writer: RunWriter,
    summary: dict[str, Any],
    console: RunConsole,
    t_start: float,
    sinks: Sinks,
) -> None:
    """The body of a run; fills ``summary`` as results come in."""
    stages = dict.fromkeys(STAGES, 0.0)
    info = strategy.info

    # --- setup: data and model -------------------------------------------------------
    seed_everything(cfg.train.seed)
    workload = build_workload(cfg.workload, cache_dir())
    n_params = sum(p.numel() for p in workload.model.parameters())
    model = compose(workload.model, strategy, device)
    lr = cfg.train.lr * (info.world_size if cfg.dist.scale_lr else 1)
    state = TrainState(
        model=model,
        optimizer=build_optimizer(replace(cfg.train, lr=lr), model.parameters()),
        precision=precision,
        loss_fn=workload.loss_fn,
        device=device,
        strategy=strategy,
    )
    workers = cfg.data.num_workers
    if cfg.data.loader == "torch" and workers == "auto":
        from trainscope.data.autotune import choose_num_workers

        auto = choose_num_workers(
            workload.train_set,
            cfg.data,
            device,
            workload=cfg.workload.name,
            cache_dir=cache_dir(),
            log=console.note,
        )
        workers = auto.chosen
        summary["num_workers_auto"] = auto.to_dict()
        writer.log("num_workers_auto", **auto.to_dict())
    elif workers == "auto":
        workers = 0  # the fast path has no workers to choose
    summary["num_workers"] = workers
    loader_args = {"device": device, "num_workers": workers, "collate_fn": workload.collate_fn}
    local_batch = strategy.local_batch_size(cfg.data.batch_size)
    shard = {"rank": info.rank, "world_size": info.world_size}
    train_loader = make_loader(
        workload.train_set, cfg.data, train=True, batch_size=local_batch, **shard, **loader_args
    )
    # Data-only runs measure the input pipeline alone: no validation, no test. Every rank
    # evaluates the whole split (the same figures everywhere; FSDP needs all ranks anyway).
    val_loader = (
        make_loader(workload.val_set, cfg.data, train=False, **loader_args)
        if workload.val_set is not None and not cfg.train.data_only
        else None
    )
    timer = make_stage_timer(device, cfg.runtime.timing)
    summary.update(
        model=type(workload.model).__name__,
        num_parameters=n_params,
        workload_description=workload.description,
        workload_info=workload.info,
        timing_mode=timer.kind,
        train_samples=len(workload.train_set),
        local_batch_size=local_batch,
        lr=lr,
        parallel=strategy.describe(),
    )
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    stages["setup"] = time.perf_counter() - t_start
    writer.log(
        "setup", seconds=stages["setup"], **{k: summary[k] for k in ("model", "num_parameters")}
    )

    # --- training epochs, each followed by validation ----------------------------------
    first_losses: list[float] = []
    epochs: list[dict[str, Any]] = []
    samples = steps = 0
    train_time = 0.0
    reduce_losses = ranks.make_loss_reducer(info)

    def on_steps(records: list[dict[str, Any]]) -> None:
        for r in records:
            writer.log("step", **r)
            if len(first_losses) < FIRST_LOSSES and r["loss"] is not None:
                first_losses.append(r["loss"])
        writer.flush()
        sinks.log_steps(records)
        console.steps(records)

    for e in range(cfg.train.epochs):
        n_steps = len(train_loader)
        if cfg.train.max_steps_per_epoch:
            n_steps = min(n_steps, cfg.train.max_steps_per_epoch)
        console.epoch_start(e + 1, cfg.train.epochs, n_steps)
        res = train_epoch(
            state,
            train_loader,
            timer,
            max_steps=cfg.train.max_steps_per_epoch,
            log_every=cfg.train.log_every,
            on_steps=on_steps,
            step_fn=data_step if cfg.train.data_only else train_step,
            reduce_losses=reduce_losses,
        )
        for k, v in res.stage_s.items():
            stages[k] += v
        samples += res.samples
        steps += res.steps
        train_time += res.duration_s
        row: dict[str, Any] = {
            "epoch": res.epoch,
            "train_loss": res.mean_loss,
            "val_loss": None,
            "val_accuracy": None,
            "duration_s": res.duration_s,
            "samples_per_s": res.samples * _throughput_scale(strategy) / res.duration_s
            if res.duration_s > 0
            else None,
            "loader_start_s": res.loader_start_s,
        }
        last = e + 1 == cfg.train.epochs
        if val_loader is not None and ((e + 1) % cfg.train.eval_every == 0 or last):
            t0 = time.perf_counter()
            val = evaluate(state, workload, val_loader)
            device_sync(device)
            stages["evaluation"] += time.perf_counter() - t0
            row.update(val_loss=val["loss"], val_accuracy=val.get("accuracy"))
            row.update({k: v for k, v in val.items() if k in ("perplexity",)})
        epochs.append(row)
        writer.log("epoch", **row)
        writer.flush()
        sinks.log_epoch(row)
        console.epoch_end(row)

    # --- final test evaluation -------------------------------------------------------
    test = None
    if workload.test_set is not None and not cfg.train.data_only:
        t0 = time.perf_counter()
        test_loader = make_loader(workload.test_set, cfg.data, train=False, **loader_args)
        test = evaluate(state, workload, test_loader)
        device_sync(device)
        stages["evaluation"] += time.perf_counter() - t0
        writer.log("test", **test)

    device_sync(device)
    if not strategy.comm_stage:
        stages.pop("comm")  # no separate communication stage: it is inside backward
    wall = time.perf_counter() - t_start
    stages["other"] = wall - sum(v for k, v in stages.items() if k != "other")
    summary.update(
        wall_time_s=wall,
        train_time_s=train_time,
        stages_s=stages,
        steps=steps,
        samples=samples,
        samples_per_s=samples * _throughput_scale(strategy) / train_time
        if train_time > 0
        else None,
        epochs=epochs,
        first_losses=first_losses,
        skipped_steps=precision.skipped_steps,
        test_loss=test["loss"] if test else None,
        test_accuracy=test.get("accuracy") if test else None,
        per_class_accuracy=(
            dict(zip(workload.class_names, test["per_class_accuracy"]))
            if test and test.get("per_class_accuracy")
            else None
        ),
        peak_rss_bytes=peak_rss_bytes(),
        comm=strategy.comm_stats() or None,
    )
    if device.type == "cuda":
        summary["peak_memory_bytes"] = torch.cuda.max_memory_allocated(device)
        summary["peak_memory_kind"] = "cuda_max_allocated"
    else:
        summary["peak_memory_bytes"] = summary["peak_rss_bytes"]
        summary["peak_memory_kind"] = "process_peak_rss"
    _throughput_figures(summary, workload, device, cfg.runtime.precision, info.world_size)
    _gather_ranks(summary, info)
    if cfg.train.save_weights and not cfg.train.data_only:
        _save(writer.run_dir, state, strategy, workload, summary)


def _throughput_scale(strategy: Strategy) -> int:
    """Ranks step in lockstep, each on its share: global throughput is world x this rank's."""
    return strategy.info.world_size if strategy.splits_batch_across_ranks else 1


def _throughput_figures(
    summary: dict[str, Any], workload: Workload, device: torch.device, precision: str, world: int
) -> None:
    """tokens/s and model FLOPs utilisation, where the workload states its sizes."""
    rate = summary.get("samples_per_s")
    if rate and workload.tokens_per_sample:
        summary["tokens_per_s"] = rate * workload.tokens_per_sample
    if workload.flops_per_sample:
        summary["flops_per_sample"] = workload.flops_per_sample
        from trainscope.profiling.peak import mfu, peak_flops

        peak = peak_flops(device, precision)
        summary["peak_flops_per_device"] = peak
        # Every rank's device contributes its peak: MFU is achieved / (peak x devices).
        summary["mfu"] = (
            mfu(workload.flops_per_sample, rate, peak * world) if rate and peak else None
        )


def _gather_ranks(summary: dict[str, Any], info: DistInfo) -> None:
    """Rank 0's summary gets every rank's figures and the spread of each stage."""
    if info.world_size == 1:
        return
    import socket

    every = gather_objects(ranks.rank_summary(info, summary, socket.gethostname()), info)
    summary["ranks"] = every
    summary["stage_spread"] = ranks.stage_spread(every)
    peaks = [r["peak_memory_bytes"] for r in every if r.get("peak_memory_bytes") is not None]
    summary["peak_memory_bytes_max_rank"] = max(peaks) if peaks else None


def _save(
    run_dir: Any, state: TrainState, strategy: Strategy, workload: Workload, summary: dict
) -> None:
    """model.safetensors (+ the workload's artifacts as JSON), written by rank 0.

    Every rank calls this: gathering FSDP's shards into full tensors is a collective.
    """
    full = strategy.full_state_dict(state.model)
    if not strategy.info.is_main:
        return
    skip = ranks.tied_duplicates(strategy.unwrap(state.model))
    path = run_dir / "model.safetensors"
    summary["weights"] = {"file": path.name, "bytes": ranks.save_weights(path, full, skip)}
    for name, obj in workload.artifacts.items():
        atomic_write_json(run_dir / f"{name}.json", obj)
