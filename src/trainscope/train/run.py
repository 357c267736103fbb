"""One run, start to finish: check, set up, train, evaluate, and leave a complete run record."""

from __future__ import annotations

import contextlib
import os
import re
import sys
import time
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch

from trainscope import outcomes
from trainscope.config import MULTIPROCESS_STRATEGIES, RunConfig, TrainConfig
from trainscope.data.loaders import make_loader
from trainscope.errors import ConfigError, Terminated, TrainscopeError
from trainscope.precision import make_precision
from trainscope.profiling.system import SystemSampler, clock_origin, peak_rss_bytes, process_start
from trainscope.profiling.timer import ProgressTimer, device_sync, make_stage_timer
from trainscope.records import STAGES, OwnedDir, RunWriter, atomic_write_json, prepare_run_dir
from trainscope.records.steady import steady_state
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
from trainscope.signals import signals_deferred
from trainscope.strategies import make_strategy
from trainscope.strategies.base import Strategy
from trainscope.textsafe import one_line
from trainscope.tracking import Sinks, make_sinks
from trainscope.train import ranks
from trainscope.train.console import RunConsole
from trainscope.train.loop import TrainState, data_step, evaluate, train_epoch, train_step
from trainscope.workloads import build_workload, check_options
from trainscope.workloads.base import Workload

FIRST_LOSSES = 5
NO_VALIDATION = "no validation data: the workload has no validation split (or it is empty)"


def _num_samples(dataset: Any) -> int | None:
    """len(dataset), or None for a split that has no length (or no split)."""
    try:
        return len(dataset) if dataset is not None else None
    except TypeError:
        return None


def _has_samples(dataset: Any) -> bool:
    """A split to evaluate on: present and not empty (a split without len() counts)."""
    return dataset is not None and _num_samples(dataset) != 0


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
    t_start = time.perf_counter()  # the run's clock origin: every "t" is relative to it
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
    run_dir, owned = ranks.agree_run_dir(
        info, lambda: prepare_run_dir(cfg.out or default_out(cfg), cfg.overwrite)
    )
    # Rank 0 writes the run directory itself; every other rank its ranks/rank<R> folder.
    if not info.is_main:
        owned = ranks.rank_dir(run_dir, info)
    assert owned is not None
    try:
        return _record(cfg, console, device, info, t_start, precision, strategy, sinks, owned)
    finally:
        owned.release()  # the lock goes with the last write, and with the process anyway


def _record(
    cfg: RunConfig,
    console: RunConsole,
    device: torch.device,
    info: DistInfo,
    t_start: float,
    precision: Any,
    strategy: Strategy,
    sinks: Sinks,
    owned: OwnedDir,
) -> dict[str, Any]:
    """The run inside its (locked) directory: every way it ends is written to the record."""
    run_dir = owned.path if info.is_main else owned.path.parent.parent
    outcomes.note_run_dir(run_dir)
    writer = RunWriter(owned)
    if info.is_main:
        # Saved without out/overwrite: rerunning config.yaml makes a fresh run directory.
        writer.write_config({**cfg.to_dict(), "out": None, "overwrite": False})
        writer.write_env(describe_environment(device))
        writer.record(dirs=sinks.folders())
    # What is in the sinks' folders now is not theirs (an earlier run's leftovers kept by
    # the claim, or a user's): only what appears during the run is recorded as written.
    sink_files_before = {folder: owned.tree(folder) for folder in sinks.folders()}
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
        "clock": clock_origin(t_start),
        "process": process_start(t_start),
    }
    writer.write_summary(summary)  # a killed run leaves "running", never "completed"
    console.start(run_dir, summary)
    note = strategy.describe().get("note")  # e.g. DataParallel on a single device
    if note:
        console.note(note)
    sinks.start(run_dir, cfg.to_dict(), summary)
    sampler = SystemSampler(
        writer.run_dir / "system.jsonl",
        cfg.runtime.system_interval_s,
        gpus=device.type == "cuda",
        on_sample=sinks.log_system,
        origin=t_start,
    )
    watchdog = _stall_watchdog(cfg, info, writer, summary, console)
    try:
        with sampler, watchdog:
            progress = getattr(watchdog, "progress", None)  # multi-process runs only
            _train(
                cfg, device, precision, strategy, writer, summary, console, t_start, sinks, progress
            )
        summary["system"] = sampler.summary()
        if summary["status"] != "failed":  # unless the stall watchdog has ended the run
            summary["status"] = "completed"
    except BaseException as e:
        if summary["status"] != "failed":  # the stall watchdog may have said why already
            summary["error"] = describe_failure(e)
        summary["status"] = "failed"
        summary["system"] = sampler.summary()
        raise
    finally:
        # A signal now would cut the last write short and leave the record "running": it
        # waits until the record is complete.
        with signals_deferred():
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
            for folder in sinks.folders():  # only the sink knows the names it wrote
                owned.record_tree(folder, sink_files_before.get(folder, set()))
    console.finish(summary)
    return summary


