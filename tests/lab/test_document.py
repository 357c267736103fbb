"""The lab's document built from small recorded fixtures (studies whose runs wrote
planted records, no training): every decimal number in a chapter's text is one its
linked records give, and changing a linked record changes the chapter.

The planted studies and their lab are built once per module; the test that changes a
record works on a copy. No PDF is compiled here (report.tex is still written): nothing
here reads it, and tests/lab/test_runner.py checks a lab's PDF end to end.
"""

from __future__ import annotations

import json
import re
import shutil
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.reports.test_honest_numbers import BASE, CPU, Planted
from trainscope.cli import main
from trainscope.render import document_latex
from trainscope.reports.study_report import build_study_report
from trainscope.studies import loader, precision
from trainscope.studies.base import execute

pytestmark = pytest.mark.timeout(300)

# Seconds per epoch of each loader setting, three repeats: 2 workers clearly beats the
# default (3.1 / 1.9 = 1.63x), 1 worker overlaps 2 (no single fastest).
EPOCHS = {"w0": [3.0, 3.1, 3.2], "w1": [1.5, 2.0, 2.5], "w2": [1.8, 1.9, 2.0]}
# Training seconds per precision: bf16 clearly slower (2.65x), accuracy inside the noise.
TRAIN = {"fp32": [1.00, 1.02, 0.98], "bf16": [2.60, 2.65, 2.70]}


def _loader_study(folder: Path) -> Path:
    planted = {
        f"{cfg}/r{k}": {"epochs": [{"duration_s": s, "loader_start_s": 0.1}],
                        "samples_per_s": 1000 / s}
        for cfg, secs in EPOCHS.items() for k, s in enumerate(secs, 1)
    }  # fmt: skip
    plan = loader.plan(BASE, CPU, repeats=3, workers=[0, 1, 2], sweep_epochs=1,
                       iter_workers=[], iter_epochs=1)  # fmt: skip
    plan.runs[:] = [r for r in plan.runs if r.config in EPOCHS or r.warmup]
    execute(plan, folder, say=lambda _: None, run_fn=Planted(planted))
    return folder


def _precision_study(folder: Path) -> Path:
    def rep(train: float, acc: float) -> dict[str, Any]:
        return {"train_time_s": train, "wall_time_s": train + 0.5, "samples": 4379,
                "samples_per_s": 4379 / train, "test_accuracy": acc,
                "epochs": [{"train_loss": 0.1, "val_accuracy": acc}]}  # fmt: skip

    accs = [0.950, 0.952, 0.951]
    planted = {f"{p}/r{k}": rep(t, accs[k - 1])
               for p, times in TRAIN.items() for k, t in enumerate(times, 1)}  # fmt: skip
    plan = precision.plan(BASE, CPU, repeats=3, precisions=list(TRAIN))
    execute(plan, folder, say=lambda _: None, run_fn=Planted(planted))
    return folder


def _numbers(text: str) -> set[str]:
    """The decimal numbers of a text (thousands separators dropped)."""
    return {m.replace(",", "") for m in re.findall(r"\d[\d,]*\.\d+", text)}


def _chapter(md: str, number: int) -> str:
    """A chapter's text up to its list of records (which names folders, not figures)."""
    text = md.split(f"\n## {number}. ", 1)[1].split("\n## ", 1)[0]
    return text.split("### Reproduce", 1)[0]


def _linked_runs(md: str, number: int) -> list[str]:
    chapter = md.split(f"\n## {number}. ", 1)[1].split("\n## ", 1)[0]
    records = chapter.split("Every figure in this chapter comes from", 1)[1]
    return re.findall(r"`(runs/[^`]+)`", records)


def _rebuilt_from_links(study: Path, linked: list[str], into: Path) -> str:
    """The study's report made again from its plan and the linked run folders alone."""
    into.mkdir()
    shutil.copy(study / "study.json", into / "study.json")
    for run in linked:
        shutil.copytree(study / run, into / run)
    return build_study_report(into).markdown_path.read_text(encoding="utf-8")


def _lab(out: Path, *studies: Path) -> str:
    argv = ["lab", "--only", "2,5", "--out", str(out), "-q"]
    argv += [a for s in studies for a in ("--from", str(s))]
    assert main(argv) == 0
    states = json.loads((out / "lab.json").read_text())["chapters"]
    assert states["2"]["status"] == states["5"]["status"] == "reused"
    return (out / "report" / "report.md").read_text(encoding="utf-8")


