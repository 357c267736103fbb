"""The pieces the study section builders share: configurations with their runs, the
not-applicable list, bar data, a section's tables, and where a report's files are."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.reports.test_honest_numbers import BASE, CPU, Planted
from tests.studies.heap import frozen  # noqa: F401  (a fixture, used by pytestmark)
from trainscope.records.study_dir import load_study
from trainscope.render.document import Bullets, Document, Paragraph, TableBlock
from trainscope.render.outdir import ReportFiles
from trainscope.render.table import Table
from trainscope.reports.run_report import RunReport
from trainscope.reports.section import Section, each_config, not_applicable_list
from trainscope.reports.study_bars import Bars
from trainscope.reports.study_report import StudyReport
from trainscope.studies import precision
from trainscope.studies.base import execute
from trainscope.util.spread import spread

# frozen: the study's garbage collection after each planted run skips the test process's
# heap (tests/studies/heap.py), which was most of these tests' time.
pytestmark = [pytest.mark.timeout(120), pytest.mark.usefixtures("frozen")]


def test_configs_carry_their_runs_and_say_why_they_have_none(tmp_path: Path) -> None:
    # fp16 cannot run on the CPU; bf16's runs all fail: two ways to have no measured run.
    plan = precision.plan(BASE, CPU, repeats=2, precisions=["fp32", "bf16", "fp16"])

    def run_fn(cfg, console):  # type: ignore[no-untyped-def]
        if Path(cfg.out).parent.name == "bf16":
            raise RuntimeError("planted failure")
        return Planted({})(cfg, console)

    execute(plan, tmp_path / "study", say=lambda _: None, run_fn=run_fn)
    study = load_study(tmp_path / "study")
    configs = {c.name: c for c in each_config(study, "precision")}
    assert list(configs) == ["fp32", "bf16", "fp16"]
    assert len(configs["fp32"].runs) == 2
    assert configs["bf16"].runs == [] and configs["bf16"].missing == "no completed run"
    assert configs["fp16"].runs == [] and configs["fp16"].missing == "not applicable"

    doc = Document("t")
    not_applicable_list(study, doc, "device")
    paragraph, bullets = doc.blocks
    assert isinstance(paragraph, Paragraph) and isinstance(bullets, Bullets)
    assert paragraph.text == "Not applicable on this device (not run, not faked):"
    assert [b.split(":")[0] for b in bullets.items] == ["fp16"]


def test_no_not_applicable_list_when_every_configuration_could_run(tmp_path: Path) -> None:
    plan = precision.plan(BASE, CPU, repeats=1, precisions=["fp32"])
    execute(plan, tmp_path / "study", say=lambda _: None, run_fn=Planted({}))
    doc = Document("t")
    not_applicable_list(load_study(tmp_path / "study"), doc, "machine")
    assert doc.blocks == []


def test_bars_keep_a_gap_for_a_configuration_without_runs() -> None:
    bars = Bars()
    bars.add(spread([1.0, 2.0, 4.0]))
    bars.add(None)
    bars.add(spread([3.0]))  # one repeat: no error bar
    assert bars.values == [2.0, None, 3.0]
    assert bars.errors == [(1.0, 2.0), None, None]


def test_add_table_keeps_the_table_and_shows_it() -> None:
    section, doc = Section(), Document("t")
    table = Table(["a"], [["1"]], "caption", "tab:a", "l")
    section.add_table(doc, "a", table)
    assert section.tables == {"a": table}
    assert doc.blocks == [TableBlock(table)]


def test_run_and_study_reports_name_their_files_alike(tmp_path: Path) -> None:
    run = RunReport(tmp_path / "run", tmp_path / "out")
    study = StudyReport(tmp_path / "study", tmp_path / "out", "profile", "completed")
    for report in (run, study):
        assert isinstance(report, ReportFiles)
        assert report.markdown_path == tmp_path / "out" / "report.md"
        assert report.html_path == tmp_path / "out" / "report.html"
