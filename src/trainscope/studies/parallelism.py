"""``study parallelism``: replicate the model or split it, at one global batch.

The configurations: ``single``; ``ddp`` and ``fsdp`` (the data split, the model whole or
sharded); the pipeline under each schedule at each microbatch count (``pp-gpipe-m4``,
``pp-1f1b-m8``, ``pp-interleaved-1f1b-m2``...); ``tp``, and ``tp-sp`` with sequence
parallelism; and the 2D layouts on twice the
processes: two data-parallel replicas of a pipeline (``dp2-pp``) and of tensor
parallelism (``dp2-tp``). Every configuration trains the same workload, seed and global
batch, each run in a process of its own (threads: this machine's cores shared out over
each run's processes, so every configuration has the same core budget); the report sets
step time, the pipeline's bubble against its theory, communication, and memory per rank
side by side.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trainscope.collectives.predict_cli import fits_of_study
from trainscope.config import PP_SCHEDULES, WorkloadConfig
from trainscope.errors import ConfigError
from trainscope.records.study_dir import PlannedRun
from trainscope.studies.base import (
    PlanRequest,
    PlanResult,
    name_list,
    positive,
    repeats_of,
    study_planner,
)
from trainscope.studies.strategies_model import world_notes
from trainscope.workloads import workload_layout

DEFAULT_MICROBATCHES = (2, 4, 8)

# Without a workload named on the command line or in --config: a 4-block character GPT
# with 4 heads (they split over 2 and 4 processes), a batch that 8 microbatches and 2
# replicas divide, in seconds per configuration on a CPU.
DEFAULT_WORKLOAD: dict[str, Any] = {
    "workload.name": "gpt-char",
    "workload.options.preset": "tiny",
    "workload.options.n_layer": 4,
    "workload.options.n_head": 4,
    "workload.options.dropout": 0.0,
    "data.batch_size": 32,
    "train.epochs": 1,
    "train.max_steps_per_epoch": 20,
}


def configurations(nproc: int, microbatches: tuple[int, ...], two_d: bool) -> dict[str, dict]:
    """Name -> run overrides of every configuration, in the order the report shows them."""
    out: dict[str, dict[str, Any]] = {"single": {"dist.strategy": "single", "dist.nproc": 1}}
    for name in ("ddp", "fsdp"):
        out[name] = {"dist.strategy": name, "dist.nproc": nproc}
    for schedule in PP_SCHEDULES:
        for m in microbatches:
            if schedule == "1f1b" and m < nproc:
                continue  # 1F1B needs at least as many microbatches as stages
            out[f"pp-{schedule}-m{m}"] = {
                "dist.strategy": "pipeline", "dist.nproc": nproc,
                "dist.pp_schedule": schedule, "dist.microbatches": m,
            }  # fmt: skip
    out["tp"] = {"dist.strategy": "tp", "dist.nproc": nproc}
    out["tp-sp"] = {"dist.strategy": "tp", "dist.nproc": nproc, "dist.sequence_parallel": True}
    if two_d:
        m = max(min(microbatches), nproc)
        out["dp2-pp"] = {"dist.strategy": "pipeline", "dist.nproc": 2 * nproc,
                         "dist.dp_size": 2, "dist.microbatches": m}  # fmt: skip
        out["dp2-tp"] = {"dist.strategy": "tp", "dist.nproc": 2 * nproc, "dist.dp_size": 2}
    return out


def _labels(name: str, overrides: dict[str, Any]) -> dict[str, Any]:
    return {
        "layout": name,
        "strategy": overrides["dist.strategy"],
        "processes": overrides["dist.nproc"],
        "schedule": overrides.get("dist.pp_schedule"),
        "microbatches": overrides.get("dist.microbatches"),
        "dp_size": overrides.get("dist.dp_size", 1),
    }


@study_planner("parallelism")
def plan(
    request: PlanRequest,
    *,
    nproc: int = 2,
    microbatches: tuple[int, ...] = DEFAULT_MICROBATCHES,
    layouts: list[str] | None = None,
    two_d: bool = True,
    cost_model: dict[str, Any] | None = None,
) -> PlanResult:
    """One configuration per layout, each repeated, at the base config's global batch."""
    every = configurations(nproc, tuple(microbatches), two_d)
    names = list(every) if layouts is None else layouts
    runs: list[PlannedRun] = []
    for name in names:
        overrides = every[name]
        runs += repeats_of(
            name, request.repeats, labels=_labels(name, overrides), overrides=overrides
        )
    options = {"nproc": nproc, "microbatches": list(microbatches), "layouts": names,
               "two_d": two_d}  # fmt: skip
    if cost_model:
        options["cost_model"] = cost_model
    return runs, options


