"""One run, start to finish: check, claim the run directory, and leave a complete record
of however it ends; the training itself is :class:`~trainscope.train.trainer.Trainer`."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch

from trainscope import outcomes
from trainscope.config import MULTIPROCESS_STRATEGIES, RunConfig
from trainscope.errors import ConfigError, TrainscopeError
from trainscope.precision import make_precision
from trainscope.profiling.system import SystemSampler, clock_origin, process_start
from trainscope.records import OwnedDir, RunWriter, prepare_run_dir, reopen_run_dir
from trainscope.records.run_dir import try_summary
from trainscope.runtime import describe_environment, resolve_device
from trainscope.runtime.device import device_name
from trainscope.runtime.dist import (
    DistInfo,
    destroy_distributed,
    init_distributed,
    rank_device,
    under_torchrun,
)
from trainscope.runtime.threads import CpuMeter, apply_threads, plan_threads
from trainscope.signals import signals_deferred
from trainscope.strategies import make_strategy
from trainscope.textsafe import one_line
from trainscope.tracking import make_sinks
from trainscope.train import failures, ranks
from trainscope.train.console import RunConsole
from trainscope.train.resume import earlier_attempts, how_it_ended, precheck
from trainscope.train.trainer import (  # noqa: F401 (build_optimizer, compose, ... re-exported)
    NO_VALIDATION,
    RunContext,
    Trainer,
    build_optimizer,
    cache_dir,
    compose,
)
from trainscope.workloads import check_options


def default_out(cfg: RunConfig) -> Path:
    """runs/<workload>-<UTC timestamp> for runs without --out (runs/: see output_root)."""
    from trainscope.records.run_dir import output_root

    name = re.sub(r"[^\w.-]+", "_", cfg.workload.name)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    return output_root() / f"{name}-{stamp}"


def run(cfg: RunConfig, console: RunConsole | None = None) -> dict[str, Any]:
    """Train ``cfg`` and write its run directory; returns the summary.

    Every check that needs no data (device, precision, output directory) happens before
    the run directory is created, so a refused run leaves nothing behind. A run that fails
    after that point is recorded with ``status: failed`` and its error, then re-raised.

    Under torchrun (or with a multi-process strategy alone) this process joins the process
    group first; rank 0 writes the run record and every rank its ``ranks/rank<R>`` folder.
    """
    t_start = time.perf_counter()  # the run's clock origin: every "t" is relative to it
    restarted = _restarted_by_torchrun(cfg)
    if restarted:  # torchrun started every rank again after one failed: go on, in place
        cfg = dataclasses.replace(cfg, resume=True, overwrite=False)
    device = resolve_device(cfg.runtime.device)
    info = DistInfo()
    if cfg.dist.strategy in MULTIPROCESS_STRATEGIES:
        info = init_distributed(cfg.dist.backend, device.type, cfg.dist.timeout_s)
    elif under_torchrun() and int(os.environ["WORLD_SIZE"]) > 1:
        raise ConfigError(
            f"strategy {cfg.dist.strategy} runs in one process; under torchrun with several "
            f"processes use one of {', '.join(MULTIPROCESS_STRATEGIES)}"
        )
    # Threads are set before any parallel op, for this process's share of the cores, and
    # given back after: a notebook or a study keeps its own setting.
    caller_threads = torch.get_num_threads()
    threads = plan_threads(cfg.runtime.threads, info.local_world_size)
    apply_threads(threads)
    try:
        device = rank_device(device, info)
        return _run(cfg, console, device, info, t_start, restarted, CpuMeter(threads))
    finally:
        torch.set_num_threads(caller_threads)
        destroy_distributed(info)


def _restarted_by_torchrun(cfg: RunConfig) -> bool:
    """A worker that torchrun restarted (``--max-restarts``) after its run directory
    exists: it resumes instead of starting the run again."""
    if not under_torchrun() or int(os.environ.get("TORCHELASTIC_RESTART_COUNT") or 0) < 1:
        return False
    return cfg.out is not None and (Path(cfg.out) / "summary.json").is_file()


def _run(
    cfg: RunConfig,
    console: RunConsole | None,
    device: torch.device,
    info: DistInfo,
    t_start: float,
    restarted: bool = False,
    cpu: CpuMeter | None = None,
) -> dict[str, Any]:
    """:func:`run` once the process group (if any) exists."""
    console = console if console is not None and info.is_main else RunConsole(enabled=False)
    precision = make_precision(cfg.runtime.precision, device)
    strategy = make_strategy(cfg.dist.strategy, info, device, bucket_mb=cfg.dist.bucket_mb)
    strategy.local_batch_size(cfg.data.batch_size)  # an uneven split fails before any file
    check_options(cfg.workload)  # so does a bad workload option
    # Tracking sinks mirror rank 0 only; a missing package refuses the run up front.
    sinks = make_sinks(cfg.runtime.track if info.is_main else [], quiet=not console.enabled)
    if cfg.resume and cfg.out is None:
        raise ConfigError("a resumed run needs its run directory (--resume RUN_DIR)")
    run_dir, owned = ranks.agree_run_dir(
        info,
        (lambda: _reopen(cfg, info.world_size, restarted))
        if cfg.resume
        else (lambda: prepare_run_dir(cfg.out or default_out(cfg), cfg.overwrite)),
    )
    # Rank 0 writes the run directory itself; every other rank its ranks/rank<R> folder.
    if not info.is_main:
        owned = ranks.rank_dir(run_dir, info, resume=cfg.resume)
    assert owned is not None
    ctx = RunContext(cfg, device, info, t_start, precision, strategy, sinks, console)
    ctx.restarted = restarted
    ctx.cpu = cpu
    try:
        return _record(ctx, owned)
    finally:
        owned.release()  # the lock goes with the last write, and with the process anyway


def _record(ctx: RunContext, owned: OwnedDir) -> dict[str, Any]:
    """The run inside its (locked) directory: every way it ends is written to the record."""
    cfg, console, device, info = ctx.cfg, ctx.console, ctx.device, ctx.info
    precision, strategy, sinks = ctx.precision, ctx.strategy, ctx.sinks
    run_dir = owned.path if info.is_main else owned.path.parent.parent
    outcomes.note_run_dir(run_dir)
    if cfg.resume:
        _continue_from(ctx, try_summary(owned.path / "summary.json"))
    writer = RunWriter(owned, ctx.attempt)
    if info.is_main and not cfg.resume:  # (a resumed run saves it once the checkpoint fits)
        # Saved without out/overwrite: rerunning config.yaml makes a fresh run directory.
        writer.write_config(cfg.saved_dict())
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
        "started_at": (ctx.previous or {}).get("started_at")
        or datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "strategy": strategy.name,
        "world_size": info.world_size,
        "rank": info.rank,
        "clock": clock_origin(ctx.origin if ctx.origin is not None else ctx.t_start),
        "process": process_start(ctx.t_start),
    }
    if cfg.resume:  # filled in when the checkpoint is loaded (train.resume)
        by = "torchrun restart" if ctx.restarted else "--resume"
        ended = how_it_ended([ctx.previous])
        summary["attempts"] = [
            *earlier_attempts(ctx.previous or {}, ended),
            {"attempt": ctx.attempt, "started_at": _now(), "by": by},
        ]
    writer.write_summary(summary)  # a killed run leaves "running", never "completed"
    console.start(run_dir, summary)
    note = strategy.describe().get("note")  # e.g. DataParallel on a single device
    if note:
        console.note(note)
    if ctx.cpu is not None:
        crowded = ctx.cpu.plan_note()  # more threads than cores before any other load
        if crowded:
            console.note(crowded)
    sinks.start(run_dir, cfg.to_dict(), summary)
    sampler = SystemSampler(
        writer.run_dir / "system.jsonl",
        cfg.runtime.system_interval_s,
        gpus=device.type == "cuda",
        on_sample=sinks.log_system,
        origin=ctx.origin,
    )
    watchdog = _stall_watchdog(cfg, info, writer, summary, console)
    try:
        with sampler, watchdog:
            progress = getattr(watchdog, "progress", None)  # multi-process runs only
            Trainer(ctx, writer, summary, progress).run()
        summary["system"] = sampler.summary()
        if summary["status"] != "failed":  # unless the stall watchdog has ended the run
            summary["status"] = "completed"
    except BaseException as e:
        explained = failures.explain(e, cfg, watchdog)  # the user's or the machine's cause
        if summary["status"] != "failed":  # the stall watchdog may have said why already
            summary["error"] = failures.describe(e, explained)
        summary["status"] = "failed"
        summary["system"] = sampler.summary()
        if ctx.cpu is not None and "cpu" not in summary:  # ended before its figures
            summary["cpu"] = ctx.cpu.section(workers=_int_or_zero(summary.get("num_workers")))
        if explained:
            raise TrainscopeError(explained) from e
        raise
    finally:
        console.stop()  # the progress bar or lines of an epoch a failure cut short
        # A signal now would cut the last write short and leave the record "running": it
        # waits until the record is complete.
        with signals_deferred():
            summary["finished_at"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
            if summary.get("attempts"):  # a resumed run: how this attempt ended
                ended = summary["status"]
                if summary.get("error"):
                    ended = f"{ended}: {summary['error']}"
                summary["attempts"][-1].update(ended=ended, finished_at=summary["finished_at"])
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
    console.finish(summary, run_dir if info.is_main else None)
    return summary


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


def _int_or_zero(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _reopen(cfg: RunConfig, world_size: int, restarted: bool) -> OwnedDir:
    """Rank 0 of a resumed run: its directory locked again, and refused before anything
    in it is written if the newest checkpoint cannot be gone on from."""
    owned = reopen_run_dir(str(cfg.out))
    try:
        config = {**cfg.to_dict(), "out": None, "overwrite": False, "resume": False}
        precheck(owned.path, config, world_size, restarted)
    except BaseException:
        owned.release()
        raise
    return owned


def _continue_from(ctx: RunContext, previous: dict[str, Any]) -> None:
    """A resumed run goes on with the previous attempt's summary in hand: its attempt
    number follows, and its time axis goes on from the first attempt's origin."""
    ctx.previous = previous
    attempts = previous.get("attempts")
    ctx.attempt = len(attempts) + 1 if isinstance(attempts, list) and attempts else 2
    first = (previous.get("clock") or {}).get("unix_at_origin")
    if isinstance(first, (int, float)) and not isinstance(first, bool):
        now = clock_origin(ctx.t_start)["unix_at_origin"]
        ctx.origin = ctx.t_start - max(0.0, now - first)
