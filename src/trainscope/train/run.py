"""One run, start to finish: check, claim the run directory, and leave a complete record
of however it ends; the training itself is :class:`~trainscope.train.trainer.Trainer`."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import signal
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch

from trainscope import registry
from trainscope.config import RunConfig
from trainscope.errors import ConfigError, Preempted, TrainscopeError
from trainscope.profiling.system import SystemSampler, clock_origin, process_start
from trainscope.records import OwnedDir, RunWriter, launch_outcomes, prepare_run_dir, reopen_run_dir
from trainscope.records.run_dir import output_root, try_summary
from trainscope.runtime.device import describe_environment, device_name, resolve_device
from trainscope.runtime.dist import (
    DistInfo,
    destroy_distributed,
    init_distributed,
    rank_device,
    under_torchrun,
)
from trainscope.runtime.scheduler import scheduler_record
from trainscope.runtime.signals import (
    ignored,
    preemption_noted,
    preemption_signals,
    signals_deferred,
)
from trainscope.runtime.threads import CpuMeter, apply_threads, plan_run_threads
from trainscope.runtime.watchdog import Progress, StallWatchdog
from trainscope.strategies import make_strategy, strategy_options
from trainscope.techniques.precision import make_precision
from trainscope.tracking import make_sinks
from trainscope.train import failures, preemption, ranks
from trainscope.train.console import RunConsole
from trainscope.train.parts import RunContext
from trainscope.train.record import RunFacts, RunSummary, now_utc
from trainscope.train.resume import earlier_attempts, how_it_ended, precheck
from trainscope.train.trainer import train
from trainscope.util.textsafe import one_line
from trainscope.workloads import check_options


def default_out(cfg: RunConfig) -> Path:
    """runs/<workload>-<UTC timestamp> for runs without --out (runs/: see output_root)."""
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
    if registry.STRATEGIES[cfg.dist.strategy].multiprocess:
        info = init_distributed(cfg.dist.backend, device.type, cfg.dist.timeout_s)
    elif under_torchrun() and int(os.environ["WORLD_SIZE"]) > 1:
        raise ConfigError(
            f"strategy {cfg.dist.strategy} runs in one process; under torchrun with several "
            f"processes use one of {', '.join(registry.multiprocess_names())}"
        )
    # Threads are set before any parallel op, for this process's share of the cores, and
    # given back after: a notebook or a study keeps its own setting.
    caller_threads = torch.get_num_threads()
    threads = plan_run_threads(cfg.runtime.threads, info.local_world_size)
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
    registry.precheck_strategy(cfg)  # as the launcher does: for a user's own torchrun
    strategy = make_strategy(cfg.dist.strategy, info, device, strategy_options(cfg.dist))
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
    late: tuple[int, ...] = ()
    if preemption.armed(cfg):  # a scheduler's signal checkpoints and stops it
        ctx.stop_vote = preemption.StopVote(info, device)
        # Outside training (its last record), a pre-timeout signal must not kill it.
        late = tuple(s for s in preemption_signals() if s != signal.SIGTERM)
    try:
        with ignored(late):
            return _record(ctx, owned)
    finally:
        owned.release()  # the lock goes with the last write, and with the process anyway


def _record(ctx: RunContext, owned: OwnedDir) -> dict[str, Any]:
    """The run inside its (locked) directory: every way it ends is written to the record."""
    cfg, info, sinks = ctx.cfg, ctx.info, ctx.sinks
    run_dir = owned.path if info.is_main else owned.path.parent.parent
    launch_outcomes.note_run_dir(run_dir)
    if cfg.resume:
        _continue_from(ctx, try_summary(owned.path / "summary.json"))
    writer = RunWriter(owned, ctx.attempt)
    if info.is_main and not cfg.resume:  # (a resumed run saves it once the checkpoint fits)
        # Saved without out/overwrite: rerunning config.yaml makes a fresh run directory.
        writer.write_config(cfg.saved_dict())
        writer.write_env(describe_environment(ctx.device))
        writer.record(dirs=sinks.folders())
    # What is in the sinks' folders now is not theirs (an earlier run's leftovers kept by
    # the claim, or a user's): only what appears during the run is recorded as written.
    sink_files_before = {folder: owned.tree(folder) for folder in sinks.folders()}
    record = _open_record(ctx, writer)
    _announce(ctx, run_dir, record)
    try:
        _train(ctx, writer, record)
    finally:
        ctx.console.stop()  # the progress bar or lines of an epoch a failure cut short
        _close_record(ctx, writer, record)
        if sinks:
            _finish_sinks(ctx, record, owned, sink_files_before)
        if record.status == "preempted" and cfg.dist.requeue and info.is_main:
            _requeue(record)
    summary = record.to_dict()
    ctx.console.finish(summary, run_dir if info.is_main else None)
    return summary


def _open_record(ctx: RunContext, writer: RunWriter) -> RunSummary:
    """The run's summary with the facts known before it trains, written at once: a
    killed run leaves "running", never "completed"."""
    cfg, device, info = ctx.cfg, ctx.device, ctx.info
    facts = RunFacts(
        workload=cfg.workload.name,
        device=str(device),
        device_name=device_name(device),
        precision=ctx.precision.name,
        batch_size=cfg.data.batch_size,
        loader=cfg.data.loader,
        num_workers=cfg.data.num_workers,
        data_only=cfg.train.data_only,
        started_at=(ctx.previous or {}).get("started_at") or now_utc(),
        strategy=ctx.strategy.name,
        world_size=info.world_size,
        rank=info.rank,
        clock=clock_origin(ctx.origin if ctx.origin is not None else ctx.t_start),
        process=process_start(ctx.t_start),
        scheduler=scheduler_record(os.environ),
    )
    record = RunSummary(writer, facts)
    if cfg.resume:  # where it goes on from is filled in when the checkpoint loads
        by = "torchrun restart" if ctx.restarted else "--resume"
        ended = how_it_ended([ctx.previous])
        record.begin_attempt(
            earlier_attempts(ctx.previous or {}, ended),
            {"attempt": ctx.attempt, "started_at": now_utc(), "by": by},
        )
    record.write()
    return record


def _announce(ctx: RunContext, run_dir: Path, record: RunSummary) -> None:
    """The run's start, to the console and the tracking sinks."""
    console = ctx.console
    summary = record.to_dict()
    console.start(run_dir, summary)
    note = ctx.strategy.describe().get("note")  # e.g. DataParallel on a single device
    if note:
        console.note(note)
    if ctx.cpu is not None:
        crowded = ctx.cpu.plan_note()  # more threads than cores before any other load
        if crowded:
            console.note(crowded)
    ctx.sinks.start(run_dir, ctx.cfg.to_dict(), summary)


