"""Which scheduler started this process, and this process's place in its job (torch-free).

A batch scheduler starts every rank itself: under SLURM, ``srun`` starts one task per
rank and says which it is in ``SLURM_*`` variables; under Kubernetes, Kubeflow's
PyTorchJob starts one pod per rank with ``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR`` and
``MASTER_PORT`` (and ``PET_*`` variables, torchrun's own defaults, when each pod runs
several processes); torchrun (TorchElastic) sets ``RANK``, ``LOCAL_RANK`` and
``TORCHELASTIC_*``. :func:`detect` reads them into one :class:`Placement`;
:func:`adopt` checks it against the run's flags (they override the environment, and a
contradiction is one clear error) and exports torchrun's variables, so that the rest of
trainscope, and ``torch.distributed``'s ``env://`` rendezvous, sees every scheduler the
way it sees torchrun.

A SLURM batch script itself (one process, no ``srun``) and an ``salloc`` shell are not
tasks of a step: there, as on any machine, trainscope's own flags decide; the run's record
still names the job it ran in (:func:`scheduler_record`). A job id is checked wherever it
is read (:func:`slurm_job_id`): it goes to ``scontrol`` on a preemption, where a value
such as ``--help`` would be read as an option.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Iterator, Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import Any

from trainscope.errors import ConfigError

MAX_NODES_KEPT = 64
"""Host names a record keeps of a node list (a node list may name thousands)."""
MAX_PROCESSES = 1_000_000
"""More ranks than this in a scheduler's variables is not a job but bad input."""
TORCHRUN_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                 "MASTER_PORT")  # fmt: skip
PLACED_BY = "TRAINSCOPE_PLACED_BY"
"""Set by :func:`export`: a pod's rank still reads as the PyTorchJob's once it has
torchrun's LOCAL_RANK."""
SLURM_PORT_BASE = 15000
SLURM_PORT_SPAN = 17000
"""Rendezvous port of a SLURM step without MASTER_PORT: the base plus a number every
task of the step derives alike from the job and step ids (as Lightning does), below
Linux's ephemeral ports (32768 and up), which the kernel hands out to any socket."""
MAX_NODELIST_CHARS = 65536
MAX_BRACKETS = 16
"""Bracket groups in one host expression (rack[1-2]-n[1-4] has 2)."""
JOB_ID = re.compile(r"\d{1,12}(?:[_+]\d{1,9})?")
"""A SLURM job id: digits, or an array task (123_4) or a heterogeneous component (123+1)."""


@dataclass(frozen=True)
class Placement:
    """This process's place in a job started by a scheduler."""

    scheduler: str
    """slurm | pytorchjob | torchrun"""
    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    node_rank: int
    nnodes: int
    master_addr: str | None = None
    master_port: int | None = None
    job_id: str | None = None
    nodes: tuple[str, ...] = field(default_factory=tuple)
    """The job's hosts (at most MAX_NODES_KEPT of them), where the scheduler names them."""

    def record(self) -> dict[str, Any]:
        """What ``summary.json`` keeps under ``scheduler``."""
        return {
            "name": self.scheduler,
            "job_id": self.job_id,
            "nodes": list(self.nodes),
            "nnodes": self.nnodes,
            "tasks": self.world_size,
            "tasks_per_node": self.local_world_size,
            "master_addr": self.master_addr,
            "master_port": self.master_port,
            "placed_ranks": True,
        }


# ---------------------------------------------------------------------------------------
# SLURM host lists: "node[01-04,07],gpu7" names node01..node04, node07 and gpu7
# ---------------------------------------------------------------------------------------

_Segment = str | list[tuple[int, int, int]]  # literal text, or ranges (low, high, width)


def _top_level(text: str) -> list[str]:
    """Split at the commas outside brackets."""
    parts, depth, start = [], 0, 0
    for i, c in enumerate(text):
        depth += {"[": 1, "]": -1}.get(c, 0)
        if depth < 0 or depth > 1:
            raise ConfigError(f"unbalanced brackets in the SLURM node list {text[:80]!r}")
        if c == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if depth:
        raise ConfigError(f"unbalanced brackets in the SLURM node list {text[:80]!r}")
    return [*parts, text[start:]]


