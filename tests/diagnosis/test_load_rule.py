"""The doctor on a run measured under other load: that finding first, with its figures
and a concrete fix, never "nothing to fix" (diagnosis.load_rule)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.diagnosis.test_rules import rules_fired, write_run
from trainscope.diagnosis import diagnose
from trainscope.util.load import IGNORE_LOAD_ENV


@pytest.fixture(autouse=True)
def rule_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(IGNORE_LOAD_ENV, raising=False)  # the suite switches it off


def loaded_cpu(other: float, threads: int) -> dict:
    return {"cpu": {"oversubscribed": True, "cores": 2, "threads": threads,
                    "processes_on_node": 1, "demand_cores": threads, "busy_cores": 2.0,
                    "other_cores": other,
                    "other_cores_sampled": {"min": 1.5, "max": 2.0, "n": 60}}}  # fmt: skip


def test_the_default_run_beside_busy_cores_is_told_to_take_one_thread(tmp_path: Path) -> None:
    """The first hour's default run: 2 threads beside two busy loops, 24 ms a step
    (3.55 ms with --threads 1), and the doctor said "Nothing to fix"."""
    run = write_run(tmp_path / "r", summary=loaded_cpu(1.9, threads=2))
    first = diagnose(run).findings[0]
    assert first.rule == "measured-under-load" and first.severity == "major"
    assert first.fix == {"--threads": 1}
    assert "other processes kept 1.9 of 2 cores busy" in first.evidence[0]
    assert "its own threads: 2 x 1 process" in first.evidence[1]
    assert "--threads 1" in first.command


def test_with_one_thread_already_the_fix_is_to_free_the_cores(tmp_path: Path) -> None:
    run = write_run(tmp_path / "r", summary=loaded_cpu(1.8, threads=1))
    first = diagnose(run).findings[0]
    assert first.rule == "measured-under-load" and first.fix == {}
    assert "free the cores" in first.gain


def test_it_comes_before_every_other_finding(tmp_path: Path) -> None:
    slow_input = {"data_wait": 0.02, "forward": 0.004, "backward": 0.006, "optimizer": 0.001}
    run = write_run(tmp_path / "r", slow_input, summary=loaded_cpu(1.0, threads=1))
    fired = rules_fired(run)
    assert fired[0] == "measured-under-load" and "input-bound" in fired


def test_a_quiet_run_and_an_old_record_are_not_flagged(tmp_path: Path) -> None:
    assert "measured-under-load" not in rules_fired(write_run(tmp_path / "old"))
    quiet = {"cpu": {**loaded_cpu(0.1, 1)["cpu"], "oversubscribed": False}}
    assert "measured-under-load" not in rules_fired(write_run(tmp_path / "q", summary=quiet))


def test_the_printed_diagnosis_never_says_nothing_to_fix(tmp_path: Path) -> None:
    from trainscope.cli import main

    run = write_run(tmp_path / "r", summary=loaded_cpu(1.9, threads=2))
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["doctor", str(run)]) == 0
    text = out.getvalue()
    assert "Nothing to fix" not in text
    assert "1. [major] measured-under-load: Measured under other load" in text


@pytest.mark.skipif(
    __import__("trainscope.config").config.available_cpus() > 4,
    reason="loads every core: kept to small machines",
)
def test_apply_beside_load_that_stays_refuses_to_judge(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """Busy loops on every core for the whole wait: --apply re-runs nothing and says why."""
    from tests.runtime.test_free_cores import busy_loops
    from trainscope.cli import doctor as doctor_cli
    from trainscope.cli import main
    from trainscope.config import available_cpus

    monkeypatch.setattr(doctor_cli, "QUIET_WAIT_S", 1.0)
    slow_input = {"data_wait": 0.02, "forward": 0.004, "backward": 0.006, "optimizer": 0.001}
    run = write_run(tmp_path / "r", slow_input)
    out = tmp_path / "apply"
    with busy_loops(2 * available_cpus()):
        code = main(["doctor", str(run), "--apply", "--out", str(out), "-q"])
    assert code == 1
    err = capsys.readouterr().err
    assert "the re-runs would measure them, not the fixes" in err and "nothing was re-run" in err
    assert not (out / "study.json").exists()