# How gloo and nccl say that the rank at the other end of a collective is gone.
PEER_LOST = ("Connection reset by peer", "Connection closed by peer", "Broken pipe",
             "NCCL communicator was aborted", "Connection refused")  # fmt: skip
PEER_LOST_TEXT = "lost the connection to another rank (it ended or crashed)"

# Exit status of a process ended by the stall watchdog.
STALL_EXIT = 3


def _stall_watchdog(
    cfg: RunConfig, info: DistInfo, writer: RunWriter, summary: dict[str, Any], console: Any
) -> Any:
    """A watchdog that ends every rank of a stalled multi-process run within the stall
    timeout, each with the verdict in its record; a no-op context for one process."""
    if info.world_size == 1:
        return contextlib.nullcontext()
    import torch.distributed as dist

    from trainscope.runtime.watchdog import Progress, StallWatchdog

    def on_stall(verdict: Any) -> None:
        # In the watchdog's thread, while the main thread may be stuck in a collective:
        # record, say it once, and leave without waiting for anything that may never come.
        message = f"stalled: {verdict.message()}"
        finished = datetime.now(timezone.utc).isoformat(timespec="seconds")
        for _ in range(3):  # a copy races with the main thread only if it is not stuck
            try:
                writer.flush()
                writer.write_summary(
                    {**summary, "status": "failed", "error": message, "finished_at": finished}
                )
                break
            except (RuntimeError, ValueError, OSError):
                time.sleep(0.1)
        # Should the main thread get going again, it records the same verdict.
        summary.update(status="failed", error=message)
        if not outcomes.report_end(message, "stalled") and info.is_main:
            print(f"trainscope: error: {one_line(message)}", file=sys.stderr, flush=True)
        # Leave in order, each rank's verdict written first: rank 0 hosts the store the
        # other watchdogs read, so it waits for them to reach theirs; the others wait for
        # rank 0, whose collective would otherwise fail with a lost connection first.
        time.sleep(2 * watchdog.poll_s + (1 if info.is_main else 3))
        os._exit(STALL_EXIT)

    store = dist.distributed_c10d._get_default_store()
    watchdog = StallWatchdog(
        store, info.rank, info.world_size, Progress(), cfg.dist.stall_timeout_s, on_stall
    )
    return watchdog


