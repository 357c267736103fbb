"""The lab's chapters made of several commands, each end to end at its smallest: the
commands run into the chapter's folder, a second lab run reruns none of them, and every
figure of the chapter's short answer is traced back to the records it links."""

from __future__ import annotations

import json
import re
import statistics
from pathlib import Path

import pytest

from trainscope.cli import main
from trainscope.lab import chapter_dp, chapter_memory, chapter_runs


def _lab(out: Path, only: str, data: Path | None = None) -> dict[str, dict[str, object]]:
    argv = ["lab", "--quick", "--only", only, "--out", str(out), "-q"]
    assert main([*argv, *(["--data", str(data)] if data else [])]) == 0
    return json.loads((out / "lab.json").read_text())["chapters"]


def _short_answer(out: Path, number: int) -> str:
    md = (out / "report" / "report.md").read_text()
    chapter = md.split(f"\n## {number}. ", 1)[1].split("\n## ", 1)[0]
    return chapter.split("### Short answer", 1)[1].split("### The measurement", 1)[0]


def _mtimes(folder: Path) -> dict[Path, int]:
    """The records a chapter's commands wrote (chapter.json, its state, is rewritten)."""
    return {p: p.stat().st_mtime_ns for p in folder.rglob("*.json") if p.name != "chapter.json"}


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_dp_ddp_chapter_runs_the_example_scripts_and_shows_their_diffs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(chapter_dp.BUDGET, True, ("8", 2))
    out = tmp_path / "lab"
    state = _lab(out, "4")["4"]
    assert state["status"] == "measured"
    folder = Path(str(state["study_dir"]))
    records = {s: sorted(folder.glob(f"{s}-r*.json")) for s in chapter_dp.SCRIPTS}
    assert all(len(r) == 2 for r in records.values())
    md = (out / "report" / "report.md").read_text()
    assert "+++ ddp.py" in md and "+    model = DDP(" in md and "+++ dp.py" in md
    # Every step time in the short answer is a median of the records' own medians.
    medians = {
        s: statistics.median(
            statistics.median(json.loads(p.read_text())["step_times_s"]) * 1e3 for p in paths
        )
        for s, paths in records.items()
    }
    quoted = re.findall(r"(\d+\.\d+) ms vs (\d+\.\d+) ms", _short_answer(out, 4))
    assert len(quoted) == 2
    for (a, b), s in zip(quoted, ("dp", "ddp")):
        assert float(a) == pytest.approx(medians[s], rel=5e-3)
        assert float(b) == pytest.approx(medians["single"], rel=5e-3)
    # Continued: nothing reruns.
    stamps = _mtimes(folder)
    _lab(out, "4")
    assert _mtimes(folder) == stamps


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_memory_chapter_estimates_gpt2_xl_and_measures_a_small_gpt(
    tmp_path: Path, shared_data: Path
) -> None:
    out = tmp_path / "lab"
    state = _lab(out, "11", shared_data)["11"]
    assert state["status"] == "measured"
    folder = Path(str(state["study_dir"]))
    short = _short_answer(out, 11)
    assert "Estimate:" in short and "Measured here" in short
    # Every size in the short answer is one of the JSON answers' byte counts, formatted.
    counts: set[str] = set()

    def walk(x: object) -> None:
        if isinstance(x, dict):
            for v in x.values():
                walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)
        elif isinstance(x, int) and not isinstance(x, bool):
            counts.add(chapter_memory.gb(x))

    for p in folder.glob("*.json"):
        walk(json.loads(p.read_text()))
    sizes = re.findall(r"\d+(?:\.\d+)? (?:GB|MB|kB)", short)
    assert len(sizes) >= 10
    # Sums of two counts (weights + allowances) are the one derived figure: check the rest.
    derived = {chapter_memory.gb(sum(
        json.loads((folder / "gpt2-xl-none.json").read_text())["shardings"]["ddp"][k]
        for k in ("communication", "temporaries")))}  # fmt: skip
    assert set(sizes) <= counts | derived
    assert "1,557,611,200" in short


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_int8_chapter_trains_then_quantizes_and_quotes_quantize_json(
    tmp_path: Path, shared_data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("torchao")
    monkeypatch.setitem(chapter_runs.INT8_EPOCHS, True, "1")
    out = tmp_path / "lab"
    state = _lab(out, "12", shared_data)["12"]
    assert state["status"] == "measured"
    quant = json.loads((Path(str(state["study_dir"])) / "run" / "quantize.json").read_text())
    short = _short_answer(out, 12)
    for split in ("fp32", "int8"):
        assert f"{100 * quant[split]['accuracy']:.2f}%" in short
    sizes = quant["bytes"]
    assert f"{sizes['int8']['model'] / sizes['fp32']['model']:.2f}x" in short


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_time_chapter_profiles_asks_the_doctor_and_remeasures_its_fix(
    tmp_path: Path, shared_data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(chapter_runs.PROFILE, True, ("20", "1"))
    monkeypatch.setitem(chapter_runs.APPLY, True, ("8", "2"))
    out = tmp_path / "lab"
    state = _lab(out, "6", shared_data)["6"]
    assert state["status"] == "measured"
    folder = Path(str(state["study_dir"]))
    findings = json.loads((folder / "doctor.json").read_text())
    short = _short_answer(out, 6)
    assert "Biggest stage" in short
    if findings:  # the doctor's top problem is quoted as it wrote it, and re-measured
        assert findings[0]["problem"].split(":")[0] in short
        assert (folder / "doctor" / "study.json").is_file() == any(f.get("fix") for f in findings)
    commands = json.loads((folder / "chapter.json").read_text())["commands"]
    assert commands[1].startswith("trainscope study profile")
