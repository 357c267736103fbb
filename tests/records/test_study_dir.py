"""Study directories: planned-run names, the plan's round trip, reading a study back."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from trainscope.errors import TrainscopeError
from trainscope.records import RunWriter, prepare_run_dir
from trainscope.records.study_dir import (
    STUDY_FILE,
    PlannedRun,
    StudyPlan,
    is_study_dir,
    load_study,
    write_study,
)

pytestmark = pytest.mark.timeout(120)


def write_run(study_dir: Path, planned: PlannedRun, **summary: Any) -> Path:
    """A tiny run directory (summary.json and a config) where ``planned`` belongs."""
    run_dir = prepare_run_dir(study_dir / planned.rel_dir)
    writer = RunWriter(run_dir)
    writer.write_config({"train": {"lr": planned.overrides.get("train.lr", 0.05)}})
    writer.log("step", step=1, loss=2.3)
    writer.close()
    writer.write_summary({"status": "completed", "error": None, **summary})
    return run_dir


def two_config_plan() -> StudyPlan:
    """Config "a" (warm-up + 3 repeats) in group main, config "b" (2 repeats) in group side."""
    a = {"labels": {"lr": 0.1}, "overrides": {"train.lr": 0.1}}
    runs = [PlannedRun("a", 0, **a)]
    runs += [PlannedRun("a", k, **a) for k in (1, 2, 3)]
    runs += [PlannedRun("b", k, group="side", overrides={"train.lr": 0.2}) for k in (1, 2)]
    runs.append(PlannedRun("c", 1, applicable=False, reason="needs CUDA"))
    return StudyPlan(kind="demo", base_config={"train": {"epochs": 1}}, options={"x": 1}, runs=runs)


# ------------------------------------------------------------------------- PlannedRun


def test_planned_run_ids_and_dirs():
    warm = PlannedRun("w2-pin", 0)
    assert warm.warmup
    assert warm.id == "w2-pin/warmup"
    assert warm.rel_dir == "runs/w2-pin/warmup"
    rep = PlannedRun("w2-pin", 3)
    assert not rep.warmup
    assert rep.id == "w2-pin/r3"
    assert rep.rel_dir == "runs/w2-pin/r3"
    assert PlannedRun("x", 1).id != PlannedRun("x", 0).id


def test_plan_round_trips_through_plain_data_and_json():
    plan = two_config_plan()
    data = plan.to_dict()
    assert set(data) == {"kind", "options", "base_config", "runs"}
    back = StudyPlan.from_dict(json.loads(json.dumps(data)))
    assert back == plan
    assert back.runs[0].warmup and back.runs[-1].reason == "needs CUDA"
    assert not back.runs[-1].applicable


# --------------------------------------------------------------------- write and load


def test_write_study_then_load_reads_plan_status_and_records(tmp_path):
    plan = two_config_plan()
    write_study(tmp_path, plan, "running", started_at="2024-01-01T00:00:00+00:00")
    data = json.loads((tmp_path / STUDY_FILE).read_text())
    assert data["status"] == "running" and data["schema_version"] == 1
    assert data["started_at"] == "2024-01-01T00:00:00+00:00"
    assert not list(tmp_path.glob(f".{STUDY_FILE}.*"))  # atomic write left no temp file

    by_id = {r.id: r for r in plan.runs}
    write_run(tmp_path, by_id["a/warmup"], wall_time_s=9.0)
    write_run(tmp_path, by_id["a/r1"], wall_time_s=1.0)
    write_run(tmp_path, by_id["b/r2"], wall_time_s=2.0)
    (tmp_path / "runs" / "b" / "r1").mkdir(parents=True)  # started, no summary yet

    study = load_study(tmp_path)
    assert study.path == tmp_path
    assert study.plan == plan
    assert study.status == "running"
    assert study.meta["started_at"] == "2024-01-01T00:00:00+00:00"
    assert "runs" not in study.meta and "kind" not in study.meta
    assert set(study.records) == {"a/warmup", "a/r1", "b/r2"}
    assert study.records["a/r1"].summary["wall_time_s"] == 1.0
    assert study.records["a/r1"].config == {"train": {"lr": 0.1}}
    assert study.records["b/r2"].events("step") == [{"event": "step", "step": 1, "loss": 2.3}]

    # Rewriting the status keeps the plan.
    write_study(tmp_path, plan, "completed")
    again = load_study(tmp_path)
    assert again.status == "completed" and again.plan == plan


def test_completed_measured_configs_and_failed(tmp_path):
    plan = two_config_plan()
    write_study(tmp_path, plan, "completed_with_failures")
    by_id = {r.id: r for r in plan.runs}
    write_run(tmp_path, by_id["a/warmup"], wall_time_s=9.0)
    # Written out of order on purpose: measured() follows the repeat number.
    write_run(tmp_path, by_id["a/r3"], wall_time_s=3.0)
    write_run(tmp_path, by_id["a/r1"], wall_time_s=1.0)
    write_run(tmp_path, by_id["a/r2"], status="failed", error="RuntimeError: boom")
    write_run(tmp_path, by_id["b/r1"], status="running", error=None)
    write_run(tmp_path, by_id["b/r2"], wall_time_s=2.0)

    study = load_study(tmp_path)
    assert study.completed(by_id["a/warmup"]) is not None
    assert study.completed(by_id["a/r1"]).summary["wall_time_s"] == 1.0
    assert study.completed(by_id["a/r2"]) is None  # failed
    assert study.completed(by_id["c/r1"]) is None  # never ran

    measured = study.measured("a")  # warm-up and the failed r2 left out
    assert [rec.summary["wall_time_s"] for rec in measured] == [1.0, 3.0]
    assert [rec.path.name for rec in measured] == ["r1", "r3"]
    assert [rec.summary["wall_time_s"] for rec in study.measured("b")] == [2.0]
    assert study.measured("c") == []
    assert study.measured("nope") == []

    configs = study.configs()
    assert [r.config for r in configs] == ["a", "b", "c"]
    assert configs[0].warmup  # the first planned run of "a" is its warm-up
    assert [r.config for r in study.configs("side")] == ["b"]
    assert study.configs("missing") == []

    # A run still "running" was cut off with its study: interrupted, not failed.
    failed = study.failed()
    assert [(r.id, why) for r, why in failed] == [("a/r2", "RuntimeError: boom")]
    assert [r.id for r in study.interrupted()] == ["b/r1"]


def test_load_study_without_study_json_is_a_clear_error(tmp_path):
    with pytest.raises(TrainscopeError, match="not a study directory"):
        load_study(tmp_path)
    with pytest.raises(TrainscopeError, match="not a study directory"):
        load_study(tmp_path / "missing")
    (tmp_path / STUDY_FILE).write_text("{not json")
    with pytest.raises(TrainscopeError, match="not valid JSON"):
        load_study(tmp_path)


def test_is_study_dir(tmp_path):
    assert not is_study_dir(tmp_path)
    assert not is_study_dir(tmp_path / "missing")
    (tmp_path / "sub" / STUDY_FILE).mkdir(parents=True)  # a folder of that name is not it
    assert not is_study_dir(tmp_path / "sub")
    write_study(tmp_path, two_config_plan(), "running")
    assert is_study_dir(tmp_path)
    assert is_study_dir(str(tmp_path))


@pytest.mark.parametrize(
    ("content", "words"),
    [
        (b"[1, 2]", "holds list, not an object"),
        (b"null", "holds null, not an object"),
        (b"\xff\xfe binary", "is not UTF-8 text"),
        (b'{"status": "x"}', "is not a trainscope study file"),
        (b'{"kind": "loader", "runs": 3}', "is not a trainscope study file"),
    ],
)
def test_a_damaged_study_file_is_one_line(tmp_path, capsys, content, words):
    from trainscope.cli import main

    (tmp_path / "study.json").write_bytes(content)
    with pytest.raises(TrainscopeError, match=words):
        load_study(tmp_path)
    assert main(["report", str(tmp_path), "-q"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and words in err[0] and "internal error" not in err[0]


@pytest.mark.parametrize(
    "run",
    [
        {"config": "../../outside", "repeat": 1},
        {"config": "a/b", "repeat": 1},
        {"config": "a", "repeat": "1"},
        {"config": "a", "repeat": 1, "labels": [1]},
        {"config": "a", "bogus": 1},
        "not a run",
    ],
)
def test_a_damaged_plan_is_one_line(tmp_path, run):
    (tmp_path / "study.json").write_text(json.dumps({"kind": "loader", "runs": [run]}))
    with pytest.raises(TrainscopeError, match="holds a damaged plan"):
        load_study(tmp_path)
