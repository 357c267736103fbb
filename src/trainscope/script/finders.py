"""What the hooks look for in the script's objects: a batch's size, the scheduler classes
whose ``step`` is timed."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch.optim.lr_scheduler import LRScheduler


def scheduler_classes(max_found: int = 64) -> list[type]:
    """``torch.optim.lr_scheduler.LRScheduler`` and each subclass with a ``step`` of its
    own (ReduceLROnPlateau, SequentialLR, ...): every scheduler step goes through one of
    them (a scheduler inside SequentialLR is a stage within the same stage)."""
    found: list[type] = []
    todo: list[type] = [LRScheduler]
    while todo and len(found) < max_found:
        cls = todo.pop()
        if "step" in cls.__dict__ and cls not in found:
            found.append(cls)
        todo.extend(cls.__subclasses__())
    return found


def _first_tensor(obj: Any, depth: int = 0) -> torch.Tensor | None:
    """The first tensor in a batch (a tensor, or nested in a tuple, list or dict)."""
    if isinstance(obj, torch.Tensor):
        return obj
    if depth > 3:
        return None
    # Mapping, not dict: Hugging Face's batches are BatchEncoding (a UserDict)
    items = (
        obj.values() if isinstance(obj, Mapping) else obj if isinstance(obj, (list, tuple)) else ()
    )
    for item in items:
        found = _first_tensor(item, depth + 1)
        if found is not None:
            return found
    return None


def batch_size(obj: Any) -> int:
    """The first dimension of a batch's first tensor (0: none found)."""
    t = _first_tensor(obj)
    return int(t.shape[0]) if t is not None and t.dim() > 0 else 0


__all__ = ["batch_size", "scheduler_classes"]
