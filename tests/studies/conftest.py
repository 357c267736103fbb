"""Fixtures of the study tests: each runs with the test process's heap frozen, so the
garbage collection a study makes after each run skips it (see tests/studies/heap.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.studies.heap import frozen_heap


@pytest.fixture(autouse=True)
def _frozen_heap() -> Iterator[None]:
    with frozen_heap():
        yield