def hide_pdflatex(patch: pytest.MonkeyPatch) -> None:
    """Documents made under ``patch`` find no pdflatex (two runs of it per document) and
    write report.tex alone: for tests that do not read the PDF."""

    def which(name: str, *args: Any, **kwargs: Any) -> str | None:
        return None if name == "pdflatex" else shutil.which(name, *args, **kwargs)

    shim = types.SimpleNamespace(**{**vars(shutil), "which": which})
    patch.setattr(document_latex, "shutil", shim)


@pytest.fixture(scope="module", autouse=True)
def _no_pdf() -> Iterator[None]:
    """No PDF for this module's labs: the PDF is not what these tests read."""
    with pytest.MonkeyPatch.context() as patch:
        hide_pdflatex(patch)
        yield


@pytest.fixture(scope="module")
def lab_of_studies(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding ``loader/`` and ``prec/`` (the planted studies) and ``lab/``, the
    lab made from them (chapters 2 and 5 reused with --from), built once. Read only:
    a test that changes something copies it."""
    root = tmp_path_factory.mktemp("lab-document")
    _lab(root / "lab", _loader_study(root / "loader"), _precision_study(root / "prec"))
    return root


def test_every_number_of_a_chapter_is_given_by_the_records_it_links(
    tmp_path: Path, lab_of_studies: Path
) -> None:
    studies = {5: lab_of_studies / "loader", 2: lab_of_studies / "prec"}
    md = (lab_of_studies / "lab" / "report" / "report.md").read_text(encoding="utf-8")
    for number, study in studies.items():
        linked = _linked_runs(md, number)
        # Each measured repeat of each configuration is linked, and nothing else.
        planted = {f"runs/{c}/r{k}" for c in (EPOCHS if number == 5 else TRAIN)
                   for k in (1, 2, 3)}  # fmt: skip
        assert set(linked) == planted
        text = _chapter(md, number)
        rebuilt = _rebuilt_from_links(study, linked, tmp_path / f"rebuilt-{number}")
        assert _numbers(text) and _numbers(text) <= _numbers(rebuilt), number
    # The planted figures themselves, as the noise rule states them.
    assert "1.63x" in _chapter(md, 5)  # 3.1 s / 1.9 s per epoch, medians
    assert "2.65x" in _chapter(md, 2)  # 2.65 s / 1.00 s of training


def test_a_changed_record_changes_the_chapter_that_links_it(
    tmp_path: Path, lab_of_studies: Path
) -> None:
    root = shutil.copytree(lab_of_studies, tmp_path / "copy")
    study, out = root / "loader", root / "lab"
    assert "1.63x" in _chapter((out / "report" / "report.md").read_text(encoding="utf-8"), 5)
    # 2 workers' middle repeat now took 1.7 s: the median (1.8 s) moves, so must the
    # chapter (3.1 / 1.8 = 1.72x) when the same lab command builds it again.
    summary = study / "runs" / "w2" / "r2" / "summary.json"
    record = json.loads(summary.read_text())
    record["epochs"][0]["duration_s"] = 1.7
    record["samples_per_s"] = 1000 / 1.7
    summary.write_text(json.dumps(record))
    again = _chapter(_lab(out, study, root / "prec"), 5)
    assert "1.72x" in again and "1.63x" not in again


def test_two_chapters_of_one_study_kind_label_their_tables_apart(
    tmp_path: Path, lab_of_studies: Path
) -> None:
    """Chapters 2 and 7 both run a precision study: each of its tables is labelled by its
    chapter, once in report.tex, tables.tex and report.html (pdflatex said "Label
    `tab:precision' multiply defined" before)."""
    prec = lab_of_studies / "prec"
    out = tmp_path / "lab"
    argv = ["lab", "--only", "2,7", "--out", str(out), "-q", "--from", str(prec)]
    assert main([*argv, "--from", str(prec)]) == 0
    report = out / "report"
    for name, pattern in [
        ("report.tex", r"\\label\{([^}]*)\}"),
        ("tables.tex", r"\\label\{([^}]*)\}"),
        ("report.html", r'<table id="([^"]*)"'),
    ]:
        labels = re.findall(pattern, (report / name).read_text(encoding="utf-8"))
        assert len(labels) == len(set(labels)) and len(labels) > 2, (name, labels)
        # HTML ids have "-" for ":".
        for chapter in (2, 7):
            tag = f"tab-ch{chapter}-precision"
            assert any(lb.replace(":", "-").startswith(tag) for lb in labels), (name, labels)
