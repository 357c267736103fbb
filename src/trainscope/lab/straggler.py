"""A straggler planted on one rank, for the lab's first chapter (a workload factory).

``--workload trainscope.lab.straggler:slow_rank --set workload.options.delay_ms=2``: the
synthetic workload, except that on one rank (``rank``, default 1; ``RANK`` as torchrun
sets it) every training sample takes ``delay_ms`` longer to load, as from a slow disk or a
busy host. Under DDP every rank then waits for that one at each gradient all-reduce: the
chapter measures what one slow rank costs all of them.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from torch.utils.data import Dataset

from trainscope.errors import ConfigError
from trainscope.workloads.base import Workload
from trainscope.workloads.builtin import synthetic

MAX_DELAY_MS = 1000.0


class SlowOnOneRank(Dataset):
    """``inner``, sleeping ``delay_s`` in every ``__getitem__`` (only built so on the slow
    rank: every other rank gets ``delay_s`` 0)."""

    def __init__(self, inner: Dataset, delay_s: float) -> None:
        self.inner = inner
        self.delay_s = delay_s

    def __len__(self) -> int:
        return len(self.inner)  # type: ignore[arg-type]

    def __getitem__(self, i: int) -> Any:
        if self.delay_s:
            time.sleep(self.delay_s)
        return self.inner[i]


def _options(options: Any) -> tuple[float, str]:
    """(delay in ms, the slow rank) from the workload's options; one clear error if bad."""
    opts = dict(options or {})
    delay, rank = opts.pop("delay_ms", 0.0), opts.pop("rank", 1)
    if opts:
        raise ConfigError(f"slow_rank takes delay_ms and rank, got {', '.join(map(str, opts))}")
    if isinstance(delay, bool) or not isinstance(delay, (int, float)):
        raise ConfigError(f"slow_rank: delay_ms must be a number, got {delay!r}")
    if not 0 <= delay <= MAX_DELAY_MS:
        raise ConfigError(f"slow_rank: delay_ms must be 0-{MAX_DELAY_MS:g}, got {delay}")
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 0:
        raise ConfigError(f"slow_rank: rank must be a rank number, got {rank!r}")
    return float(delay), str(rank)


def slow_rank(cfg: Any, cache_dir: Path | None = None) -> Workload:
    """The synthetic workload with its training samples slowed down on one rank."""
    delay_ms, rank = _options(getattr(cfg, "options", None))
    wl = synthetic(cfg, cache_dir)  # type: ignore[arg-type]
    slow = os.environ.get("RANK", "0") == rank  # each rank is a process of its own
    wl.train_set = SlowOnOneRank(wl.train_set, delay_ms / 1e3 if slow else 0.0)
    return wl


__all__ = ["SlowOnOneRank", "slow_rank"]
