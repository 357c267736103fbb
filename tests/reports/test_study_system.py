"""The study reports' system figure (issue 43): a configuration with too few samples of
the system sampler is not drawn as a line of two points; the report says so instead."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.reports.cheap import unsaved_figures
from trainscope.records.run_dir import RunRecord
from trainscope.records.study_dir import PlannedRun, StudyPlan, StudyRecord
from trainscope.render.document import Document
from trainscope.reports.study_system import MIN_SAMPLES, system_figure, system_series


def _study(tmp_path: Path, samples: dict[str, int]) -> StudyRecord:
    """A precision study whose one run per precision recorded ``samples`` system lines."""
    planned = [PlannedRun(p, 1, labels={"precision": p}) for p in samples]
    sample = {"cpu_percent": 90.0, "rss_bytes": 2**28}
    system = {p: [{"mono": float(i), **sample} for i in range(n)] for p, n in samples.items()}
    records = {
        r.id: RunRecord(tmp_path / r.rel_dir, {"status": "completed"}, system=system[r.config])
        for r in planned
    }
    plan = StudyPlan("precision", {}, {}, planned)
    return StudyRecord(tmp_path, plan, "completed", {}, records)


def test_too_few_samples_are_said_not_drawn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    unsaved_figures(monkeypatch)
    study = _study(tmp_path, {"fp32": 2, "bf16": MIN_SAMPLES})
    assert list(system_series(study, "precision")) == ["bf16"]
    doc = Document("t")
    system_figure(study, doc, tmp_path / "plots" / "system.png", "precision")
    md = doc.to_markdown(tmp_path)
    assert md.count("![") == 1  # the figure, with bf16's line only
    assert f"fp32 (2 samples): too few to draw (at least {MIN_SAMPLES} needed" in md


def test_no_figure_when_no_configuration_has_enough(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    unsaved_figures(monkeypatch)
    study = _study(tmp_path, {"fp32": 2, "bf16": 3})
    doc = Document("t")
    system_figure(study, doc, tmp_path / "plots" / "system.png", "precision")
    md = doc.to_markdown(tmp_path)
    assert "![" not in md and not (tmp_path / "plots" / "system.png").exists()
    assert "fp32 (2 samples), bf16 (3 samples): too few to draw" in md
