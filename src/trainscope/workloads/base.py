"""The Workload interface: a model, its data splits, its loss and its metrics."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.utils.data import Dataset

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


class ClassificationMetrics:
    """Accumulates loss, accuracy and per-class accuracy over evaluation batches.

    Sums stay on the device and are read once in :meth:`compute`, so evaluation does not
    synchronize per batch.
    """

    def __init__(self, num_classes: int, device: torch.device) -> None:
        self.num_classes = num_classes
        self._loss_sum = torch.zeros((), dtype=torch.float64, device=device)
        self._count = 0
        self._correct = torch.zeros(num_classes, dtype=torch.int64, device=device)
        self._total = torch.zeros(num_classes, dtype=torch.int64, device=device)

    def update(self, outputs: torch.Tensor, targets: torch.Tensor, loss: torch.Tensor) -> None:
        """Add one batch (``loss`` is the batch mean)."""
        n = targets.shape[0]
        self._loss_sum += loss.detach().double() * n
        self._count += n
        hit = outputs.argmax(dim=1) == targets
        self._total += torch.bincount(targets, minlength=self.num_classes)
        self._correct += torch.bincount(targets[hit], minlength=self.num_classes)

    def compute(self) -> dict[str, Any]:
        """Mean loss, overall accuracy, and accuracy per class (None for absent classes)."""
        correct = self._correct.cpu().tolist()
        total = self._total.cpu().tolist()
        return {
            "loss": self._loss_sum.item() / max(self._count, 1),
            "accuracy": sum(correct) / max(sum(total), 1),
            "samples": self._count,
            "per_class_accuracy": [c / t if t else None for c, t in zip(correct, total)],
        }


@dataclass
class Workload:
    """What a run trains: model, train/val/test sets, loss and metrics.

    The user's own workload is any ``package.module:factory`` whose factory takes the
    ``WorkloadConfig`` and returns one of these.
    """

    name: str
    model: nn.Module
    train_set: Dataset
    val_set: Dataset | None
    test_set: Dataset | None
    num_classes: int
    class_names: list[str] = field(default_factory=list)
    loss_fn: LossFn = nn.functional.cross_entropy
    description: str = ""

    def __post_init__(self) -> None:
        if not self.class_names:
            self.class_names = [str(i) for i in range(self.num_classes)]

    def new_metrics(self, device: torch.device) -> ClassificationMetrics:
        """A fresh accumulator for one evaluation pass."""
        return ClassificationMetrics(self.num_classes, device)
