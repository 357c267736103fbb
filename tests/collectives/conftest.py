"""Fixtures of the collectives tests: one real gloo world per world size, run once."""

from __future__ import annotations

from typing import Any

import pytest

from tests.collectives.spawn import run_world


@pytest.fixture(scope="session", params=[2, 3], ids=lambda n: f"n{n}")
def world(request: pytest.FixtureRequest) -> int:
    """The number of processes: 2 and 3, as the issue asks."""
    return request.param


@pytest.fixture(scope="session")
def ranks(world: int, tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """Every rank's results from one world of ``world`` gloo processes on 127.0.0.1."""
    return run_world(world, tmp_path_factory.mktemp(f"world{world}"))
