"""``trainscope doctor RUN --apply`` when its re-runs fail, and when the record names code
(issue 43): a study whose re-runs failed measured nothing and says so, in one line, with a
non-zero exit, under ``-q`` too; a workload factory module that only the record names is
not imported without the user's say-so (``--trust-record-code``).

The re-runs are replaced by a stand-in for ``run_any`` (no training, nothing launched):
it fails, or copies the planted record into the re-run's folder as its completed run."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.diagnosis.test_rules import HEALTHY, write_run
from tests.reports.cheap import unsaved_figures
from trainscope.cli import main
from trainscope.errors import TrainscopeError

INPUT_BOUND = {**HEALTHY, "data_wait": 0.003}  # one finding, --num-workers 1: 2 configs


def _stand_in(
    monkeypatch: pytest.MonkeyPatch, record: Path, fails: Any
) -> list[Any]:  # fmt: skip
    """Replace the re-runs: ``fails(cfg)`` says which raise; the others leave ``record``
    as their completed run. Returns the configs it was given."""
    from trainscope.launch import launcher

    given: list[Any] = []

    def run_any(cfg: Any, console: Any = None, *, fresh_process: bool = False) -> dict:
        given.append(cfg)
        if fails(cfg):
            raise TrainscopeError("the launched run failed (exit 1): planted failure")
        shutil.copytree(record, cfg.out, dirs_exist_ok=True)
        return {"status": "completed"}

    monkeypatch.setattr(launcher, "run_any", run_any)
    unsaved_figures(monkeypatch)  # the report's text matters here, not its figures
    return given


def _apply(run: Path, out: Path, *flags: str) -> int:
    return main(["doctor", str(run), "--apply", "--steps", "3", "--repeats", "2",
                 "--out", str(out), *flags])  # fmt: skip


@pytest.mark.parametrize("quiet", [False, True])
def test_every_re_run_failed_is_said_and_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    quiet: bool,
) -> None:  # fmt: skip
    run = write_run(tmp_path / "r", INPUT_BOUND)
    _stand_in(monkeypatch, run, lambda cfg: True)
    assert _apply(run, tmp_path / "s", *["-q"] * quiet) == 1
    out, err = capsys.readouterr()
    assert "keep the run as it was" not in out + err  # nothing was compared
    lines = err.strip().splitlines()
    assert len(lines) == 1 or not quiet
    assert lines[-1].startswith(
        "trainscope: error: doctor --apply: nothing was measured: 5 of 5 re-runs failed: "
        "TrainscopeError: the launched run failed (exit 1): planted failure"
    )
    assert str(tmp_path / "s") in lines[-1]  # where the record of the failures is
    assert (tmp_path / "s" / "study.json").is_file()  # kept: rerun the command to resume


def test_a_fix_that_never_ran_leaves_nothing_to_compare(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    run = write_run(tmp_path / "r", INPUT_BOUND)
    _stand_in(monkeypatch, run, lambda cfg: cfg.data.num_workers == 1)  # the fix's runs
    assert _apply(run, tmp_path / "s", "-q") == 1
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "nothing was measured: 2 of 5 re-runs failed: TrainscopeError" in line


def test_some_failed_re_runs_are_said_under_quiet(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The fix's second repeat failed: the comparison rests on the rest, and the failure
    is said (``-q`` prints errors only, and a failed re-run is one)."""
    run = write_run(tmp_path / "r", INPUT_BOUND)
    _stand_in(monkeypatch, run, lambda cfg: cfg.data.num_workers == 1 and "r2" in cfg.out)
    assert _apply(run, tmp_path / "s", "-q") == 1
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("trainscope doctor: 1 of 5 re-runs failed: TrainscopeError")
    assert "completed_with_failures" in line


FACTORY = "import pathlib\npathlib.Path('imported').write_text('ran')\ndef factory(cfg):\n" \
          "    raise SystemExit('never called here')\n"  # fmt: skip


def test_a_factory_module_the_record_names_needs_the_users_say_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    run = write_run(tmp_path / "r", INPUT_BOUND,
                    config={"workload": {"name": "planted_wl:factory"}})  # fmt: skip
    (run / "planted_wl.py").write_text(FACTORY)
    monkeypatch.chdir(run)  # where the module would be found
    given = _stand_in(monkeypatch, run, lambda cfg: True)
    assert _apply(run, tmp_path / "s") == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("trainscope: error: ") and "'planted_wl'" in line
    assert "--trust-record-code" in line
    assert given == [] and not (tmp_path / "s").exists()
    assert "planted_wl" not in sys.modules and not (run / "imported").exists()
    # With the user's say-so the re-runs go ahead (and here they fail, as planted).
    assert _apply(run, tmp_path / "s", "--trust-record-code", "-q") == 1
    assert len(given) == 5 and "nothing was measured" in capsys.readouterr().err
