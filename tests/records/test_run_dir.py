"""Run directories: preparation, atomic summaries, tolerant reading."""

from __future__ import annotations

import json

import pytest

from trainscope.errors import TrainscopeError
from trainscope.records import RunWriter, atomic_write_json, load_run, prepare_run_dir


def test_prepare_refuses_non_empty_dir_unless_overwrite(tmp_path):
    d = tmp_path / "run"
    d.mkdir()
    (d / "summary.json").write_text("{}")
    (d / "notes.txt").write_text("mine")
    with pytest.raises(TrainscopeError, match="not empty"):
        prepare_run_dir(d)
    prepare_run_dir(d, overwrite=True)
    assert not (d / "summary.json").exists()
    assert (d / "notes.txt").read_text() == "mine"  # only run files are removed


def test_prepare_refuses_a_file_and_unwritable_places(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(TrainscopeError, match="not a directory"):
        prepare_run_dir(f)
    with pytest.raises(TrainscopeError, match="not writable"):
        prepare_run_dir(f / "sub")


def test_atomic_write_leaves_no_temp_files(tmp_path):
    p = tmp_path / "summary.json"
    atomic_write_json(p, {"a": 1})
    atomic_write_json(p, {"a": 2})
    assert json.loads(p.read_text()) == {"a": 2}
    assert [x.name for x in tmp_path.iterdir()] == ["summary.json"]


def test_load_run_skips_a_half_written_last_line(tmp_path):
    w = RunWriter(tmp_path)
    w.log("step", step=1, loss=2.0)
    w.log("step", step=2, loss=1.5)
    w.close()
    with open(tmp_path / "metrics.jsonl", "a") as f:
        f.write('{"event": "step", "ste')  # a killed run's last line
    w.write_summary({"status": "running"})
    rec = load_run(tmp_path)
    assert [e["step"] for e in rec.events("step")] == [1, 2]
    assert rec.summary["status"] == "running" and rec.summary["schema_version"] == 1


def test_load_run_errors(tmp_path):
    with pytest.raises(TrainscopeError, match="no summary.json"):
        load_run(tmp_path)
    (tmp_path / "summary.json").write_text("{not json")
    with pytest.raises(TrainscopeError, match="not valid JSON"):
        load_run(tmp_path)
    with pytest.raises(TrainscopeError, match="not a directory"):
        load_run(tmp_path / "missing")