def _segments(expr: str, whole: str) -> list[_Segment]:
    if expr.count("[") > MAX_BRACKETS:
        raise ConfigError(f"more than {MAX_BRACKETS} bracket groups in one host of the SLURM "
                          f"node list {whole[:80]!r}")  # fmt: skip
    out: list[_Segment] = []
    for k, piece in enumerate(re.split(r"\[([^\]]*)\]", expr)):
        if k % 2 == 0:
            if piece:
                out.append(piece)
            continue
        ranges = []
        for item in piece.split(","):
            m = re.fullmatch(r"(\d{1,9})(?:-(\d{1,9}))?", item.strip())
            if m is None or (m[2] is not None and int(m[2]) < int(m[1])):
                raise ConfigError(f"cannot read {item!r} in the SLURM node list {whole[:80]!r}")
            ranges.append((int(m[1]), int(m[2] or m[1]), len(m[1])))
        out.append(ranges)
    return out


def parse_nodelist(text: str, keep: int = MAX_NODES_KEPT) -> tuple[list[str], int]:
    """The first ``keep`` host names of a SLURM node list, and how many it names in all
    (counted, not expanded: ``n[1-99999999]`` costs nothing)."""
    if not text.strip():
        raise ConfigError("the SLURM node list is empty")
    if len(text) > MAX_NODELIST_CHARS:
        raise ConfigError(f"the SLURM node list is {len(text)} characters long: not a node list")
    hosts: list[str] = []
    total = 0
    for expr in _top_level(text.strip()):
        segs = _segments(expr.strip(), text)
        if not segs:
            raise ConfigError(f"an empty host in the SLURM node list {text[:80]!r}")
        count = math.prod(
            sum(hi - lo + 1 for lo, hi, _ in s) for s in segs if not isinstance(s, str)
        )
        if len(hosts) < keep:
            hosts += itertools.islice(_lazy(segs), keep - len(hosts))
        total += count
        if total > MAX_PROCESSES:
            raise ConfigError(f"the SLURM node list {text[:80]!r} names more than "
                              f"{MAX_PROCESSES:,} hosts")  # fmt: skip
    return hosts, total


def _lazy(segments: list[_Segment]) -> Iterator[str]:
    """Host names one at a time, without building the product of large ranges."""
    if not segments:
        yield ""
        return
    head, rest = segments[0], segments[1:]
    values: Iterator[str] = (
        iter([head]) if isinstance(head, str)
        else (f"{i:0{w}d}" for lo, hi, w in head for i in range(lo, hi + 1))
    )  # fmt: skip
    for v in values:
        for tail in _lazy(rest):
            yield v + tail


def tasks_per_node(text: str) -> list[int]:
    """SLURM's ``2(x3),1`` (two tasks on each of three nodes, then one) as ``[2, 2, 2, 1]``
    (bounded: a count claimed beyond MAX_PROCESSES is refused)."""
    out: list[int] = []
    for item in text.split(","):
        m = re.fullmatch(r"(\d{1,7})(?:\(x(\d{1,7})\))?", item.strip())
        if m is None:
            raise ConfigError(f"cannot read SLURM's tasks per node {text[:80]!r}")
        times = int(m[2] or 1)
        if len(out) + times > MAX_PROCESSES:
            raise ConfigError(f"SLURM's tasks per node {text[:80]!r} claims too many nodes")
        out += [int(m[1])] * times
    return out


# ---------------------------------------------------------------------------------------
# Detection
# ---------------------------------------------------------------------------------------


def _int(env: Mapping[str, str], name: str, *, low: int = 0, high: int = MAX_PROCESSES) -> int:
    """An integer variable of the environment, or one clear line naming it."""
    raw = env.get(name, "")
    if not re.fullmatch(r"\s*\d{1,9}\s*", raw) or not low <= int(raw) <= high:
        raise ConfigError(f"{name}={raw[:40]!r} in the environment is not a whole number in "
                          f"{low}..{high}")  # fmt: skip
    return int(raw)


def _port(env: Mapping[str, str], name: str) -> int:
    return _int(env, name, low=1, high=65535)


def slurm_job_id(env: Mapping[str, str]) -> str | None:
    """The SLURM job this process runs in (None: none), or one clear line when the id is
    not a job id: it is passed to ``scontrol``, which would read ``--help`` as an option."""
    for name in ("SLURM_JOB_ID", "SLURM_JOBID"):
        raw = env.get(name)
        if not raw:
            continue
        if not JOB_ID.fullmatch(raw):
            raise ConfigError(f"{name}={raw[:40]!r} in the environment is not a SLURM job id "
                              "(digits, or an array task such as 123_4)")  # fmt: skip
        return raw
    return None


