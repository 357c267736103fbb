"""A run record around code trainscope did not write: the script runner's session.

:class:`ProfileSession` claims the run directory, starts the clock, the hooks and the
system sampler, and at the end writes the same record a native run writes
(``summary.json``, ``metrics.jsonl``, ``system.jsonl``, ``env.json``), with
``source: {kind: "script", ...}`` saying what ran. ``trainscope profile`` runs a script
inside one (:mod:`trainscope.script.profile`); ``with trainscope.profile(out=...)`` wraps
any code in a notebook.
"""

from __future__ import annotations

import os
import re
import socket
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch

from trainscope import registry
from trainscope.injections import INJECTIONS
from trainscope.profiling.memory import METHOD
from trainscope.profiling.system import SystemSampler, clock_origin, peak_rss_bytes, process_start
from trainscope.records import OwnedDir, RunWriter, prepare_run_dir
from trainscope.records.run_dir import output_root
from trainscope.records.steady_state import steady_state
from trainscope.runtime.device import describe_environment, device_name
from trainscope.runtime.threads import CpuMeter, ThreadPlan, usable_cores
from trainscope.script import ranks
from trainscope.script.clock import HostTicks, StageClock, stage_totals
from trainscope.script.hooks import ScriptHooks
from trainscope.script.inject import Injector
from trainscope.strategies.base import grad_layout
from trainscope.train.failures import describe, machine_cause
from trainscope.train.record import (
    MemoryFigures,
    Results,
    RunFacts,
    RunSummary,
    SetupFacts,
    Throughput,
    now_utc,
)

DEFAULT_WARMUP_STEPS = 5
"""As ``trainscope run``'s ``--timing-warmup-steps``: the first steps kept out of the
steady-state figures."""
OTHER_HOLDS = (
    "the script's own code between the stages trainscope times: batches made without a "
    "DataLoader (a get_batch()), copies to the device outside the model, a loss computed "
    "outside a module, logging, learning-rate arithmetic of its own (a torch scheduler's "
    "step is the optimizer's), and its own imports and set-up after the first stage"
)
NO_STEP = "no training step seen: no optimizer stepped"


@dataclass
class ProfileOptions:
    """How a script is measured (the ``trainscope profile`` flags)."""

    out: str | None = None
    overwrite: bool = False
    steps: int | None = None
    """End the script cleanly after this many training steps (None: let it finish)."""
    warmup_steps: int = DEFAULT_WARMUP_STEPS
    threads: int | None = None
    """torch's intra-op threads for the script (None: as the script leaves them)."""
    log_every: int = 10
    """Steps between reads of the losses and stage times (one device sync each on CUDA)."""
    memory_at: int = 2
    system_interval_s: float = 1.0
    injected: dict[str, Any] = field(default_factory=dict)
    """``--inject``'s settings, read (:func:`trainscope.injections.parse_injections`)."""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def script_threads(self) -> int | None:
        """The threads to set: ``--threads`` or ``--inject threads=N``."""
        return self.threads if self.threads is not None else self.injected.get("threads")


def default_out(stem: str) -> Path:
    """runs/<script>-<UTC timestamp> for a profile without --out."""
    name = re.sub(r"[^\w.-]+", "_", stem) or "script"
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    return output_root() / f"{name}-{stamp}"


def _precision(hooks: ScriptHooks) -> str:
    """What the training model computed in: its parameters' dtype, and autocast's."""
    dtype = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}
    base = dtype.get(hooks.param_dtype or "", hooks.param_dtype or "unknown")
    if hooks.autocast:
        return f"{base} + autocast {dtype.get(hooks.autocast, hooks.autocast)}"
    return base


