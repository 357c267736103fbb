"""Several processes of one script: one run directory, a record per rank, rank 0's view.

A script that trains on several processes makes its process group itself
(``init_process_group`` is the script's, and calling it first would break the script),
so the ranks of a script run agree through the run directory instead of collectives:

- rank 0 claims ``--out`` (the usual ownership rules) and writes its ``summary.json``
  (``running``) carrying this launch's token; every other rank waits for that summary,
  then claims its ``ranks/rank<R>`` folder;
- at the end each rank writes its own record, and rank 0 waits a while for every other
  rank's to be final, then adds their figures (the straggler view, as for native runs).
  A rank that never finishes its record (killed, or stalled) is listed as it was last
  written, with a note.

Where the processes come from does not matter: ``trainscope profile --nproc N`` (torchrun
started by trainscope), ``torchrun ... trainscope profile``, or one ``srun`` task per rank.
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainscope.errors import TrainscopeError
from trainscope.records import OwnedDir, prepare_run_dir
from trainscope.records.jsonio import try_json_object
from trainscope.runtime.dist import DistInfo
from trainscope.runtime.threads import combine
from trainscope.train.ranks import rank_dir, rank_summary, stage_spread
from trainscope.train.record import RankFigures

WAIT_ENV = "TRAINSCOPE_PROFILE_RANK_WAIT_S"
"""Seconds a rank waits for another's record (default :data:`WAIT_S`)."""
WAIT_S = 60.0


def _env_int(*names: str) -> int | None:
    for name in names:
        value = os.environ.get(name, "").strip()
        if value.isdigit():
            return int(value)
    return None


@dataclass(frozen=True)
class Placement:
    """This process's rank among the script's processes, as its launcher placed it."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int = 1
    token: str = ""
    """What one launch's ranks share and an earlier launch's do not."""

    @classmethod
    def from_env(cls) -> Placement:
        """torchrun's variables, else SLURM's (one task per rank), else one process."""
        if all(v in os.environ for v in ("RANK", "WORLD_SIZE")):
            world = _env_int("WORLD_SIZE") or 1
            token = ":".join(os.environ.get(v, "") for v in (
                "TORCHELASTIC_RUN_ID", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RESTART_COUNT",
            ))  # fmt: skip
            return cls(_env_int("RANK") or 0, world, _env_int("LOCAL_RANK") or 0,
                       _env_int("LOCAL_WORLD_SIZE") or 1, token)  # fmt: skip
        tasks = _env_int("SLURM_NTASKS") or 1
        if tasks > 1 and "SLURM_PROCID" in os.environ:
            token = f"slurm:{os.environ.get('SLURM_JOB_ID')}.{os.environ.get('SLURM_STEP_ID')}"
            return cls(_env_int("SLURM_PROCID") or 0, tasks, _env_int("SLURM_LOCALID") or 0,
                       _env_int("SLURM_NTASKS_PER_NODE") or 1, token)  # fmt: skip
        return cls()

    @property
    def info(self) -> DistInfo:
        return DistInfo(self.rank, self.local_rank, self.world_size, self.local_world_size)


def _wait_s() -> float:
    try:
        return max(0.0, float(os.environ.get(WAIT_ENV, WAIT_S)))
    except ValueError:
        return WAIT_S


def claim(place: Placement, out: str | None, overwrite: bool) -> OwnedDir:
    """Rank 0: the run directory claimed, every rank's folder listed in it; another rank:
    its ``ranks/rank<R>`` once rank 0 has claimed the directory for this launch."""
    if out is None:
        raise TrainscopeError(
            f"{place.world_size} processes profile one script into one run directory: "
            "give it with --out DIR"
        )
    if place.rank == 0:
        owned = prepare_run_dir(out, overwrite)
        owned.record(dirs=["ranks", *(f"ranks/rank{r}" for r in range(1, place.world_size))])
        return owned
    run_dir = Path(out)
    deadline = time.monotonic() + _wait_s()
    while True:
        summary = try_json_object(run_dir / "summary.json") or {}
        if (summary.get("source") or {}).get("launch") == place.token:
            return rank_dir(run_dir, place.info)
        if time.monotonic() > deadline:
            raise TrainscopeError(
                f"rank {place.rank}: rank 0 did not open the run directory {out} within "
                f"{_wait_s():.0f} s (it failed to start, or was refused: see its message)"
            )
        time.sleep(0.05)


def gather(place: Placement, run_dir: Path, summary: dict[str, Any]) -> RankFigures | None:
    """Rank 0: every rank's figures from their records (waiting for them a while); None
    on the other ranks and for one process."""
    if place.world_size == 1 or place.rank != 0:
        return None
    host = socket.gethostname()
    rows = [rank_summary(place.info, summary, host)]
    deadline = time.monotonic() + _wait_s()
    for r in range(1, place.world_size):
        other = _final(run_dir / "ranks" / f"rank{r}" / "summary.json", deadline)
        row = rank_summary(DistInfo(rank=r), other, "")
        own = other.get("script") or {}
        row["host"], row["local_rank"] = own.get("host"), own.get("local_rank")
        if other.get("status") in (None, "running"):
            row["note"] = "its record was not finished (the rank died or stalled)"
        rows.append(row)
    peaks = [r["peak_memory_bytes"] for r in rows if r.get("peak_memory_bytes") is not None]
    return RankFigures(
        ranks=rows, stage_spread=stage_spread([r for r in rows if r.get("stages_s")]),
        peak_memory_bytes_max_rank=max(peaks) if peaks else None,
        node_cpu=combine([r.get("cpu") for r in rows if r.get("host") in (host, None)]),
    )  # fmt: skip


def _final(path: Path, deadline: float) -> dict[str, Any]:
    """The record at ``path`` once it is no longer ``running`` (or as it is at the deadline)."""
    while True:
        summary = try_json_object(path) or {}
        if summary.get("status") not in (None, "running") or time.monotonic() > deadline:
            return summary
        time.sleep(0.05)


__all__ = ["WAIT_ENV", "Placement", "claim", "gather"]