def _slurm(env: Mapping[str, str]) -> Placement:
    """An ``srun`` task: its step's tasks are the world, the step's first host the
    rendezvous (unless MASTER_ADDR/MASTER_PORT say otherwise)."""
    world = _int(env, "SLURM_STEP_NUM_TASKS" if "SLURM_STEP_NUM_TASKS" in env
                 else "SLURM_NTASKS", low=1)  # fmt: skip
    rank = _int(env, "SLURM_PROCID", high=world - 1)
    listed = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST") or ""
    hosts, nnodes = parse_nodelist(listed) if listed else ([], 1)
    if "SLURM_STEP_NUM_NODES" in env:
        nnodes = _int(env, "SLURM_STEP_NUM_NODES", low=1)
    node = _int(env, "SLURM_NODEID", high=max(nnodes - 1, 0)) if "SLURM_NODEID" in env else 0
    per_node_text = env.get("SLURM_STEP_TASKS_PER_NODE") or env.get("SLURM_TASKS_PER_NODE")
    per_node = tasks_per_node(per_node_text) if per_node_text else [world // nnodes] * nnodes
    if len(per_node) != nnodes or sum(per_node) != world or min(per_node) < 1:
        raise ConfigError(f"SLURM's variables disagree: {world} tasks, {nnodes} node(s), "
                          f"tasks per node {per_node_text!r}")  # fmt: skip
    if len(set(per_node)) > 1:
        raise ConfigError(
            f"SLURM placed {per_node_text} tasks on the nodes: trainscope needs as many on "
            "each (sbatch --ntasks-per-node)"
        )
    local_world = per_node[0]
    job = slurm_job_id(env)
    if "MASTER_PORT" in env:
        port = _port(env, "MASTER_PORT")
    else:  # every task of the step derives the same one; steps of a job differ
        step = int(env["SLURM_STEP_ID"]) if env.get("SLURM_STEP_ID", "").isdigit() else 0
        base = int(job) if job and job.isdigit() else 0
        port = SLURM_PORT_BASE + (base * 16 + step) % SLURM_PORT_SPAN
    return Placement(
        "slurm", rank, world, _int(env, "SLURM_LOCALID", high=max(local_world - 1, 0)),
        local_world, node, nnodes, env.get("MASTER_ADDR") or (hosts[0] if hosts else None),
        port, job, tuple(hosts),
    )  # fmt: skip


def _torchrun(env: Mapping[str, str], name: str) -> Placement:
    """torchrun's workers, or a PyTorchJob pod that is one rank (no LOCAL_RANK: 0 of 1)."""
    world = _int(env, "WORLD_SIZE", low=1)
    local_world = _int(env, "LOCAL_WORLD_SIZE", low=1) if "LOCAL_WORLD_SIZE" in env else (
        1 if "LOCAL_RANK" not in env else world)  # fmt: skip
    nnodes = max(1, world // local_world)
    node = _int(env, "GROUP_RANK") if "GROUP_RANK" in env else _int(env, "RANK") // local_world
    job = env.get("SLURM_JOB_ID") or env.get("TORCHELASTIC_RUN_ID")
    return Placement(
        name, _int(env, "RANK", high=world - 1), world,
        _int(env, "LOCAL_RANK", high=local_world - 1) if "LOCAL_RANK" in env else 0,
        local_world, node, nnodes, env.get("MASTER_ADDR"),
        _port(env, "MASTER_PORT") if "MASTER_PORT" in env else None, job,
    )  # fmt: skip


def detect(env: Mapping[str, str]) -> Placement | None:
    """Who started this process as a rank, and where it stands; None when nobody did.

    The innermost launcher wins: torchrun's workers inside a SLURM task are torchrun's;
    an ``srun`` task is SLURM's; a pod with RANK/WORLD_SIZE/MASTER_ADDR and no LOCAL_RANK
    is a PyTorchJob's. Malformed variables are one clear error naming the variable.
    """
    slurm_job_id(env)  # a job id that is not one is refused wherever the run may go
    if "TORCHELASTIC_RUN_ID" in env and all(v in env for v in ("RANK", "WORLD_SIZE")):
        return _torchrun(env, "torchrun")
    if "SLURM_STEP_ID" in env and "SLURM_PROCID" in env:
        return _slurm(env)
    if "PET_NPROC_PER_NODE" in env and "LOCAL_RANK" not in env:
        return None  # a pod that starts its own processes: its PET_* are launch flags
    if all(v in env for v in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")):
        pod = "LOCAL_RANK" not in env or env.get(PLACED_BY) == "pytorchjob"
        return _torchrun(env, "pytorchjob" if pod else "torchrun")
    return None


def scheduler_record(env: Mapping[str, str]) -> dict[str, Any] | None:
    """What a run's ``summary.json`` says of the scheduler that placed it, or of the SLURM
    job it ran in without ``srun`` (a batch script: provenance, no ranks placed); None
    when neither."""
    placement = detect(env)
    if placement is not None:
        record = placement.record()
        if placement.scheduler == "slurm":
            record["job_name"] = env.get("SLURM_JOB_NAME") or None
        return record
    job = slurm_job_id(env)
    if job is None:
        return None
    hosts: list[str] = []
    nnodes: int | None = None
    try:  # provenance only: a node list it cannot read is left out, the run goes on
        if env.get("SLURM_JOB_NODELIST"):
            hosts, nnodes = parse_nodelist(env["SLURM_JOB_NODELIST"])
    except ConfigError:
        pass
    return {
        "name": "slurm", "job_id": job, "job_name": env.get("SLURM_JOB_NAME") or None,
        "nodes": hosts, "nnodes": nnodes, "tasks": None, "tasks_per_node": None,
        "master_addr": None, "master_port": None, "placed_ranks": False,
    }  # fmt: skip


# ---------------------------------------------------------------------------------------
# Adoption: the flags against the environment, then torchrun's variables
# ---------------------------------------------------------------------------------------


def _contradiction(flags: str, p: Placement, what: str) -> ConfigError:
    source = {"slurm": "SLURM", "pytorchjob": "the PyTorchJob",
              "torchrun": "torchrun"}[p.scheduler]  # fmt: skip
    return ConfigError(
        f"{flags}, but {source} started {what}: leave the flags out (the scheduler's "
        "placement is used) or make the two agree"
    )


def check_flags(nproc: int, nnodes: int, p: Placement) -> None:
    """Refuse flags that contradict the scheduler's placement. Flags left at their
    defaults (1 process, 1 node) say nothing; a job of one task leaves the flags free
    (trainscope launches its own processes inside it, as on any machine)."""
    if p.world_size == 1 or (nproc, nnodes) == (1, 1):
        return
    if nproc * nnodes != p.world_size:
        raise _contradiction(f"the flags ask for {nproc * nnodes} processes (--nproc {nproc} "
                             f"x --nnodes {nnodes})", p, f"{p.world_size} tasks")  # fmt: skip
    if nproc != p.local_world_size or nnodes != p.nnodes:
        raise _contradiction(
            f"the flags ask for {nproc} processes on each of {nnodes} nodes", p,
            f"{p.local_world_size} tasks on each of {p.nnodes} nodes",
        )  # fmt: skip


def claimed_world(env: Mapping[str, str]) -> str:
    """Which variables said how many ranks there are, for a message about the ones that
    never came: ``SLURM_NTASKS=2 claims 2 tasks``, ``WORLD_SIZE=2 claims 2 processes``."""
    world = env.get("WORLD_SIZE", "?")[:12]
    if env.get(PLACED_BY) == "slurm":
        name = "SLURM_STEP_NUM_TASKS" if "SLURM_STEP_NUM_TASKS" in env else "SLURM_NTASKS"
        return f"{name}={env.get(name, '?')[:12]} claims {world} tasks"
    who = {"pytorchjob": "the PyTorchJob's "}.get(env.get(PLACED_BY, ""), "")
    if "TORCHELASTIC_RUN_ID" in env:
        who = "torchrun's "
    return f"{who}WORLD_SIZE={world} claims {world} processes"


def torchrun_env(p: Placement, master_addr: str | None, master_port: int | None) -> dict[str, str]:
    """The variables torchrun would have set for this rank (flags' rendezvous first)."""
    addr = master_addr or p.master_addr or "127.0.0.1"
    port = master_port or p.master_port
    if port is None:
        raise ConfigError(f"{p.scheduler} gave no MASTER_PORT: give --master-port")
    values = (p.rank, p.world_size, p.local_rank, p.local_world_size, addr, port)
    return {k: str(v) for k, v in zip(TORCHRUN_VARS, values, strict=True)}


def export(p: Placement, env: MutableMapping[str, str], master_addr: str | None = None,
           master_port: int | None = None) -> None:  # fmt: skip
    """Make a scheduler's rank look like torchrun's to the rest of the run (and to
    ``env://``): set torchrun's variables in ``env``. torchrun's own are left alone."""
    if p.scheduler == "torchrun" or p.world_size == 1:
        return
    env.update(torchrun_env(p, master_addr, master_port))
    env[PLACED_BY] = p.scheduler
