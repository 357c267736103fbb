"""One run, start to finish: check, set up, train, evaluate, and leave a complete run record."""

from __future__ import annotations

import os
import re
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch

from trainscope.config import RunConfig, TrainConfig
from trainscope.data.loaders import make_loader
from trainscope.precision import make_precision
from trainscope.profiling.system import SystemSampler, peak_rss_bytes
from trainscope.profiling.timer import device_sync, make_stage_timer
from trainscope.records import STAGES, RunWriter, prepare_run_dir
from trainscope.runtime import describe_environment, resolve_device, seed_everything
from trainscope.runtime.device import device_name
from trainscope.tracking import Sinks, make_sinks
from trainscope.train.console import RunConsole
from trainscope.train.loop import TrainState, data_step, evaluate, train_epoch, train_step
from trainscope.workloads import build_workload

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
    """
    console = console or RunConsole(enabled=False)
    t_start = time.perf_counter()
    device = resolve_device(cfg.runtime.device)
    precision = make_precision(cfg.runtime.precision, device)
    sinks = make_sinks(cfg.runtime.track)  # a missing package refuses the run up front
    run_dir = prepare_run_dir(cfg.out or default_out(cfg), cfg.overwrite)
    writer = RunWriter(run_dir)
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
    }
    writer.write_summary(summary)  # a killed run leaves "running", never "completed"
    console.start(run_dir, summary)
    sinks.start(run_dir, cfg.to_dict(), summary)
    sampler = SystemSampler(
        run_dir / "system.jsonl",
        cfg.runtime.system_interval_s,
        gpus=device.type == "cuda",
        on_sample=sinks.log_system,
    )
    try:
        with sampler:
            _train(cfg, device, precision, writer, summary, console, t_start, sinks)
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


def _train(
    cfg: RunConfig,
    device: torch.device,
    precision: Any,
    writer: RunWriter,
    summary: dict[str, Any],
    console: RunConsole,
    t_start: float,
    sinks: Sinks,
) -> None:
    """The body of a run; fills ``summary`` as results come in."""
    stages = dict.fromkeys(STAGES, 0.0)

    # --- setup: data and model -------------------------------------------------------
    seed_everything(cfg.train.seed)
    workload = build_workload(cfg.workload, cache_dir())
    model = workload.model.to(device)
    state = TrainState(
        model=model,
        optimizer=build_optimizer(cfg.train, model.parameters()),
        precision=precision,
        loss_fn=workload.loss_fn,
        device=device,
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
    train_loader = make_loader(
        workload.train_set, cfg.data, train=True, device=device, num_workers=workers
    )
    # Data-only runs measure the input pipeline alone: no validation, no test.
    val_loader = (
        make_loader(workload.val_set, cfg.data, train=False, device=device, num_workers=workers)
        if workload.val_set is not None and not cfg.train.data_only
        else None
    )
    timer = make_stage_timer(device, cfg.runtime.timing)
    summary.update(
        model=type(model).__name__,
        num_parameters=sum(p.numel() for p in model.parameters()),
        workload_description=workload.description,
        timing_mode=timer.kind,
        train_samples=len(workload.train_set),
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
            "samples_per_s": res.samples / res.duration_s if res.duration_s > 0 else None,
            "loader_start_s": res.loader_start_s,
        }
        last = e + 1 == cfg.train.epochs
        if val_loader is not None and ((e + 1) % cfg.train.eval_every == 0 or last):
            t0 = time.perf_counter()
            val = evaluate(state, workload, val_loader)
            device_sync(device)
            stages["evaluation"] += time.perf_counter() - t0
            row.update(val_loss=val["loss"], val_accuracy=val["accuracy"])
        epochs.append(row)
        writer.log("epoch", **row)
        writer.flush()
        sinks.log_epoch(row)
        console.epoch_end(row)

    # --- final test evaluation -------------------------------------------------------
    test = None
    if workload.test_set is not None and not cfg.train.data_only:
        t0 = time.perf_counter()
        test_loader = make_loader(
            workload.test_set, cfg.data, train=False, device=device, num_workers=workers
        )
        test = evaluate(state, workload, test_loader)
        device_sync(device)
        stages["evaluation"] += time.perf_counter() - t0
        writer.log("test", **test)

    device_sync(device)
    wall = time.perf_counter() - t_start
    stages["other"] = wall - sum(v for k, v in stages.items() if k != "other")
    summary.update(
        wall_time_s=wall,
        train_time_s=train_time,
        stages_s=stages,
        steps=steps,
        samples=samples,
        samples_per_s=samples / train_time if train_time > 0 else None,
        epochs=epochs,
        first_losses=first_losses,
        skipped_steps=precision.skipped_steps,
        test_loss=test["loss"] if test else None,
        test_accuracy=test["accuracy"] if test else None,
        per_class_accuracy=(
            dict(zip(workload.class_names, test["per_class_accuracy"])) if test else None
        ),
        peak_rss_bytes=peak_rss_bytes(),
    )
    if device.type == "cuda":
        summary["peak_memory_bytes"] = torch.cuda.max_memory_allocated(device)
        summary["peak_memory_kind"] = "cuda_max_allocated"
    else:
        summary["peak_memory_bytes"] = summary["peak_rss_bytes"]
        summary["peak_memory_kind"] = "process_peak_rss"
