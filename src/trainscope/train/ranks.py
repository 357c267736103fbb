"""What a multi-process run adds to the record: one folder per rank, the run directory
agreed by all ranks, the per-rank figures gathered on rank 0, and the saved weights.

Rank 0 writes the run directory exactly as a one-process run does (its ``metrics.jsonl``
step lines carry the loss averaged over ranks, and its own as ``rank_loss``). Every other
rank writes ``ranks/rank<R>/`` the same way: its step lines (``metrics.jsonl``), system
samples and ``summary.json``. Rank 0's record gathers every rank's figures: world size,
and per stage the min, mean and max across ranks, so a straggler shows.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from trainscope.errors import TrainscopeError
from trainscope.records import OwnedDir, prepare_run_dir, reopen_run_dir
from trainscope.records.jsonio import TMP_PREFIX
from trainscope.runtime.dist import DistInfo, broadcast_object, gather_objects
from trainscope.runtime.threads import combine
from trainscope.train.record import RankFigures


def agree_run_dir(info: DistInfo, make: Callable[[], OwnedDir]) -> tuple[Path, OwnedDir | None]:
    """Rank 0 prepares (and locks) the run directory with ``make``; every rank learns its
    path or its error, so a refused ``--out`` stops all ranks instead of leaving them
    waiting. Returns the path and, on rank 0, the locked directory."""
    result: tuple[str, str | None] = ("", None)
    owned = None
    if info.is_main:
        try:
            owned = make()
            if info.world_size > 1:  # every other rank's folder, listed before it exists
                owned.record(dirs=["ranks", *(f"ranks/rank{r}" for r in range(1, info.world_size))])
            result = (str(owned.path), None)
        except TrainscopeError as e:
            result = ("", str(e))
    path, error = broadcast_object(result, info)
    if error is not None:
        raise TrainscopeError(error)
    return Path(path), owned


def rank_dir(run_dir: Path, info: DistInfo, resume: bool = False) -> OwnedDir:
    """``RUN_DIR/ranks/rank<R>``, marked and locked by this rank (rank 0 has cleared the
    old one already when the run directory is shared; on another node's disk this rank
    clears what an earlier run of its own left there). A resumed run keeps it as it is."""
    path = run_dir / "ranks" / f"rank{info.rank}"
    if resume:
        return reopen_run_dir(path, kind="rank")
    return prepare_run_dir(path, overwrite=True, kind="rank")


def make_loss_reducer(
    info: DistInfo, share: float | None = None
) -> Callable[[torch.Tensor], torch.Tensor] | None:
    """The global losses from every rank's (one all_reduce per log interval): the sum of
    each rank's losses times its ``share`` (None: 1/world, the mean over ranks; a
    pipeline's last stage 1, its other stages 0)."""
    if info.world_size == 1:
        return None
    import torch.distributed as dist

    def mean_over_ranks(losses: torch.Tensor) -> torch.Tensor:
        out = losses.clone() if share is None else losses * share
        dist.all_reduce(out, op=dist.ReduceOp.SUM)
        return out / info.world_size if share is None else out

    return mean_over_ranks


def rank_summary(info: DistInfo, summary: dict[str, Any], hostname: str) -> dict[str, Any]:
    """The figures of one rank that rank 0 gathers."""
    keys = (
        "stages_s",
        "samples",
        "steps",
        "train_time_s",
        "wall_time_s",
        "peak_memory_bytes",
        "peak_memory_kind",
        "peak_rss_bytes",
        "device",
        "comm",
        "clock",
        "steady_state",
        "memory",
        "cpu",
    )
    return {"rank": info.rank, "local_rank": info.local_rank, "host": hostname} | {
        k: summary.get(k) for k in keys
    }


def gather_ranks(info: DistInfo, summary: dict[str, Any]) -> RankFigures | None:
    """Every rank's figures (from each rank's ``summary``, as its record holds it so far)
    and the spread of each stage, for rank 0's record (a collective: every rank calls it;
    None in a one-process run)."""
    if info.world_size == 1:
        return None
    import socket

    host = socket.gethostname()
    every = gather_objects(rank_summary(info, summary, host), info)
    peaks = [r["peak_memory_bytes"] for r in every if r.get("peak_memory_bytes") is not None]
    return RankFigures(
        ranks=every,
        stage_spread=stage_spread(every),
        peak_memory_bytes_max_rank=max(peaks) if peaks else None,
        # Rank 0's CPU verdict counts every rank on its node as the run's own load.
        node_cpu=combine([r.get("cpu") for r in every if r.get("host") == host]),
    )


def stage_spread(ranks: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per stage: min, mean and max seconds across ranks, and the slowest rank."""
    out: dict[str, dict[str, float]] = {}
    names = {k for r in ranks for k in (r.get("stages_s") or {})}
    for name in sorted(names):
        values = [(r["stages_s"].get(name, 0.0), r["rank"]) for r in ranks if r.get("stages_s")]
        secs = [v for v, _ in values]
        out[name] = {
            "min": min(secs),
            "mean": sum(secs) / len(secs),
            "max": max(secs),
            "max_rank": max(values)[1],
        }
    return out


def tied_duplicates(model: nn.Module) -> set[str]:
    """Names of parameters that are the same tensor as an earlier name (tied weights)."""
    seen: set[int] = set()
    dups: set[str] = set()
    for name, p in model.named_parameters(remove_duplicate=False):
        if id(p) in seen:
            dups.add(name)
        seen.add(id(p))
    return dups


def save_weights(
    path: Path,
    state: dict[str, torch.Tensor],
    skip: set[str],
    before_move: Callable[[], None] | None = None,
) -> int:
    """Write ``state`` (minus tied duplicates) as safetensors; returns bytes written.
    ``before_move`` is called once the file is written, before it is moved into place
    (fault-injection tests kill the process there).

    Tied weights are stored once under their first name: ``safetensors.torch.load_model``
    knows the model's ties and restores the others.
    """
    from safetensors.torch import save_file

    tensors = {k: v.detach().cpu().contiguous() for k, v in state.items() if k not in skip}
    # Written inside a temporary folder of trainscope's own, then moved into place:
    # safetensors writes a temporary file of its own next to its target, which a run
    # killed mid-write would leave where --overwrite cannot know it (records.ownership
    # removes leftover temporary folders).
    tmp = path.parent / f"{TMP_PREFIX}weights-{os.getpid()}"
    tmp.mkdir(exist_ok=True)
    try:
        save_file(tensors, str(tmp / path.name), metadata={"format": "pt", "writer": "trainscope"})
        if before_move is not None:
            before_move()
        os.replace(tmp / path.name, path)
    finally:
        for leftover in tmp.iterdir():  # only after a failed write
            leftover.unlink()
        tmp.rmdir()
    return path.stat().st_size
