"""A user workload for ``benchmarks/doctor_cases.py``: one rank of a multi-process run
loads its data slowly (``--workload doctor_workloads:slow_rank``, run from this folder).

The synthetic workload, except that on rank 1 (``RANK``, set by torchrun) every training
sample takes ``DELAY_S`` longer to load (``TRAINSCOPE_SLOW_RANK_DELAY_S``), as from a slow
disk or a busy host: rank 1 is a data-loading straggler, and the other rank waits for it
at every gradient sync.
"""

from __future__ import annotations

import os
import time
from typing import Any

from torch.utils.data import Dataset

from trainscope.workloads.base import Workload
from trainscope.workloads.builtin import synthetic

SLOW_RANK = "1"
DELAY_S = float(os.environ.get("TRAINSCOPE_SLOW_RANK_DELAY_S", "0.004"))
"""Per sample: 16 ms per step at 4 samples per rank (tests/reports sets 10 ms)."""


class SlowOnOneRank(Dataset):
    """``inner``, sleeping ``delay_s`` in every ``__getitem__`` on the slow rank only."""

    def __init__(self, inner: Dataset, delay_s: float) -> None:
        self.inner = inner
        # Each rank is a process of its own under torchrun: read once, here.
        self.delay_s = delay_s if os.environ.get("RANK") == SLOW_RANK else 0.0

    def __len__(self) -> int:
        return len(self.inner)  # type: ignore[arg-type]

    def __getitem__(self, index: int) -> Any:
        if self.delay_s:
            time.sleep(self.delay_s)
        return self.inner[index]


def slow_rank(cfg: Any) -> Workload:
    """The synthetic workload with its training set slowed down on rank 1."""
    wl = synthetic(cfg, None)
    wl.train_set = SlowOnOneRank(wl.train_set, DELAY_S)
    return wl
