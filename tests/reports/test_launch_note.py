"""A failed launch's cause in the run report: said once, whether or not the main record's
error already names it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.diagnosis.test_rules import write_run
from trainscope.reports.run_report import build_run_report

CAUSE = "rank 1 exited with status 1 (its log: ranks/1.log)"


@pytest.mark.parametrize(
    ("error", "shown"),
    [
        (f"the launch failed: {CAUSE}", 0),  # the error names the cause already
        ("terminated by SIGTERM (the run was stopped from outside)", 1),  # only the effect
    ],
)
def test_the_launchs_cause_is_said_once(tmp_path: Path, error: str, shown: int) -> None:
    run = tmp_path / "run"
    write_run(run, summary={"status": "failed", "error": error, "launch_error": CAUSE})
    build_run_report(run)
    md = (run / "report" / "report.md").read_text()
    assert md.count("What ended the launch") == shown
    assert md.count(CAUSE) == 1
