"""``trainscope lab`` on wrong input and after a hard stop (issue 43): ``--only`` that is no
chapter, a ``--from`` study too large to read, a lab killed with SIGKILL continued by the
same command, a ``lab.json`` that trainscope did not write refused and left as it was, a
chapter whose optional package is missing naming the extra to install, and a document
without a PDF naming the Debian packages. The studies are stand-ins (no training)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.lab.test_document import hide_pdflatex
from trainscope.cli import main
from trainscope.errors import ConfigError, TrainscopeError
from trainscope.lab.chapters import chapter, parse_only
from trainscope.lab.runner import MAX_FROM_RUNS, ChapterState, LabResult, run_lab


def _lab(out: Path, only: str, run_study: object, **kw: object) -> LabResult:
    kw = {"quick": True, "data_root": None, "from_dirs": [], **kw}
    return run_lab(out, parse_only(only), run_study=run_study, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize("only", ["²", "2,٣", "x", "13", "2,99"])
def test_only_that_is_no_chapter_is_one_line_listing_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], only: str
) -> None:
    assert main(["lab", "--only", only, "--out", str(tmp_path / "lab"), "-q"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("trainscope: error: --only: ") and "internal error" not in line
    assert "1 distribute" in line and "12 int8" in line
    assert not (tmp_path / "lab").exists()


def test_only_takes_names_as_well() -> None:
    from trainscope.cli.lab import only_chapters

    assert [c.number for c in only_chapters("precision, 5,workers")] == [2, 5]


def _study_json(folder: Path, runs: int, label: str = "") -> Path:
    folder.mkdir(parents=True)
    planned = [{"config": f"c{i}", "repeat": 1, "labels": {"x": label}} for i in range(runs)]
    data = {"schema_version": 1, "kind": "precision", "status": "completed", "runs": planned}
    (folder / "study.json").write_text(json.dumps(data))
    return folder


def test_a_from_study_too_large_to_read_is_refused(tmp_path: Path) -> None:
    """Bounded as the lab's readers are: by planned runs, and by bytes before parsing."""
    many = _study_json(tmp_path / "many", MAX_FROM_RUNS + 1)
    with pytest.raises(ConfigError, match=f"--from {many}: .*{MAX_FROM_RUNS + 1:,} planned runs"):
        _lab(tmp_path / "lab", "2", lambda argv: 0, from_dirs=[str(many)])
    big = _study_json(tmp_path / "big", 2, label="x" * (17 << 20))
    with pytest.raises(ConfigError, match=f"--from {big}: its study.json is larger than"):
        _lab(tmp_path / "lab", "2", lambda argv: 0, from_dirs=[str(big)])
    assert not (tmp_path / "lab").exists()


CHILD = """
import sys, time
from pathlib import Path
from trainscope.lab.chapters import parse_only
from trainscope.lab.runner import run_lab

out, ready = Path(sys.argv[1]), Path(sys.argv[2])

def blocked(argv):
    folder = Path(argv[argv.index("--out") + 1])
    folder.mkdir(parents=True)
    (folder / "study.json").write_text("{}")  # a study half made, as SIGKILL leaves it
    ready.write_text("in chapter 2")
    time.sleep(600)
    return 0

run_lab(out, parse_only("2,5"), quick=True, data_root=None, from_dirs=[], run_study=blocked)
"""


def test_a_lab_killed_with_sigkill_is_continued_by_the_same_command(tmp_path: Path) -> None:
    out, ready = tmp_path / "lab", tmp_path / "ready"
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(out), str(ready)],
                             stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 240  # a guard against a hang, not a timing check
        while not ready.exists() and child.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ready.exists(), child.stderr.read() if child.poll() is not None else "no start"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    assert child.returncode == -signal.SIGKILL
    asked: list[list[str]] = []
    result = _lab(out, "2,5", lambda argv: asked.append(argv) or 0)
    assert [s.status for s in result.states] == ["measured", "measured"]
    assert [a[1] for a in asked] == ["precision", "loader"]  # chapter 2's study resumes
    assert json.loads((out / "lab.json").read_text())["chapters"]["5"]["status"] == "measured"


