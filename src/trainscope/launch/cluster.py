"""A run started by a cluster's scheduler: its ranks come from the scheduler, not from
trainscope (torch-free).

Under ``srun`` every task is one rank, so ``trainscope run`` must train as that rank,
never launch torchrun again; in a PyTorchJob pod the same. :func:`adopt_scheduler` is
called by ``trainscope run`` and ``trainscope.run()`` before anything else decides how
to launch: it reads the scheduler's placement (:mod:`trainscope.runtime.scheduler`),
refuses flags that contradict it, and exports torchrun's variables, after which the run
is exactly a torchrun worker. A pod that runs several processes of its own (Kubeflow's
``nprocPerNode``) gets torchrun's ``PET_*`` defaults instead: trainscope launches them.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import MutableMapping
from pathlib import Path

from trainscope import registry
from trainscope.config import RunConfig
from trainscope.errors import ConfigError
from trainscope.records.run_dir import try_summary
from trainscope.runtime.scheduler import Placement, check_flags, detect, export
from trainscope.util.textsafe import one_line

DEFAULT_ADDR = "127.0.0.1"
# Kubeflow's training operator hands torchrun its arguments as PET_* variables.
PET_FLAGS = {"PET_NNODES": "nnodes", "PET_NPROC_PER_NODE": "nproc",
             "PET_NODE_RANK": "node_rank", "PET_MASTER_ADDR": "master_addr",
             "PET_MASTER_PORT": "master_port"}  # fmt: skip


def adopt_scheduler(cfg: RunConfig, env: MutableMapping[str, str] | None = None) -> RunConfig:
    """``cfg`` as the scheduler that started this process places it (unchanged where no
    scheduler did); ``env`` (os.environ) gets torchrun's variables for a scheduler's rank."""
    env = os.environ if env is None else env
    placement = detect(env)
    if placement is None:
        return _pet_defaults(cfg, env)
    check_flags(cfg.dist.nproc, cfg.dist.nnodes, placement)
    if placement.world_size == 1 or placement.scheduler == "torchrun":
        return cfg
    if not registry.STRATEGIES[cfg.dist.strategy].multiprocess:
        raise ConfigError(
            f"{_who(placement)} started {placement.world_size} tasks, and strategy "
            f"{cfg.dist.strategy} runs in one process: use one of "
            f"{', '.join(registry.multiprocess_names())} (or start 1 task)"
        )
    d = cfg.dist
    addr = d.master_addr if d.master_addr != DEFAULT_ADDR else None
    export(placement, env, addr, d.master_port)
    dist = dataclasses.replace(
        d, nproc=placement.local_world_size, nnodes=placement.nnodes,
        node_rank=placement.node_rank, master_addr=env["MASTER_ADDR"],
        master_port=int(env["MASTER_PORT"]),
    )  # fmt: skip
    return dataclasses.replace(cfg, dist=dist)


def _who(p: Placement) -> str:
    return {"slurm": "SLURM", "pytorchjob": "the PyTorchJob"}.get(p.scheduler, p.scheduler)


def _pet_defaults(cfg: RunConfig, env: MutableMapping[str, str]) -> RunConfig:
    """Kubeflow's PET_* variables as the launch flags left at their defaults."""
    given = {k: env[k] for k in PET_FLAGS if env.get(k)}
    if not given:
        return cfg
    _check_pet_world(given, env)
    defaults = RunConfig().dist
    changes: dict[str, object] = {}
    for var, name in PET_FLAGS.items():
        if var not in given or getattr(cfg.dist, name) != getattr(defaults, name):
            continue  # a flag given overrides the environment
        raw = given[var]
        if name != "master_addr":
            if not raw.isdigit():
                raise ConfigError(f"{var}={raw[:40]!r} in the environment is not a whole number")
            changes[name] = int(raw)
        else:
            changes[name] = raw
    return dataclasses.replace(cfg, dist=dataclasses.replace(cfg.dist, **changes))


def _check_pet_world(given: dict[str, str], env: MutableMapping[str, str]) -> None:
    """Refuse PET_* variables whose processes contradict WORLD_SIZE beside them: Kubeflow
    sets WORLD_SIZE to nodes x processes per node, so a mismatch is two placements, of
    which trainscope would silently follow one (four processes, for a world of two)."""
    world = env.get("WORLD_SIZE", "")
    per_node, nodes = given.get("PET_NPROC_PER_NODE", "1"), given.get("PET_NNODES", "1")
    if not (world.isdigit() and per_node.isdigit() and nodes.isdigit()):
        return  # malformed ones are refused below, naming the variable
    if int(per_node) * int(nodes) != int(world):
        claimed = " x ".join(f"{k}={given[k]}" for k in ("PET_NPROC_PER_NODE", "PET_NNODES")
                             if k in given)  # fmt: skip
        raise ConfigError(
            f"the placement variables contradict each other: {claimed} asks for "
            f"{int(per_node) * int(nodes)} processes, WORLD_SIZE={world} for {world}; "
            "unset one or make them agree"
        )


def requeued_start(out: str | None) -> str | None:
    """What a run started with ``--requeue`` finds in its ``--out``: None (nothing yet: a
    fresh run), ``resume`` (a run that a scheduler stopped: preempted, ended by a signal,
    or killed before it could say so; it goes on from its newest checkpoint), ``again``
    (such a run with no checkpoint yet: its folder is started over) or ``completed``
    (nothing left to do). A run that failed on its own, or was cancelled, is refused:
    requeueing it was not asked for."""
    if out is None:
        raise ConfigError("--requeue needs --out: the requeued job resumes the run found there")
    summary = Path(out) / "summary.json"
    if not summary.is_file():
        return None
    record = try_summary(summary)
    status, error = record.get("status"), str(record.get("error") or "")
    if status == "completed":
        return "completed"
    if status in ("preempted", "running") or (
        status == "failed" and error.startswith("terminated by SIG")
    ):
        return "resume" if any((Path(out) / "checkpoints").glob("step-*")) else "again"
    said = one_line(str(status)) if status else "without a readable record"
    raise ConfigError(
        f"--requeue: the run in {one_line(out)} ended {said}, not stopped by its scheduler: "
        "go on with --resume, or give another --out"
    )


__all__ = ["adopt_scheduler", "requeued_start"]
