"""Fixtures of the estimator's tests."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _one_thread(one_thread: None) -> None:
    """Every estimator test on one intra-op thread (``one_thread``: tests/conftest.py)."""
