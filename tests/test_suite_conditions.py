"""The conditions the suite runs under (tests/conftest.py), so that it passes on a busy or
slow machine: one torch thread per test process, and timeouts that grow with how much
slower the machine runs than the one they were sized on (a hang is still caught)."""

from __future__ import annotations

import os

import pytest
import torch

import tests.conftest as conftest


def test_every_test_process_uses_one_torch_thread() -> None:
    # Two xdist workers with a thread per core each made the default digits run take
    # 167 s instead of 3 on a busy 2-core machine, and module fixtures time out.
    assert os.environ["OMP_NUM_THREADS"] == "1"
    assert torch.get_num_threads() == 1


def test_timeouts_grow_with_the_measured_slowness(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(conftest.SLOWNESS_ENV, "2.5")
    assert conftest.measured_slowness() == 2.5
    monkeypatch.setenv(conftest.SLOWNESS_ENV, "0.3")
    assert conftest.measured_slowness() == 1.0  # never shorter than sized
    monkeypatch.delenv(conftest.SLOWNESS_ENV)
    assert conftest.measured_slowness() >= 1.0


class _Item:
    def __init__(self, marker: pytest.Mark | None) -> None:
        self.markers = [marker] if marker is not None else []

    def get_closest_marker(self, name: str) -> pytest.Mark | None:
        return next((m for m in self.markers if m.name == name), None)

    def add_marker(self, marker: pytest.MarkDecorator, append: bool = True) -> None:
        self.markers.insert(len(self.markers) if append else 0, marker.mark)


class _Config:
    def getini(self, name: str) -> str:
        return "300" if name == "timeout" else ""


def test_every_test_timeout_is_scaled_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(conftest, "SLOWNESS", 3.0)
    marked, default = _Item(pytest.mark.timeout(60).mark), _Item(None)
    conftest.pytest_collection_modifyitems(_Config(), [marked, default])  # type: ignore[arg-type]
    assert marked.get_closest_marker("timeout").args == (180.0,)
    assert default.get_closest_marker("timeout").args == (900.0,)
    assert conftest.scaled(10) == 30.0