def _strategy(hooks: ScriptHooks, world: int) -> str:
    """The parallel wrapper the training model was in, by its class."""
    names = {type(r).__name__ for r in hooks.roots}
    if "DistributedDataParallel" in names:
        return "ddp"
    if "DataParallel" in names:
        return "dp"
    if names & {"FullyShardedDataParallel", "FSDPModule"} or any(
        type(r).__name__.startswith("FSDP") for r in hooks.roots
    ):
        return "fsdp"
    return "single" if world == 1 else "script"


class ProfileSession:
    """One measured stretch of the user's code, from :meth:`begin` to :meth:`end`."""

    def __init__(self, options: ProfileOptions, source: dict[str, Any], stem: str,
                 hooks_class: type[ScriptHooks] = ScriptHooks) -> None:  # fmt: skip
        """``hooks_class``: what learns where the time goes (the global hooks; an
        integration's subclass is fed by its framework's events instead)."""
        self.options = options
        self.hooks_class = hooks_class
        self.source = source
        self.stem = stem
        self.place = ranks.Placement.from_env()
        self.t_start = time.perf_counter()
        self.owned: OwnedDir | None = None
        self.hooks: ScriptHooks | None = None
        self.steps: list[dict[str, Any]] = []
        # --inject's settings: one that cannot apply here is refused now, before any run
        self.injector = Injector(options.injected)

    @property
    def run_dir(self) -> Path:
        assert self.owned is not None
        return self.owned.path if self.place.rank == 0 else self.owned.path.parent.parent

    def claim(self) -> Path:
        """The run directory, claimed (rank 0) or found (the other ranks); nothing is
        measured yet. Refusals (an existing folder, no --out for several ranks) come here."""
        # Absolute: the script may change directory, and the record must not follow it.
        out = str(Path(self.options.out).absolute()) if self.options.out else None
        if self.place.world_size > 1:
            self.owned = ranks.claim(self.place, out, self.options.overwrite)
        else:
            where = out or default_out(self.stem).absolute()
            self.owned = prepare_run_dir(where, self.options.overwrite)
        return self.run_dir

    def begin(self) -> None:
        """Start measuring: the record opened ``running``, the hooks and sampler in place."""
        if self.owned is None:
            self.claim()
        assert self.owned is not None
        opts = self.options
        if opts.script_threads is not None:
            torch.set_num_threads(opts.script_threads)
        self.writer = RunWriter(self.owned)
        if self.place.rank == 0:
            self.writer.write_env(describe_environment(torch.device("cpu")))
        self.record = RunSummary(self.writer, self._facts())
        source = dict(self.source)
        if opts.injected:
            source["injected"] = dict(opts.injected)
            # the keys that change the numbers the script computes, not only its speed
            source["injected_numerics"] = [k for k in opts.injected if INJECTIONS[k].numerics]
        if self.place.world_size > 1:  # what the other ranks wait for (script.ranks)
            source["launch"] = self.place.token
        self.record._put("source", source=source)  # noqa: SLF001 (its section)
        self.record.write()
        self.cpu = CpuMeter(self._thread_plan())
        self.clock = StageClock(HostTicks(), self.t_start)
        self.hooks = self.hooks_class(
            self.clock, on_steps=self._on_steps, log_every=opts.log_every,
            max_steps=opts.steps, memory_at=1 if opts.steps == 1 else opts.memory_at,
        )  # fmt: skip
        self.sampler = SystemSampler(
            self.writer.run_dir / "system.jsonl", opts.system_interval_s,
            gpus=torch.cuda.is_available(), origin=self.t_start, probe=self.cpu.tick,
        )  # fmt: skip
        self.sampler.__enter__()
        self.hooks.injected = self.injector.model if self.injector.model.wanted else None
        self.hooks.install()
        self.injector.install()

    def _facts(self) -> RunFacts:
        return RunFacts(
            workload=f"script:{self.stem}", device="cpu",
            device_name=device_name(torch.device("cpu")), precision="unknown", batch_size=0,
            loader="script", num_workers=0, data_only=False,
            started_at=now_utc(), strategy="single" if self.place.world_size == 1 else "script",
            world_size=self.place.world_size, rank=self.place.rank,
            clock=clock_origin(self.t_start), process=process_start(self.t_start),
        )  # fmt: skip

    def _thread_plan(self) -> ThreadPlan:
        n = torch.get_num_threads()
        given = self.options.script_threads
        source = (
            self._threads_source(given)
            if given is not None
            else f"the script's own ({n} at its start)"
        )
        return ThreadPlan(n, given if given is not None else n, source, usable_cores(),
                          self.place.local_world_size)  # fmt: skip

    def _threads_source(self, given: int) -> str:
        return (
            f"--threads {given}"
            if self.options.threads is not None
            else f"--inject threads={given}"
        )

    def _on_steps(self, records: list[dict[str, Any]]) -> None:
        for r in records:
            self.writer.log("step", epoch=1, lr=None, **r)
        self.writer.flush()
        self.steps.extend({"batch_size": r["batch_size"], "stages": r["stages"]} for r in records)
        self.first_losses = getattr(self, "first_losses", [])
        for r in records:
            if len(self.first_losses) < 5 and r["loss"] is not None:
                self.first_losses.append(r["loss"])

    def end(self, error: BaseException | None = None, *, status: str | None = None,
            note: str | None = None) -> dict[str, Any]:  # fmt: skip
        """Stop measuring and write the record: ``error`` ended the code (None: it ran
        to its end), ``status`` overrides (``completed`` for ``--steps``); ``note`` goes
        into the record's notes. Returns the summary."""
        hooks = self.hooks
        assert hooks is not None
        end = self.clock.close()  # the wall ends at the clock's last boundary
        hooks.remove()
        self.injector.remove(hooks.device)
        for text in self.injector.notes():
            self.record.note(text)
        try:
            hooks.flush(block=True)
        except Exception as e:  # a loss the device cannot give back (it failed): say so
            self.record.note(f"the last steps' losses could not be read: {type(e).__name__}")
            self.clock.resolve(block=True)
        totals = self.clock.totals
        self.sampler.__exit__(None, None, None)
        wall = end - self.t_start
        self._figures(wall, totals)
        if note:
            self.record.note(note)
        if error is not None and status is None:
            self.record.fail(describe(error, machine_cause(error)))
        elif status == "failed":
            self.record.fail(note or "failed")
        else:
            self.record.complete()
        self.record.set_system(self.sampler.summary())
        self.record.end()
        self.writer.close()
        if self.place.rank == 0:
            self.writer.write_env(describe_environment(hooks.device or torch.device("cpu")))
        self.record.set_ranks(ranks.gather(self.place, self.run_dir, self.record.to_dict()))
        self.record.write()
        self.owned.release() if self.owned is not None else None
        return self.record.to_dict()

    def _figures(self, wall: float, totals: dict[str, float]) -> None:
        """Results, setup facts, memory and CPU into the record."""
        hooks, record = self.hooks, self.record
        assert hooks is not None
        facts = record.facts
        device = hooks.device or torch.device("cpu")
        facts.device, facts.device_name = str(device), device_name(device)
        if hooks.autocast is None and self.injector.model.autocast_forwards:
            hooks.autocast = "bfloat16"  # --inject precision=bf16 (the only one it takes)
        facts.precision = _precision(hooks) if hooks.roots else "unknown"
        facts.strategy = _strategy(hooks, self.place.world_size)
        train_loaders = [v for v in hooks.loaders if v["training"]]
        if train_loaders:
            facts.loader, facts.num_workers = "torch", int(train_loaders[0]["num_workers"])
        sizes = sorted(s["batch_size"] for s in self.steps if s["batch_size"])
        facts.batch_size = sizes[len(sizes) // 2] if sizes else 0
        train_time = sum(sum(s["stages"].values()) for s in self.steps)
        samples = sum(int(s["batch_size"] or 0) for s in self.steps)
        # Ranks that each train on their share of the batch: throughput is all of theirs.
        entry = registry.STRATEGIES.get(facts.strategy)
        shares = entry is not None and entry.multiprocess and entry.splits_batch
        scale = self.place.world_size if shares else 1
        record.set_setup(self._setup_facts(hooks, facts.batch_size))
        results = Results(
            wall_time_s=wall, train_time_s=train_time, stages_s=stage_totals(totals, wall),
            steps=len(self.steps), samples=samples,
            samples_per_s=samples * scale / train_time if train_time > 0 else None,
            epochs=[], first_losses=getattr(self, "first_losses", []), skipped_steps=0,
            test_loss=None, test_accuracy=None, test_metrics=None, per_class_accuracy=None,
            peak_rss_bytes=peak_rss_bytes(), comm=None,
            steady_state=steady_state(self.steps, self.options.warmup_steps, scale=scale),
        )  # fmt: skip
        record.set_results(results, own_wall_s=wall)
        if device.type == "cuda":
            peak, kind = torch.cuda.max_memory_allocated(device), "cuda_max_allocated"
        else:
            peak, kind = results.peak_rss_bytes, "process_peak_rss"
        memory = hooks.memory_section(METHOD)
        record.set_memory(MemoryFigures(peak, kind, {**memory, "checkpointing": None}))
        record.set_throughput(Throughput(mfu_note="a script states no FLOPs per sample"))
        self.cpu.plan = self._thread_plan()  # the threads the script ended with
        record.set_cpu(self.cpu.section(workers=facts.num_workers if train_loaders else 0))
        record._put("script", script=self._script_section(hooks, totals))  # noqa: SLF001
        if not self.steps:
            record.note(f"{NO_STEP}: what was measured is in stages_s")

    def _setup_facts(self, hooks: ScriptHooks, batch: int) -> SetupFacts:
        root = hooks.roots[0] if hooks.roots else None
        model = getattr(root, "module", root)  # DDP's and DataParallel's own model
        lead = hooks.optimizers[0] if hooks.optimizers else None
        return SetupFacts(
            model=type(model).__name__ if model is not None else None,  # type: ignore[arg-type]
            num_parameters=sum(p.numel() for r in hooks.roots for p in r.parameters()),
            workload_description=f"the user's script {self.source.get('argv', [''])[0]}",
            workload_info=None, task=None, timing_mode=self.clock.ticks.kind,  # type: ignore[attr-defined]
            train_samples=None, local_batch_size=batch,  # type: ignore[arg-type]
            lr=float(lead.param_groups[0]["lr"]) if lead is not None else None,  # type: ignore[arg-type]
            parallel={"strategy": _strategy(hooks, self.place.world_size),
                      "world_size": self.place.world_size},
            gradients=grad_layout(model) if model is not None else {"tensor_bytes": [],
                                                                    "unit_bytes": []},
        )  # fmt: skip

    def _script_section(self, hooks: ScriptHooks, totals: dict[str, float]) -> dict[str, Any]:
        """What the hooks saw: optimizers and their step counts, models, loaders, and what
        ``other`` holds."""
        return {
            "optimizer_steps": hooks.optimizer_counts(),
            "optimizers": hooks.optimizer_rows(),
            "models": [type(r).__name__ for r in hooks.roots],
            "loaders": list(hooks.loaders),
            "setup_ends_s": self.clock.setup_end_s,
            "tail_s": self.clock.tail(),
            "other_holds": OTHER_HOLDS,
            "steps_limit": self.options.steps,
            "log_every": self.options.log_every,
            "step_records": len(self.steps),
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "local_rank": self.place.local_rank,
            # --inject's keys: what each loader, optimizer and the model was given and got
            **self.injector.record(),
        }


__all__ = ["DEFAULT_WARMUP_STEPS", "NO_STEP", "OTHER_HOLDS", "ProfileOptions", "ProfileSession"]
