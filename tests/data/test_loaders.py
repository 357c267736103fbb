"""Tests for trainscope.data.loaders: a training loader that would yield no batch."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import TensorDataset

from trainscope.config import DataConfig
from trainscope.data.loaders import make_loader
from trainscope.errors import DataError

CPU = torch.device("cpu")


def _data(n: int = 10) -> TensorDataset:
    return TensorDataset(torch.randn(n, 1, 4, 4), torch.arange(n) % 3)


@pytest.mark.parametrize("loader", ["torch", "fast"])
def test_drop_last_with_a_batch_larger_than_the_data_is_refused(loader: str) -> None:
    # Without drop_last, a batch larger than the data is one batch of all of it (as in
    # PyTorch); evaluation loaders never drop. Only the training loader with drop_last
    # would yield nothing, and the run train on nothing.
    big = DataConfig(batch_size=100_000, loader=loader)
    batches = list(make_loader(_data(), big, train=True, device=CPU))
    assert len(batches) == 1 and len(batches[0][1]) == 10
    cfg = DataConfig(batch_size=100_000, loader=loader, drop_last=True)
    assert len(make_loader(_data(), cfg, train=False, device=CPU)) == 1
    with pytest.raises(DataError) as exc:
        make_loader(_data(), cfg, train=True, device=CPU)
    message = str(exc.value)
    assert "batch size 100000 is larger than the 10 training samples" in message
    assert "drop_last leaves no batch" in message and "\n" not in message
    with pytest.raises(DataError, match=r"than the 5 training samples per process"):
        make_loader(_data(), cfg, train=True, device=CPU, batch_size=6, rank=0, world_size=2)
