"""Fixtures of the script tests (scripts the tests write, profiled where they lie)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The test's own folder, made the current one: scripts are written and run here."""
    monkeypatch.chdir(tmp_path)
    return tmp_path
