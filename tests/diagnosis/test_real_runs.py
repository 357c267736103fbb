"""The doctor on records that trainscope itself wrote: a run planted to be input-bound
(its dataset sleeps per sample) is diagnosed as such; the default run is healthy; and
``doctor --apply`` re-measures the fix as a study, its process per run forked from the
test process (tests/forked_launch.py: what the runs measure is tested, not how they
start). All in-process, and ``slow``: real training runs of a second or more each."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.reports.cheap import unsaved_figures
from trainscope.cli import main
from trainscope.diagnosis import diagnose

SLOW_DATA = """
import time
from torch.utils.data import Dataset
from trainscope.workloads.builtin import digits

class Slow(Dataset):
    def __init__(self, inner):
        self.inner = inner
    def __len__(self):
        return len(self.inner)
    def __getitem__(self, i):
        time.sleep(0.0005)  # a decoder that is slow against LeNet on 8x8 digits
        return self.inner[i]

def factory(cfg):
    wl = digits(cfg, None)
    wl.train_set = Slow(wl.train_set)
    return wl
"""


@pytest.mark.slow
def test_a_planted_input_bound_run_is_diagnosed_input_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "slowdata.py").write_text(SLOW_DATA)
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "slow"
    argv = ["run", "--workload", "slowdata:factory", "--epochs", "1",
            "--max-steps-per-epoch", "20", "--threads", "1", "--out", str(out), "-q"]  # fmt: skip
    assert main(argv) == 0
    top = diagnose(out).findings[0]
    assert top.rule == "input-bound" and list(top.fix) == ["--num-workers"]
    assert top.fix["--num-workers"] >= 1  # within the cores the run's threads leave free


@pytest.mark.slow
def test_the_default_run_has_nothing_major(tmp_path: Path) -> None:
    """(Stage shares move with the machine's load, so only what no load makes major is
    asserted here; docs/doctor.md has the default run's diagnosis on a quiet machine.)"""
    out = tmp_path / "default"
    argv = ["run", "--epochs", "1", "--threads", "1", "--out", str(out), "-q"]
    assert main(argv) == 0
    assert [f.rule for f in diagnose(out).findings if f.severity == "major"] == []


@pytest.mark.slow
def test_apply_re_measures_the_fix_as_a_study(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, forked_launch: list
) -> None:
    """``doctor --apply`` on the planted input-bound run: the baseline and the fix, 12
    steps each, alternated, recorded as a study with a report."""
    import json

    from trainscope.records.study_dir import load_study
    from trainscope.reports.study_doctor import doctor_rows

    unsaved_figures(monkeypatch)  # the study report's text is read, not its figures
    (tmp_path / "slowdata.py").write_text(SLOW_DATA)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))  # the re-runs are processes of their own
    monkeypatch.delitem(sys.modules, "slowdata", raising=False)  # this test's own file
    run, study = tmp_path / "slow", tmp_path / "doctor"
    argv = ["run", "--workload", "slowdata:factory", "--epochs", "1",
            "--max-steps-per-epoch", "20", "--threads", "1", "--out", str(run), "-q"]  # fmt: skip
    assert main(argv) == 0
    # The record names the test's own module: re-running it is the user's say-so.
    argv = ["doctor", str(run), "--apply", "--steps", "12", "--repeats", "2", "--out",
            str(study), "--trust-record-code", "-q"]  # fmt: skip
    assert main(argv) == 0
    assert {kind for kind, _ in forked_launch} == {"process"}  # every re-run forked
    data = json.loads((study / "study.json").read_text())
    assert data["kind"] == "doctor" and data["status"] == "completed"
    rows, steps = doctor_rows(load_study(study))
    assert [r[0] for r in rows] == ["baseline", "input-bound"]
    assert steps["input-bound"].median < steps["baseline"].median  # workers hide the wait
    md = (study / "report" / "report.md").read_text()
    assert "## The doctor's fixes, re-measured" in md
    assert "Best proven: input-bound" in md or "No fix is better" in md
