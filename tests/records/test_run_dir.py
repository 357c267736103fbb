"""Run directories: preparation, atomic summaries, tolerant reading."""

from __future__ import annotations

import json

import pytest

from trainscope.errors import TrainscopeError
from trainscope.records import RunWriter, atomic_write_json, load_run, prepare_run_dir
from trainscope.records.run_dir import RecordWarning


def test_prepare_refuses_non_empty_dir_unless_overwrite(tmp_path):
    d = tmp_path / "run"
    owned = prepare_run_dir(d)
    owned.release()
    (d / "summary.json").write_text("{}")
    (d / "notes.txt").write_text("mine")
    with pytest.raises(TrainscopeError, match="not empty"):
        prepare_run_dir(d)
    prepare_run_dir(d, overwrite=True).release()
    assert not (d / "summary.json").exists()
    assert (d / "notes.txt").read_text() == "mine"  # only run files are removed


def test_prepare_never_overwrites_a_directory_it_did_not_write(tmp_path):
    d = tmp_path / "run"
    d.mkdir()
    (d / "summary.json").write_text('{"status": "mine"}')
    with pytest.raises(TrainscopeError, match="no trainscope marker"):
        prepare_run_dir(d, overwrite=True)
    assert (d / "summary.json").read_text() == '{"status": "mine"}'


def test_prepare_refuses_a_file_and_unwritable_places(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(TrainscopeError, match="not a directory"):
        prepare_run_dir(f)
    with pytest.raises(TrainscopeError, match="not writable"):
        prepare_run_dir(f / "sub")


def test_records_are_strict_json(tmp_path):
    """No bare NaN/Infinity: every JSON parser must read a record."""
    w = RunWriter(tmp_path)
    w.log("step", step=1, loss=float("nan"), stages={"forward": float("inf")})
    w.write_summary({"status": "failed", "mean": float("-inf"), "vals": [1.0, float("nan")]})
    w.close()

    def strict(text: str) -> object:
        return json.loads(text, parse_constant=lambda c: pytest.fail(f"bare {c} in JSON"))

    line = strict((tmp_path / "metrics.jsonl").read_text())
    assert line["loss"] is None and line["stages"]["forward"] is None
    summary = strict((tmp_path / "summary.json").read_text())
    assert summary["mean"] is None and summary["vals"] == [1.0, None]


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


@pytest.mark.parametrize(
    "content, words",
    [
        (b"[1, 2]", "holds list, not an object"),
        (b"null", "holds null, not an object"),
        (b"\xff\xfe\x00binary", "is not UTF-8 text"),
        (b'"text"', "holds str"),
    ],
)
def test_load_run_summary_that_is_not_an_object(tmp_path, content, words):
    (tmp_path / "summary.json").write_bytes(content)
    with pytest.raises(TrainscopeError, match=words):
        load_run(tmp_path)


def test_load_run_leaves_out_what_it_cannot_read_and_says_so(tmp_path):
    (tmp_path / "summary.json").write_text('{"status": "completed"}')
    (tmp_path / "env.json").write_text("{broken")
    (tmp_path / "config.yaml").write_bytes(b"\xff\xfe: [")
    (tmp_path / "metrics.jsonl").write_bytes(
        b'{"event": "step", "step": 1}\n\xff\xfe not utf-8\n[1]\n{"event": "step", "step": 2}\n'
    )
    with pytest.warns(RecordWarning) as caught:
        rec = load_run(tmp_path)
    assert [e["step"] for e in rec.events("step")] == [1, 2]
    assert rec.env == {} and rec.config == {}
    text = " ".join(str(w.message) for w in caught)
    assert "env.json" in text and "skipped 2 line(s)" in text and "config.yaml" in text
