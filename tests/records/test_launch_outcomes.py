"""What a launch that lost a rank leaves in the records: the main record's ``error``
names the cause (the rank that died first), not what stopping the others looked like
from inside them; ``launch_error`` keeps the launch's line beside it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainscope.records.launch_outcomes import complete_records, conclude

pytestmark = pytest.mark.timeout(30)

KILLED = {"failures": {"1": {"exitcode": -9, "text": "was killed by SIGKILL", "time": 1.0}}}
STOPPED = "terminated by SIGTERM (the run was stopped from outside)"


def _launch(tmp_path: Path, main_error: str) -> tuple[Path, Path]:
    run = tmp_path / "run"
    (run / "ranks" / "rank1").mkdir(parents=True)
    (run / "summary.json").write_text(json.dumps({"status": "failed", "error": main_error}))
    (run / "ranks" / "rank1" / "summary.json").write_text(json.dumps({"status": "running"}))
    folder = tmp_path / "launch"
    folder.mkdir()
    (folder / "rank0.json").write_text(json.dumps({"rank": 0, "error": "terminated by SIGTERM",
                                                   "kind": "terminated", "time": 2.0}))  # fmt: skip
    (folder / "agent.json").write_text(json.dumps(KILLED))
    (folder / "run_dir").write_text(str(run))
    return run, folder


def test_a_record_stopped_because_another_rank_died_names_that_rank(tmp_path: Path) -> None:
    run, folder = _launch(tmp_path, STOPPED)
    result = conclude(folder, 1)
    cause = "rank 1 was killed by SIGKILL without recording why"
    assert result.error == cause
    main = json.loads((run / "summary.json").read_text())
    assert main["status"] == "failed"
    assert main["error"].startswith(cause), main["error"]
    assert "terminated by SIGTERM" in main["error"]  # what this rank saw, after the cause
    assert main["launch_error"] == cause
    rank1 = json.loads((run / "ranks" / "rank1" / "summary.json").read_text())
    assert rank1["status"] == "failed" and cause in rank1["error"]


@pytest.mark.parametrize(
    "seen",
    [
        "lost the connection to another rank (it ended or crashed) (RuntimeError: x)",
        "interrupted by the user (Ctrl-C)",
    ],
)
def test_every_consequence_gives_way_to_the_cause(tmp_path: Path, seen: str) -> None:
    run, _ = _launch(tmp_path, seen)
    complete_records(run, "rank 1: DataError: file missing")
    main = json.loads((run / "summary.json").read_text())
    assert main["error"].startswith("rank 1: DataError: file missing"), main["error"]


def test_a_cause_of_its_own_or_a_launch_without_one_is_kept(tmp_path: Path) -> None:
    run, _ = _launch(tmp_path, "DivergedError: loss is nan at step 3")
    complete_records(run, "rank 1 was killed by SIGKILL without recording why")
    assert json.loads((run / "summary.json").read_text())["error"].startswith("DivergedError")
    run2, _ = _launch(tmp_path / "b", STOPPED)
    complete_records(run2, "terminated by SIGTERM")  # every rank was stopped from outside
    assert json.loads((run2 / "summary.json").read_text())["error"] == STOPPED