def test_a_lab_json_trainscope_did_not_write_is_refused_and_kept(tmp_path: Path) -> None:
    out = tmp_path / "lab"
    out.mkdir()
    planted = json.dumps({"kind": "trainscope-lab", "quick": True, "chapters": {"2": "mine"}})
    (out / "lab.json").write_text(planted)
    asked: list[list[str]] = []
    with pytest.raises(ConfigError, match="lab.json that trainscope did not write"):
        _lab(out, "2", lambda argv: asked.append(argv) or 0)
    assert (out / "lab.json").read_text() == planted and sorted(out.iterdir()) == [
        out / "lab.json"]  # fmt: skip
    assert asked == []


def test_a_missing_extra_is_named_with_its_install_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Chapter 8 (LoRA) needs the text extra: said before its study runs, as chapter 12
    says it of torchao."""
    data = tmp_path / "data"
    for d in ("sst2", "minilm-l6"):
        (data / d).mkdir(parents=True)
    monkeypatch.setitem(sys.modules, "peft", None)  # as if it were not installed
    asked: list[list[str]] = []
    (state,) = _lab(tmp_path / "lab", "8", lambda argv: asked.append(argv) or 0,
                    data_root=str(data)).states  # fmt: skip
    assert state.status == "unavailable" and asked == []
    assert state.reason == "needs the text extra (peft is not installed): pip install " \
        "'trainscope[text]'"  # fmt: skip


def test_a_study_failed_for_a_missing_extra_says_which(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A study that ran and failed because an optional package is missing: the chapter
    names the cause and the fix, read from the study's own record of its failures."""
    from trainscope.lab.document import build_lab_document
    from trainscope.records.study_dir import PlannedRun, StudyPlan, write_study

    error = "ConfigError: --track wandb needs 'wandb': pip install 'trainscope[wandb]'"

    def failing(argv: list[str]) -> int:
        folder = Path(argv[argv.index("--out") + 1])
        folder.mkdir(parents=True)
        plan = StudyPlan("precision", {}, {}, [PlannedRun("fp32", 1)])
        write_study(folder, plan, "completed_with_failures", failures={"fp32/r1": error})
        return 1

    (state,) = _lab(tmp_path / "lab", "2", failing).states
    assert state.status == "failed"
    assert state.reason == f"needs the wandb extra: pip install 'trainscope[wandb]' ({error})"
    hide_pdflatex(monkeypatch)
    result = LabResult(tmp_path / "lab", True, [state])
    md = (build_lab_document(result, [chapter(2)]).files[0]).read_text()
    assert "This chapter is its study failed" not in md
    assert "its study failed (needs the wandb extra: pip install" in md


def test_no_pdf_names_the_debian_packages(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from trainscope.lab import document
    from trainscope.lab.document import build_lab_document

    states = [ChapterState(1, "not built")]
    hide_pdflatex(monkeypatch)
    made = build_lab_document(LabResult(tmp_path / "a", True, states), [chapter(1)])
    (problem,) = made.problems
    assert "pdflatex is not on PATH" in problem
    assert "apt-get install texlive-latex-base texlive-latex-recommended" in problem

    def missing_style(doc: object, out: Path, name: str) -> tuple[Path, Path | None]:
        raise TrainscopeError("pdflatex failed on report.tex: LaTeX Error: File "
                              "`booktabs.sty' not found. (line 9)")  # fmt: skip

    monkeypatch.setattr(document, "write_latex_document", missing_style)
    made = build_lab_document(LabResult(tmp_path / "b", True, states), [chapter(1)])
    (problem,) = made.problems
    assert "booktabs.sty' not found" in problem and "texlive-latex-recommended" in problem