def describe_failure(e: BaseException) -> str:
    """The ``error`` of a failed run's summary: what ended it, in one line."""
    if isinstance(e, KeyboardInterrupt):
        return "interrupted by the user (Ctrl-C)"
    if isinstance(e, Terminated):
        return f"{e} (the run was stopped from outside)"
    text = " ".join(str(e).split())  # one line, whatever the exception holds
    if any(mark in text for mark in PEER_LOST):
        # A collective failed because another rank went away: this rank is not the cause.
        return f"{PEER_LOST_TEXT} ({type(e).__name__}: {text[:300]})"
    return text if isinstance(e, TrainscopeError) else f"{type(e).__name__}: {text}"


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
    progress: Any = None,
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
        progress=progress,
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
    n_train = _num_samples(workload.train_set)
    if n_train and cfg.data.batch_size > n_train and not cfg.data.drop_last:
        # As in PyTorch: the whole training set is one (short) batch per epoch; say so.
        note = f"batch size {cfg.data.batch_size} > {n_train} training samples: one batch per epoch"
        summary["notes"] = [*summary.get("notes", []), note]
        console.note(note)
    shard = {"rank": info.rank, "world_size": info.world_size}
    train_loader = make_loader(
        workload.train_set, cfg.data, train=True, batch_size=local_batch, **shard, **loader_args
    )
    # Data-only runs measure the input pipeline alone: no validation, no test. Every rank
    # evaluates the whole split (the same figures everywhere; FSDP needs all ranks anyway).
    val_loader = (
        make_loader(workload.val_set, cfg.data, train=False, **loader_args)
        if _has_samples(workload.val_set) and not cfg.train.data_only
        else None
    )
    if val_loader is None and not cfg.train.data_only:
        # Never a loss of 0 / accuracy of 0 from an empty split: say there is none.
        summary["notes"] = [*summary.get("notes", []), NO_VALIDATION]
        console.note(NO_VALIDATION)
    timer = make_stage_timer(device, cfg.runtime.timing)
    if progress is not None:
        timer = ProgressTimer(timer, progress)
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

    step_records: list[dict[str, Any]] = []  # kept for the steady-state figures

    def on_steps(records: list[dict[str, Any]]) -> None:
        step_records.extend({"batch_size": r["batch_size"], "stages": r["stages"]} for r in records)
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
            origin=t_start,
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
            "t_start": res.t_start,
            "t_end": res.t_end,
        }
        last = e + 1 == cfg.train.epochs
        if val_loader is not None and ((e + 1) % cfg.train.eval_every == 0 or last):
            t0 = time.perf_counter()
            val = evaluate(state, workload, val_loader)
            device_sync(device)
            stages["evaluation"] += time.perf_counter() - t0
            row.update(val_t=t0 - t_start, val_s=time.perf_counter() - t0)
            row.update(val_loss=val["loss"], val_accuracy=val.get("accuracy"))
            row.update({k: v for k, v in val.items() if k in ("perplexity",)})
        epochs.append(row)
        writer.log("epoch", **row)
        writer.flush()
        sinks.log_epoch(row)
        console.epoch_end(row)

    # --- final test evaluation -------------------------------------------------------
    test = None
    if _has_samples(workload.test_set) and not cfg.train.data_only:
        t0 = time.perf_counter()
        test_loader = make_loader(workload.test_set, cfg.data, train=False, **loader_args)
        test = evaluate(state, workload, test_loader)
        device_sync(device)
        stages["evaluation"] += time.perf_counter() - t0
        writer.log("test", t=t0 - t_start, seconds=time.perf_counter() - t0, **test)

    device_sync(device)
    if not strategy.comm_stage:
        stages.pop("comm")  # no separate communication stage: it is inside backward
    # wall_time_s: from the run's start (after interpreter start-up and imports) to the end
    # of its last evaluation; the stages partition it. Saving weights and writing the
    # summary come after it (see "after_wall_s"); the process time adds the start-up.
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
        steady_state=steady_state(
            step_records, cfg.runtime.timing_warmup_steps, scale=_throughput_scale(strategy)
        ),
    )
    summary["process"]["time_s"] = summary["process"]["startup_s"] + wall
    if device.type == "cuda":
        summary["peak_memory_bytes"] = torch.cuda.max_memory_allocated(device)
        summary["peak_memory_kind"] = "cuda_max_allocated"
    else:
        summary["peak_memory_bytes"] = summary["peak_rss_bytes"]
        summary["peak_memory_kind"] = "process_peak_rss"
    _throughput_figures(summary, workload, device, cfg.runtime.precision, info.world_size)
    _gather_ranks(summary, info)
    if cfg.train.save_weights and not cfg.train.data_only:
        t0 = time.perf_counter()
        _save(writer, state, strategy, workload, summary)
        summary["after_wall_s"] = {"save_weights": time.perf_counter() - t0}


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
    if not workload.flops_per_sample:
        summary["mfu_note"] = "the workload states no FLOPs per sample"
        return
    summary["flops_per_sample"] = workload.flops_per_sample
    from trainscope.profiling.peak import ENV_VAR, mfu, peak_flops

    peak = peak_flops(device, precision)
    summary["peak_flops_per_device"] = peak
    # Every rank's device contributes its peak: MFU is achieved / (peak x devices).
    summary["mfu"] = mfu(workload.flops_per_sample, rate, peak * world) if rate and peak else None
    if peak is None:
        summary["mfu_note"] = (
            f"no known peak FLOP/s for {device.type} at {precision}; set {ENV_VAR} to give one"
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
    writer: RunWriter, state: TrainState, strategy: Strategy, workload: Workload, summary: dict
) -> None:
    """model.safetensors (+ the workload's artifacts as JSON), written by rank 0.

    Every rank calls this: gathering FSDP's shards into full tensors is a collective.
    """
    full = strategy.full_state_dict(state.model)
    if not strategy.info.is_main:
        return
    skip = ranks.tied_duplicates(strategy.unwrap(state.model))
    path = writer.run_dir / "model.safetensors"
    summary["weights"] = {"file": path.name, "bytes": ranks.save_weights(path, full, skip)}
    artifacts = {f"{name}.json": obj for name, obj in workload.artifacts.items()}
    writer.record(*artifacts)  # listed first: what --overwrite may remove later
    for file, obj in artifacts.items():
        atomic_write_json(writer.run_dir / file, obj)
