"""Two-dimensional layouts: data parallelism around a model-splitting strategy.

``dp`` replicas, each of ``inner`` processes that split one model between them (the
stages of a pipeline, the shards of tensor parallelism): ``dp x inner`` processes in all,
numbered replica by replica, so the ranks of one replica are contiguous (on one machine
first, where the inner strategy's heavier traffic belongs). A replica trains on its own
share of the batch; after backward each gradient is averaged over the replicas that hold
the same part of the model (one all-reduce per tensor over the ``dp`` group).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from trainscope.errors import ConfigError

if TYPE_CHECKING:
    import torch


def check_grid(world: int, inner: int | None, dp: int | None, what: str) -> tuple[int, int]:
    """(inner, dp) for a world of ``world`` processes, each given or derived from the
    other; refused in one line when they do not multiply to the world."""
    dp = dp or 1
    if world % dp:
        raise ConfigError(f"--dp-size {dp} does not divide the {world} processes")
    inner = inner or world // dp
    if inner * dp != world:
        raise ConfigError(
            f"{what} {inner} x --dp-size {dp} = {inner * dp} processes; this run has {world}"
        )
    return inner, dp


def replica_batch(global_batch: int, dp: int) -> int:
    """Each data-parallel replica's share of the global batch; refused in one line when
    it does not split evenly."""
    if global_batch % dp:
        raise ConfigError(
            f"the global batch size {global_batch} does not split evenly across the {dp} "
            f"data-parallel replicas: choose a multiple of {dp}"
        )
    return global_batch // dp


@dataclass
class Grid:
    """This rank's place in a ``dp x inner`` grid, and its two process groups."""

    dp: int
    inner: int
    rank: int
    inner_group: Any = None
    dp_group: Any = None
    dp_ranks: list[int] = field(default_factory=list)

    @property
    def dp_rank(self) -> int:
        """Which replica this rank belongs to."""
        return self.rank // self.inner

    @property
    def inner_rank(self) -> int:
        """Its place inside the replica (a pipeline's stage, a tensor-parallel shard)."""
        return self.rank % self.inner

    @property
    def inner_ranks(self) -> list[int]:
        """The global ranks of this rank's replica, in order."""
        return [self.dp_rank * self.inner + i for i in range(self.inner)]

    def global_rank(self, inner_rank: int) -> int:
        """The global rank of place ``inner_rank`` in this rank's replica."""
        return self.dp_rank * self.inner + inner_rank


def make_grid(rank: int, dp: int, inner: int) -> Grid:
    """This rank's grid with its process groups. Every rank makes every group, in one
    order (``new_group`` is collective); with dp = 1 the replica is the whole world."""
    import torch.distributed as dist

    grid = Grid(dp, inner, rank)
    if not dist.is_initialized():
        return grid
    if dp == 1:
        grid.inner_group = dist.group.WORLD
        grid.dp_ranks = [rank]
        return grid
    for d in range(dp):
        group = dist.new_group([d * inner + i for i in range(inner)])
        if d == grid.dp_rank:
            grid.inner_group = group
    for i in range(inner):
        ranks = [d * inner + i for d in range(dp)]
        group = dist.new_group(ranks)
        if i == grid.inner_rank:
            grid.dp_group, grid.dp_ranks = group, ranks
    return grid


def average_over_replicas(params: list[torch.Tensor], grid: Grid) -> None:
    """Every gradient the mean over the replicas (the dp group): one all-reduce each."""
    import torch  # torch-free at import: the layout checks use this module before torch
    import torch.distributed as dist

    if grid.dp == 1:
        return
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        grad = p.grad
        local = grad.to_local() if hasattr(grad, "to_local") else grad
        dist.all_reduce(local, group=grid.dp_group)
        local.div_(grid.dp)
