"""trainscope lab run end to end: one chapter measured with tiny settings and the
document's numbers traced to the records, a lab continued after it stopped, --from, and
the refusals (another budget in the same folder, a folder that is not a lab's, a --from
folder that is not a study).

The measured lab (chapter 5 at its smallest, chapters 3 and 7 without their data) is made
once per module; each test that reads or continues it works on its own copy. The studies
run in this process (the loader study has no process per run): nothing here is launched.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.lab.test_document import hide_pdflatex
from tests.reports.browser import browser_problems, find_chromium
from tests.reports.latex import fit_problems
from trainscope.cli import main
from trainscope.errors import ConfigError
from trainscope.lab import chapters as lab_chapters
from trainscope.lab.chapters import CHAPTERS, parse_only

# The loader chapter at its smallest: 2 worker counts, one epoch, one repeat.
TINY = ("--workers", "0,1", "--sweep-epochs", "1", "--iter-workers", "0", "--repeats", "1",
        "--iter-epochs", "1", "--iter-steps", "5", "--no-warmup")  # fmt: skip


@pytest.fixture(scope="module")
def tiny_loader_chapter() -> Iterator[None]:
    """Chapter 5 with the tiny settings, in place of its quick ones."""
    tiny = [dataclasses.replace(c, quick=TINY) if c.number == 5 else c for c in CHAPTERS]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(lab_chapters, "CHAPTERS", tuple(tiny))
        yield


@pytest.fixture(scope="module")
def measured_lab(tmp_path_factory: pytest.TempPathFactory, tiny_loader_chapter: None) -> Path:
    """``trainscope lab --quick --only 3,5,7`` without --data, made once: chapter 5
    measured, 3 and 7 waiting for their data. Read only: tests copy it (:func:`_copy`)."""
    out = tmp_path_factory.mktemp("measured-lab") / "lab"
    assert main(["lab", "--quick", "--only", "3,5,7", "--out", str(out), "-q"]) == 0
    return out


def _copy(lab: Path, dest: Path) -> tuple[Path, dict[str, dict[str, str]]]:
    """A copy of ``lab`` at ``dest`` and its chapters' states, their study folders those
    of the copy."""
    shutil.copytree(lab, dest)
    states = json.loads((dest / "lab.json").read_text())["chapters"]
    for state in states.values():
        if state.get("study_dir"):
            state["study_dir"] = str(dest / Path(state["study_dir"]).relative_to(lab))
    return dest, states


def _numbers(text: str) -> set[str]:
    """The decimal numbers of a text (thousands separators dropped)."""
    return {m.replace(",", "") for m in re.findall(r"\d[\d,]*\.\d+", text)}


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_chapter_measured_end_to_end_and_its_numbers_come_from_its_records(
    tmp_path: Path, measured_lab: Path
) -> None:
    out, states = _copy(measured_lab, tmp_path / "lab")
    assert states["5"]["status"] == "measured"
    assert states["3"]["status"] == states["7"]["status"] == "needs data"  # no --data
    report = out / "report"
    md = (report / "report.md").read_text()
    html = (report / "report.html").read_text()
    assert "## 5. How many DataLoader workers?" in md and "### Short answer" in md
    assert "its data was not given" in md and "tinyshakespeare" in md  # chapters 3, 7
    assert "trainscope study loader" in md and "<img" in html
    assert (report / "tables.tex").read_text().count("\\begin{table}") >= 1
    # The whole document as LaTeX, and as a PDF with nothing sticking out of its pages.
    assert "How many DataLoader workers?" in (report / "report.tex").read_text()
    if shutil.which("pdflatex"):
        assert (report / "report.pdf").read_bytes().startswith(b"%PDF")
        assert fit_problems((report / "report.log").read_text(errors="replace")) == []
    # The HTML in a real browser: no broken image, no code block wider than the page.
    if find_chromium() is not None:
        shot = tmp_path / "lab.png"
        assert browser_problems(report / "report.html", screenshot=shot, visible=["img"]) == []
        assert shot.stat().st_size > 10_000
    # Every decimal number in the chapter's short answer is in the study's own report,
    # which is built from the run records alone (the chapter links their folder).
    short = md.split("### Short answer", 1)[1].split("### The measurement", 1)[0]
    study = Path(states["5"]["study_dir"])
    # The chapter names each configuration's run folders: each is a run of the study.
    records = md.split("Every figure in this chapter comes from", 1)[1].split("\n## ", 1)[0]
    named = re.findall(r"`(runs/[^`]+)`", records)
    assert named and all((study / p / "summary.json").is_file() for p in named)
    assert main(["report", str(study), "-q"]) == 0
    source = (study / "report" / "report.md").read_text()
    assert _numbers(short) and _numbers(short) <= _numbers(source)


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.usefixtures("tiny_loader_chapter")
def test_a_lab_continues_where_it_stopped_and_keeps_its_budget(
    tmp_path: Path, measured_lab: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hide_pdflatex(monkeypatch)  # the documents' PDF is checked in the test above
    out, _ = _copy(measured_lab, tmp_path / "lab")  # its chapter 5 measured, exit status 0
    runs = sorted((out / "studies" / "05-workers" / "runs").rglob("summary.json"))
    assert runs
    stamps = {p: p.stat().st_mtime_ns for p in runs}
    # The same command again: the finished study is read, not rerun; the document rebuilt.
    (out / "report" / "report.md").unlink()
    assert main(["lab", "--quick", "--only", "5", "--out", str(out), "-q"]) == 0
    assert {p: p.stat().st_mtime_ns for p in runs} == stamps
    assert (out / "report" / "report.md").is_file()
    # Another budget in the same folder is refused in one line, and so is a foreign folder.
    assert main(["lab", "--only", "5", "--out", str(out), "-q"]) == 2
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    assert main(["lab", "--quick", "--only", "5", "--out", str(other), "-q"]) == 2
    assert (other / "notes.txt").read_text() == "mine"
    # --from: the study is reused by its kind, in another lab.
    again = tmp_path / "again"
    study = out / "studies" / "05-workers"
    assert main(["lab", "--quick", "--only", "5", "--from", str(study), "--out", str(again),
                 "-q"]) == 0  # fmt: skip
    state = json.loads((again / "lab.json").read_text())["chapters"]["5"]
    assert state["status"] == "reused" and not (again / "studies").exists()
    assert main(["lab", "--quick", "--from", str(other), "--out", str(tmp_path / "x"),
                 "-q"]) == 2  # fmt: skip


def test_a_lab_stopped_by_ctrl_c_keeps_what_it_finished_and_continues(tmp_path: Path) -> None:
    """The lab's record is written after each chapter: Ctrl-C in chapter 5 leaves chapter
    2's state; the same lab run again asks every study again (each resumes itself: a
    finished one returns at once) and completes."""
    import json

    from trainscope.lab.runner import run_lab

    asked: list[list[str]] = []

    def interrupted(argv: list[str]) -> int:
        asked.append(argv)
        if argv[1] == "loader":
            raise KeyboardInterrupt
        return 0

    out = tmp_path / "lab"
    chapters = parse_only("2,5")
    with pytest.raises(KeyboardInterrupt):
        run_lab(out, chapters, quick=True, data_root=None, from_dirs=[], run_study=interrupted)
    states = json.loads((out / "lab.json").read_text())["chapters"]
    assert list(states) == ["2", "5"] and states["2"]["status"] == "measured"
    assert states["5"]["status"] == "interrupted"
    asked.clear()
    result = run_lab(out, chapters, quick=True, data_root=None, from_dirs=[],
                     run_study=lambda argv: asked.append(argv) or 0)  # fmt: skip
    assert [s.status for s in result.states] == ["measured", "measured"]
    assert [a[1] for a in asked] == ["precision", "loader"]
    assert [a[a.index("--out") + 1] for a in asked] == [
        str(out / "studies" / "02-precision"), str(out / "studies" / "05-workers")]  # fmt: skip


def test_data_that_is_not_there_is_said_not_run(tmp_path: Path) -> None:
    """A --data folder without a chapter's data: that chapter needs data (nothing runs);
    a --data that is not a folder: refused before anything is written."""
    from trainscope.lab.runner import run_lab

    asked: list[list[str]] = []
    out = tmp_path / "lab"
    result = run_lab(out, parse_only("3"), quick=True, data_root=str(tmp_path), from_dirs=[],
                     run_study=lambda argv: asked.append(argv) or 0)  # fmt: skip
    assert result.states[0].status == "needs data" and not asked
    assert "tinyshakespeare/ under --data" in str(result.states[0].reason)
    with pytest.raises(ConfigError, match="not a folder"):
        run_lab(tmp_path / "x", parse_only("3"), quick=True, data_root=str(tmp_path / "no"),
                from_dirs=[], run_study=lambda argv: 0)  # fmt: skip
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("code", [130, 143])
def test_a_study_ended_by_ctrl_c_or_sigterm_stops_the_lab_and_says_so(
    tmp_path: Path, code: int
) -> None:
    """trainscope's entry point turns Ctrl-C and SIGTERM into exit statuses 130 and 143:
    the lab stops there too (never goes on to the next chapter) and lab.json says so;
    a chapter made of commands (chapter 11) stops the same way."""
    from trainscope.errors import Terminated
    from trainscope.lab.runner import run_lab

    asked: list[list[str]] = []

    def stopped(argv: list[str]) -> int:
        asked.append(argv)
        return code

    expected = KeyboardInterrupt if code == 130 else Terminated
    data = tmp_path / "data"
    (data / "tinyshakespeare").mkdir(parents=True)  # there: chapter 11's first command runs
    for only, chapter in (("2,5", "2"), ("11,12", "11")):
        out = tmp_path / f"lab-{only}"
        with pytest.raises(expected):
            run_lab(out, parse_only(only), quick=True, data_root=str(data), from_dirs=[],
                    run_study=stopped)  # fmt: skip
        states = json.loads((out / "lab.json").read_text())["chapters"]
        assert list(states) == [chapter] and states[chapter]["status"] == "interrupted"
    assert [a[:2] for a in asked] == [["study", "precision"], ["estimate-memory", "--arch"]]
