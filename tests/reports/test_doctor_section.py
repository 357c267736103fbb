"""The run report's "What to fix" is the doctor's diagnosis of the same record."""

from __future__ import annotations

import math
from pathlib import Path

from tests.diagnosis.test_rules import HEALTHY, write_run
from trainscope.diagnosis import diagnose
from trainscope.reports.run_report import build_run_report


def test_the_report_lists_the_doctors_findings_with_their_fix(tmp_path: Path) -> None:
    run = write_run(tmp_path / "r", {**HEALTHY, "data_wait": 0.003})
    report = build_run_report(run, tmp_path / "out")
    md = Path(report.markdown_path).read_text()
    section = md.split("## What to fix (trainscope doctor)\n", 1)[1].split("\n## ", 1)[0]
    (finding,) = diagnose(run).findings
    assert f"- **major**, input-bound: {finding.problem}" in section
    assert f"`{finding.command}`" in section


def test_a_healthy_run_has_nothing_to_fix_in_its_report(tmp_path: Path) -> None:
    report = build_run_report(write_run(tmp_path / "ok"), tmp_path / "out")
    md = Path(report.markdown_path).read_text()
    assert "## What to fix (trainscope doctor)\n\nNothing to fix beyond the noise" in md


def test_record_text_in_the_findings_is_escaped(tmp_path: Path) -> None:
    hostile = {"status": "failed", "error": "non-finite <script>alert(1)</script> `x` *y*"}
    run = write_run(tmp_path / "r", losses=[2.0] * 5 + [math.nan] * 35, summary=hostile)
    report = build_run_report(run, tmp_path / "out")
    html = Path(report.html_path).read_text()
    assert "<script>alert(1)</script>" not in html and "&lt;script&gt;" in html