def options_from_args(args: Any, overrides: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The study's flags as :func:`plan`'s keyword arguments (registry hook). ``--nproc``
    is the study's processes per split (taken out of the run overrides); without a
    workload named, it studies :data:`DEFAULT_WORKLOAD`."""
    if getattr(args, "config", None) is None and "workload.name" not in overrides:
        for key, value in DEFAULT_WORKLOAD.items():
            overrides.setdefault(key, value)
    nproc = positive("nproc", overrides.pop("dist.nproc", 2))
    if nproc < 2:
        raise ConfigError("study parallelism: --nproc must be at least 2 (the splits need it)")
    try:
        micro = tuple(int(x) for x in str(args.microbatch_counts).split(",") if x.strip())
    except ValueError:
        raise ConfigError(
            f"--microbatch-counts: a list of whole numbers, got {args.microbatch_counts!r}"
        ) from None
    if not micro or min(micro) < 1 or max(micro) > 4096:
        raise ConfigError("--microbatch-counts: give at least one count, each in 1..4096")
    two_d = not args.no_2d
    every = configurations(nproc, micro, two_d)
    notes: list[str] = []
    default = list(every)
    if not args.layouts and not _splits_sequence(overrides):
        default.remove("tp-sp")
        notes.append(f"tp-sp left out: --sequence-parallel does not split workload "
                     f"{overrides.get('workload.name')}")  # fmt: skip
    chosen = args.layouts or ",".join(default)
    options = {
        "nproc": nproc,
        "microbatches": micro,
        "layouts": name_list("layouts", chosen, tuple(every)),
        "two_d": two_d,
    }
    if getattr(args, "cost_model", None):
        options["cost_model"] = cost_model(args.cost_model, nproc)
        notes = options["cost_model"]["notes"]
    return options, notes


def _splits_sequence(overrides: dict[str, Any]) -> bool:
    """Whether the workload the overrides name runs under sequence parallelism (true
    where only the model, once built, can say: a --config file's, a user's own)."""
    name = overrides.get("workload.name")
    if not isinstance(name, str):
        return True
    prefix = "workload.options."
    options = {k[len(prefix) :]: v for k, v in overrides.items() if k.startswith(prefix)}
    layout = workload_layout(WorkloadConfig(name=name, options=options))
    return layout is None or bool(layout.get("sequence_parallel", False))


def cost_model(study_dir: str, nproc: int) -> dict[str, Any]:
    """The fits of a collectives study (``--cost-model DIR``) that predict tensor
    parallelism's communication, as the plan keeps them: all_reduce (required), and
    all_gather and reduce_scatter (sequence parallelism's) where the sweep has them."""
    fits, where = fits_of_study(Path(study_dir))
    if "all_reduce" not in fits:
        raise ConfigError(
            f"--cost-model {study_dir}: the sweep has no all_reduce fit, which predicts "
            "tensor parallelism's communication; rerun it with all_reduce in --ops"
        )
    kept = {op: fits[op] for op in ("all_reduce", "all_gather", "reduce_scatter") if op in fits}
    sizes = sorted({fit.world_size for fit in kept.values()})
    return {"source": where, "fits": {op: fit.to_dict() for op, fit in kept.items()},
            "notes": world_notes(sizes, nproc)}  # fmt: skip
