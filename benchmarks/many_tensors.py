"""A workload with many parameter tensors, for the gradient-sync benchmark.

A deep MLP (``DEPTH`` linear layers, each a weight and a bias: 2 x DEPTH tensors) on
random data. Hand-written sync pays one collective per tensor; DDP packs them into
buckets. Use it as a user workload:

    PYTHONPATH=benchmarks trainscope run --workload many_tensors:workload ...
"""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.data import TensorDataset

from trainscope.config import WorkloadConfig
from trainscope.workloads.base import Workload

DEPTH = 32  # 64 parameter tensors
WIDTH = 256
FEATURES = 64
CLASSES = 10


class DeepMLP(nn.Module):
    """DEPTH linear layers with ReLU between them; ``blocks`` for FSDP wrapping."""

    def __init__(self) -> None:
        super().__init__()
        sizes = [FEATURES] + [WIDTH] * (DEPTH - 1) + [CLASSES]
        self.blocks = nn.ModuleList(nn.Linear(a, b) for a, b in zip(sizes, sizes[1:]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i, layer in enumerate(self.blocks):
            x = layer(x)
            if i < len(self.blocks) - 1:
                x = torch.relu(x)
        return x


def workload(cfg: WorkloadConfig) -> Workload:
    """Random features and labels (``cfg.synthetic_samples`` training samples)."""
    g = torch.Generator().manual_seed(0)
    n = cfg.synthetic_samples

    def split(count: int) -> TensorDataset:
        return TensorDataset(
            torch.randn(count, FEATURES, generator=g),
            torch.randint(0, CLASSES, (count,), generator=g),
        )

    model = DeepMLP()
    return Workload(
        name="many_tensors",
        model=model,
        train_set=split(n),
        val_set=split(max(n // 8, 1)),
        test_set=None,
        num_classes=CLASSES,
        description=f"deep MLP, {DEPTH} layers x {WIDTH}, {2 * DEPTH} parameter tensors",
    )
