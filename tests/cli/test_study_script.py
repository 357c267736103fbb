"""``trainscope study NAME -- SCRIPT.py``: a study's plan on the user's unchanged script,
each configuration injected, with its report; refused in one line where it cannot be."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.script.helpers import write_slow_data
from trainscope.cli import main
from trainscope.records.study_dir import load_study


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    write_slow_data(tmp_path, "slow.py", batches=200, sleep=0.003)  # 8 x 3 ms a batch
    return tmp_path


@pytest.mark.slow
def test_a_loader_study_of_a_script_injects_each_worker_count_and_reports_them(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["study", "loader", "--iter-workers", "0,3", "--repeats", "3", "--steps", "10",
            "--no-warmup", "--threads", "1", "--out", "st", "--", "slow.py", "7"]  # fmt: skip
    assert main(args) == 0
    study = load_study(here / "st")
    assert study.status == "completed"
    assert [c.config for c in study.configs() if c.applicable] == ["w0", "w3"]
    pin = next(c for c in study.configs() if c.config == "w0-pin")
    assert not pin.applicable and "CUDA" in str(pin.reason)
    for workers in (0, 3):
        for path in sorted((here / "st" / "runs" / f"w{workers}").glob("r*/summary.json")):
            s = json.loads(path.read_text())
            assert s["status"] == "completed" and s["steps"] == 10
            assert s["source"]["argv"] == ["slow.py", "7"]  # the script's own arguments
            assert s["source"]["injected"] == {"num_workers": workers}
            assert s["num_workers"] == workers and s["cpu"]["threads"] == 1
    report = (here / "st" / "report" / "report.md").read_text()
    assert "Your script under each setting" in report
    assert "num_workers=3" in report and "pin_memory needs a CUDA device" in report
    # 3 workers load 3 batches per 24 ms against one in the main process: the step drops
    # far beyond any noise, so the study must say so
    assert "Fastest beyond the noise: w3" in report
    assert (here / "st" / "report" / "tables.tex").read_text().count("num\\_workers=") >= 2
    capsys.readouterr()


def test_the_plans_of_the_other_studies_on_a_script(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["study", "precision", "--dry-run", "--", "slow.py"]) == 0
    out = capsys.readouterr().out
    assert "bf16/r1: --inject precision=bf16" in out and "fp32/r1: the script as it is" in out
    assert "fp16/r1: the script as it is  (not applicable: fp16 needs a GradScaler" in out
    assert main(["study", "checkpointing", "--dry-run", "--policies", "none,every-2",
                 "--script", "slow.py"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "every-2/r1: --inject activation_checkpointing=every-2" in out
    assert main(["study", "profile", "--dry-run", "--inject", "num_workers=2",
                 "--repeats", "2", "--", "slow.py"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "run/r2: the script as it is" in out  # every run gets the base's injection


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["study", "strategies", "--", "slow.py"], "needs trainscope's own workloads"),
        (["study", "loader", "--batch-size", "4", "--", "slow.py"], "--batch-size is the script's"),
        (["study", "loader", "--steps", "4"], "apply to a study of a script"),
        (["study", "loader", "--script", "slow.py", "--", "slow.py"], "give the script once"),
        (["study", "loader", "--", "missing.py"], "missing.py: no such script"),
        (["study", "loader", "--inject", "num_workers=x", "--", "slow.py"], "whole number"),
        (["study", "loader", "--steps", "0", "--", "slow.py"], "--steps must be"),
        (["study", "precision", "--precisions", "fp8", "--", "slow.py"], "fp8"),
    ],
)
def test_a_study_of_a_script_refuses_in_one_line(
    here: Path, capsys: pytest.CaptureFixture[str], args: list[str], words: str
) -> None:
    assert main([*args[:2], "--out", "st", *args[2:]]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert words in line
    assert not (here / "st").exists()
