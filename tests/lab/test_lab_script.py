"""``trainscope lab --script train.py``: the chapters a script answers, measured on it
unchanged; the others said to need trainscope's reference workloads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.script.helpers import write_slow_data
from trainscope.cli import main
from trainscope.lab.chapters import CHAPTERS
from trainscope.lab.script_chapters import SCRIPT_CHAPTERS, script_chapters


def test_every_chapter_is_either_a_study_of_the_script_or_said_to_need_the_workloads() -> None:
    chapters = script_chapters(["train.py", "--lr", "1"], threads="2")
    assert [c.number for c in chapters] == [c.number for c in CHAPTERS]
    for c in chapters:
        if c.slug in SCRIPT_CHAPTERS:
            assert c.study and c.after == ("train.py", "--lr", "1") and not c.elsewhere
            assert c.argv(True, None)[-2:] == ["--threads", "2"]  # the script comes last
        else:
            assert c.study is None and c.maker is None and c.elsewhere


@pytest.mark.slow
def test_a_quick_lab_of_a_script_measures_its_chapters_on_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    write_slow_data(tmp_path, "train.py", batches=100, sleep=0.002)
    # the workers chapter at its smallest: one run of each of two worker counts
    small = ("loader", "workers?", ("--iter-workers", "0,2", "--repeats", "1", "--no-warmup",
                                    "--steps", "6"), ())  # fmt: skip
    monkeypatch.setitem(SCRIPT_CHAPTERS, "workers", small)
    args = ["lab", "--quick", "--only", "1,5", "--threads", "1", "--out", "lab", "--",
            "train.py", "3"]  # fmt: skip
    assert main(args) == 0
    record = json.loads((tmp_path / "lab" / "lab.json").read_text())
    assert record["script"] == ["train.py", "3"]
    states = record["chapters"]
    assert states["1"]["status"] == "elsewhere" and states["5"]["status"] == "measured"
    runs = sorted((tmp_path / "lab" / "studies" / "05-workers" / "runs").glob("w*/r*/summary.json"))
    assert len(runs) == 2  # workers 0 and 2, one repeat each
    for path in runs:
        s = json.loads(path.read_text())
        assert s["source"]["argv"] == ["train.py", "3"] and s["cpu"]["threads"] == 1
    md = (tmp_path / "lab" / "report" / "report.md").read_text()
    assert "workers?" in md  # the chapter's question on a script
    assert "This chapter is not measured in a lab of a script" in md
    assert "Your script under each setting" in md
    # the same folder, another script: refused, nothing changed
    write_slow_data(tmp_path, "other.py", batches=100, sleep=0.002)
    capsys.readouterr()
    assert main(["lab", "--quick", "--only", "1,5", "--out", "lab", "--", "other.py", "3"]) == 2
    assert "was made of the command train.py 3" in capsys.readouterr().err


def test_a_lab_refuses_threads_without_a_script_and_a_missing_script(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["lab", "--threads", "2", "--out", "lab"]) == 2
    assert "--threads applies to a lab of a script" in capsys.readouterr().err
    assert main(["lab", "--script", "nothere.py", "--out", "lab"]) == 2
    assert "nothere.py: no such script" in capsys.readouterr().err
    assert not (tmp_path / "lab").exists()