def _train(ctx: RunContext, writer: RunWriter, record: RunSummary) -> None:
    """Train, the system sampled meanwhile; how it ended goes into the record."""
    cfg = ctx.cfg
    sampler = SystemSampler(
        writer.run_dir / "system.jsonl",
        cfg.runtime.system_interval_s,
        gpus=ctx.device.type == "cuda",
        on_sample=ctx.sinks.log_system,
        origin=ctx.origin,
        probe=ctx.cpu.tick if ctx.cpu is not None else None,
    )
    watchdog = _stall_watchdog(cfg, ctx.info, record)
    noted = (preemption_noted(preemption_signals()) if ctx.stop_vote is not None
             else contextlib.nullcontext())  # fmt: skip
    try:
        with sampler, watchdog, noted:
            watch = getattr(watchdog, "progress", None)  # multi-process runs only
            train(ctx, writer, record, watch)
        record.set_system(sampler.summary())
        record.complete()  # unless the stall watchdog has ended the run
    except Preempted as e:
        with signals_deferred():
            record.stop(e.status, str(e), {"signal": e.signame, "step": e.step,
                                           "checkpoint": e.checkpoint})  # fmt: skip
            record.set_system(sampler.summary())
        raise
    except BaseException as e:
        with signals_deferred():  # a second failure must not cut this record short
            explained = failures.explain(e, cfg, watchdog)  # the user's or machine's cause
            record.fail(failures.describe(e, explained))  # unless the watchdog said why
            record.set_system(sampler.summary())
            if ctx.cpu is not None and record.cpu is None:  # ended before its figures
                record.set_cpu(ctx.cpu.section(workers=_int_or_zero(record.facts.num_workers)))
        if explained:
            raise TrainscopeError(explained) from e
        raise


def _close_record(ctx: RunContext, writer: RunWriter, record: RunSummary) -> None:
    """The record completed before any upload waits."""
    # A signal now would cut the last write short and leave the record "running": it
    # waits until the record is complete.
    with signals_deferred():
        record.end()
        writer.close()
        if ctx.sinks:
            record.set_tracking(ctx.sinks.describe())
        record.write()
        ctx.precision.close()


def _requeue(record: RunSummary) -> None:
    """Ask SLURM to run the job again (it resumes from the checkpoint just written); the
    answer goes into the record first, as SLURM ends this job's processes next."""
    with signals_deferred():
        answer = preemption.requeue()
        record.stop(record.status, str(record.error), {**(record.preemption or {}),
                                                       "requeue": answer})  # fmt: skip
        record.write()


def _finish_sinks(
    ctx: RunContext, record: RunSummary, owned: OwnedDir, files_before: dict[str, Any]
) -> None:
    """The tracking sinks' last uploads; what they wrote recorded as the run's."""
    sinks = ctx.sinks
    summary = record.to_dict()
    sinks.finish(summary)
    if sinks.warnings_list != summary["tracking"]["warnings"]:
        record.set_tracking(sinks.describe())  # finish() itself failed
        record.write()
    for folder in sinks.folders():  # only the sink knows the names it wrote
        owned.record_tree(folder, files_before.get(folder, set()))


# Exit status of a process ended by the stall watchdog.
STALL_EXIT = 3


def _stall_watchdog(cfg: RunConfig, info: DistInfo, record: RunSummary) -> Any:
    """A watchdog that ends every rank of a stalled multi-process run within the stall
    timeout, each with the verdict in its record; a no-op context for one process."""
    if info.world_size == 1:
        return contextlib.nullcontext()
    import torch.distributed as dist

    def on_stall(verdict: Any) -> None:
        # In the watchdog's thread, while the main thread may be stuck in a collective:
        # record, say it once, and leave without waiting for anything that may never come.
        message = f"stalled: {verdict.message()}"
        record.stall(message)
        if not launch_outcomes.report_end(message, "stalled") and info.is_main:
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
