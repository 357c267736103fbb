"""Fixtures shared by the report tests."""

from __future__ import annotations

import copy
import dataclasses
import shutil
from pathlib import Path

import pytest

from tests.reports.cheap import unsaved_figures
from tests.reports.runs import COMPLETED, write_run
from trainscope.reports import RunReport, build_run_report


@pytest.fixture
def completed(tmp_path: Path) -> Path:
    """A completed CPU run directory with 20 step events over 2 epochs."""
    return write_run(tmp_path, "run-cpu", COMPLETED)


@pytest.fixture
def cheap_figures(monkeypatch: pytest.MonkeyPatch) -> None:
    """Report figures built but not saved (tests/reports/cheap.py): for tests of what a
    report says, not of its figures."""
    unsaved_figures(monkeypatch)


@pytest.fixture(scope="session")
def completed_report_master(tmp_path_factory: pytest.TempPathFactory) -> RunReport:
    """The report of :func:`completed`, built once per test process (a second or more:
    its figures). Never handed to a test: :func:`completed_report` copies it."""
    run = write_run(tmp_path_factory.mktemp("completed-report"), "run-cpu", COMPLETED)
    return build_run_report(run)


@pytest.fixture
def completed_report(completed_report_master: RunReport, tmp_path: Path) -> RunReport:
    """This test's own copy of :func:`completed` with its report built (``run-cpu/report``
    in ``tmp_path``): for tests that read a report, not of how it is built."""
    master = completed_report_master
    run = Path(shutil.copytree(master.run_dir, tmp_path / master.run_dir.name, symlinks=True))

    def moved(path: Path) -> Path:
        return run / path.relative_to(master.run_dir)

    return dataclasses.replace(
        master,
        run_dir=run,
        out_dir=moved(master.out_dir),
        files=[moved(p) for p in master.files],
        tables=copy.deepcopy(master.tables),
    )
