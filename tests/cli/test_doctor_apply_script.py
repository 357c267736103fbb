"""``trainscope doctor --apply`` on a ``trainscope profile`` run: the same script re-run
with each fix injected, alternated with the baseline, and the fix proven."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.script.helpers import profile, write_slow_data
from trainscope.cli import main
from trainscope.records.study_dir import load_study


@pytest.fixture
def run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    # Input-bound by construction: each batch of 8 takes 8 x 4 ms to load in the main
    # process, waiting, the model's step well under a millisecond; 100 batches, so that the
    # process's start (imports, which compute) is a small part of the cores it used and the
    # doctor sees loading that waits (and proposes as many workers as keep up).
    write_slow_data(tmp_path, "slow_data.py", batches=100, sleep=0.004)
    assert profile("-q", "--out", "run", "--threads", "1", "--", "slow_data.py") == 0
    return tmp_path / "run"


@pytest.mark.slow
def test_apply_proves_the_injected_num_workers_fix_on_the_unchanged_script(
    run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    out = run.parent / "study"
    args = ["doctor", "--apply", "--trust-record-code", "--steps", "12", "--repeats", "3",
            "--out", str(out), str(run)]  # fmt: skip
    assert main(args) == 0
    captured = capsys.readouterr()
    printed = " ".join((captured.out + captured.err).split())  # the console may wrap lines
    study = load_study(out)
    configs = {c.config for c in study.configs()}
    assert {"baseline", "input-bound"} <= configs
    fix_runs = sorted((out / "runs" / "input-bound").glob("r*/summary.json"))
    assert len(fix_runs) == 3
    for path in fix_runs:  # each re-run: the same script, its loader given workers
        s = json.loads(path.read_text())
        assert s["status"] == "completed" and s["steps"] == 12
        assert s["source"]["injected"]["num_workers"] >= 1
        assert s["source"]["argv"] == ["slow_data.py"] and s["num_workers"] >= 1
        assert s["cpu"]["threads"] == 1  # the run's own --threads, kept
    base = json.loads((out / "runs" / "baseline" / "r1" / "summary.json").read_text())
    assert "injected" not in base["source"] and base["num_workers"] == 0
    report = (out / "report" / "report.md").read_text()
    assert "input-bound" in report
    assert "Best proven: input-bound" in report
    # the proven fix as the command that applies it, from the script's folder
    assert f"cd {run.parent} && trainscope profile --out {run}-input-bound" in printed
    assert "--inject num_workers=" in printed and "-- slow_data.py" in printed


def test_apply_on_a_script_run_needs_trust_in_the_command_the_record_names(
    run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    assert main(["doctor", "--apply", "--out", str(run.parent / "s"), str(run)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "python slow_data.py" in line and "--trust-record-code" in line
    assert not (run.parent / "s").exists()


def test_apply_refuses_a_script_changed_since_it_was_profiled(
    run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = run.parent / "slow_data.py"
    script.write_text(script.read_text() + "print('changed')\n")
    capsys.readouterr()
    args = ["doctor", "--apply", "--trust-record-code", "--out", str(run.parent / "s"), str(run)]
    assert main(args) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "changed since it was profiled" in line
