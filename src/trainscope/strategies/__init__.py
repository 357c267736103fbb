"""Parallel strategies behind one interface (:class:`~trainscope.strategies.base.Strategy`).

``make_strategy(name, info, device, options)`` returns the object for a ``--strategy``
name, from its entry in :mod:`trainscope.registry` (which says where its class is, and
which ``dist.*`` options it takes).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from trainscope import registry

if TYPE_CHECKING:
    import torch

    from trainscope.runtime.dist import DistInfo
    from trainscope.strategies.base import Strategy


def make_strategy(
    name: str, info: DistInfo, device: torch.device, options: Mapping[str, Any] | None = None
) -> Strategy:
    """The strategy object for ``name``; ``options`` maps its registered ``dist.*`` keys
    (``dist.bucket_mb``) to values, passed to its constructor by their last part."""
    entry = registry.STRATEGIES[name]
    kwargs = {key.rpartition(".")[2]: (options or {}).get(key) for key in entry.options}
    return registry.load(entry.target)(info, device, **kwargs)


def strategy_options(dist: Any) -> dict[str, Any]:
    """The ``dist.*`` options of a DistConfig that some strategy takes (for make_strategy)."""
    return {key: getattr(dist, key.rpartition(".")[2]) for key in registry.strategy_options()}
