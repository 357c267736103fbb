"""Parallel strategies behind one interface (:class:`~trainscope.strategies.base.Strategy`).

``make_strategy(name, info, device, bucket_mb=...)`` returns the object for a ``--strategy`` name.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

    from trainscope.runtime.dist import DistInfo
    from trainscope.strategies.base import Strategy


def make_strategy(
    name: str, info: DistInfo, device: torch.device, *, bucket_mb: float | None = None
) -> Strategy:
    """The strategy object for ``name`` (names as in ``trainscope.config.STRATEGIES``);
    ``bucket_mb`` is the hand-written allreduce's bucket size (None: per tensor)."""
    from trainscope.strategies.allreduce import AllReduceStrategy
    from trainscope.strategies.ddp import DDPStrategy
    from trainscope.strategies.dp import DataParallelStrategy
    from trainscope.strategies.fsdp import FSDPStrategy
    from trainscope.strategies.gather_scatter import GatherScatterStrategy
    from trainscope.strategies.single import Single

    classes = {
        "single": Single,
        "dp": DataParallelStrategy,
        "ddp": DDPStrategy,
        "fsdp": FSDPStrategy,
        "gather-scatter": GatherScatterStrategy,
        "allreduce": AllReduceStrategy,
    }
    if name == "allreduce":
        return AllReduceStrategy(info, device, bucket_mb)
    return classes[name](info, device)
