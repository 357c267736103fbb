"""A user workload (``--workload slow_rank_workload:factory``) with one slow rank.

The synthetic workload, except that on rank 1 (``RANK`` from torchrun's environment)
every training sample takes ``DELAY_S`` longer to load: rank 1 is a data-loading
straggler, and every other rank waits for it at each gradient synchronisation.
"""

from __future__ import annotations

import os
import time
from typing import Any

from torch.utils.data import Dataset

from trainscope.workloads.base import Workload
from trainscope.workloads.builtin import synthetic

SLOW_RANK = "1"
DELAY_S = 0.01  # per sample: 40 ms per step at 4 samples per rank (--batch-size 8)


class SlowOnOneRank(Dataset):
    """``inner``, sleeping ``delay_s`` in every ``__getitem__`` on the slow rank only."""

    def __init__(self, inner: Dataset, delay_s: float) -> None:
        self.inner = inner
        # Read once per process: each rank is a process of its own under torchrun.
        self.delay_s = delay_s if os.environ.get("RANK") == SLOW_RANK else 0.0

    def __len__(self) -> int:
        return len(self.inner)  # type: ignore[arg-type]

    def __getitem__(self, index: int) -> Any:
        if self.delay_s:
            time.sleep(self.delay_s)
        return self.inner[index]


def factory(cfg: Any) -> Workload:
    """The synthetic workload with its training set slowed down on rank 1."""
    wl = synthetic(cfg, None)
    wl.train_set = SlowOnOneRank(wl.train_set, DELAY_S)
    return wl
