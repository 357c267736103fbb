"""Fixtures shared by the report tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.reports.runs import COMPLETED, write_run


@pytest.fixture
def completed(tmp_path: Path) -> Path:
    """A completed CPU run directory with 20 step events over 2 epochs."""
    return write_run(tmp_path, "run-cpu", COMPLETED)
