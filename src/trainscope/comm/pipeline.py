"""A pipeline's arithmetic, shared by the strategy, its checks, the estimator and the
reports (torch-free): how blocks are shared out among stages, how many stages a rank
runs, and the bubble the schedule leaves in theory."""

from __future__ import annotations

from trainscope.errors import ConfigError


def stages_per_rank(schedule: str) -> int:
    """Stages each rank runs: two for the interleaved schedule, else one."""
    return 2 if schedule.startswith("interleaved") else 1


def theory_bubble(schedule: str, stages: int, microbatches: int) -> float:
    """The idle fraction of a step on each rank when every stage costs the same and
    transfers are free: (S-1)/(M+S-1), or (S-1)/(V*M+S-1) interleaved (Narayanan et al.,
    2021, whose bubble-to-work ratios (S-1)/M and (S-1)/(VM) these are, as shares of the
    step)."""
    v = stages_per_rank(schedule)
    return (stages - 1) / (v * microbatches + stages - 1)


def split_even(n_blocks: int, n_stages: int) -> list[tuple[int, int]]:
    """Contiguous block ranges ``[start, end)``, one per stage, sizes differing by at most
    one (the later stages get the extra blocks: the first carries the embeddings)."""
    if n_stages > n_blocks:
        raise ConfigError(f"{n_stages} pipeline stages need at least {n_stages} blocks; "
                          f"the model has {n_blocks}")  # fmt: skip
    base, extra = divmod(n_blocks, n_stages)
    return bounds([base + (1 if k >= n_stages - extra else 0) for k in range(n_stages)])


def bounds(sizes: list[int]) -> list[tuple[int, int]]:
    """Consecutive ``[start, end)`` ranges of the given sizes, from 0."""
    out, start = [], 0
    for size in sizes:
        out.append((start, start + size))
        start += size
    return out


__all__ = ["bounds", "split_even", "stages_per_rank", "theory_bubble"]
