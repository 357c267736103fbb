"""Runs with the new input-path options: --data-only, --num-workers auto, --loader fast."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from trainscope.cli import main
from trainscope.config import from_dict
from trainscope.data import autotune
from trainscope.records import STAGES as ALL_STAGES
from trainscope.records import load_run
from trainscope.train.run import run

# Stages of a one-process run: "comm" exists only with hand-written gradient sync.
# Stages of a run without them: no hand-written sync, checkpoints, compile or pipeline.
STAGES = tuple(s for s in ALL_STAGES if s not in ("comm", "checkpoint", "compile", "pipeline_wait"))

pytestmark = pytest.mark.timeout(120)

DIGITS_TRAIN = 1258  # training samples of the digits split
DIGITS_STEPS = 40  # batches of 32 per epoch


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The cache (and so the num_workers auto cache) lives in tmp_path; so do runs/."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("TRAINSCOPE_CACHE", str(cache))
    monkeypatch.delenv("TRAINSCOPE_DEBUG", raising=False)
    monkeypatch.chdir(tmp_path)
    return cache


@pytest.fixture
def two_candidates(monkeypatch: pytest.MonkeyPatch) -> None:
    """Keep num_workers auto quick: try 0 and 1 workers only."""
    monkeypatch.setattr(autotune, "default_candidates", lambda *a, **k: [0, 1])


def tiny(out: Path, **sections: dict[str, Any]) -> Any:
    data: dict[str, Any] = {
        "out": str(out),
        "train": {"epochs": 1},
        "runtime": {"progress": False, "system_interval_s": 0.2},
    }
    for name, values in sections.items():
        data[name] = {**data.get(name, {}), **values}
    return from_dict(data)


# --------------------------------------------------------------------------- data only


def test_data_only_run_iterates_the_batches_and_nothing_else(tmp_path: Path) -> None:
    out = tmp_path / "data-only"
    summary = run(tiny(out, train={"epochs": 2, "data_only": True}))
    assert summary["status"] == "completed" and summary["data_only"] is True
    assert summary["test_accuracy"] is None and summary["test_loss"] is None
    assert summary["per_class_accuracy"] is None
    assert summary["first_losses"] == []
    assert summary["steps"] == 2 * DIGITS_STEPS and summary["samples"] == 2 * DIGITS_TRAIN
    assert len(summary["epochs"]) == 2
    for row in summary["epochs"]:
        assert row["train_loss"] is None
        assert row["val_loss"] is None and row["val_accuracy"] is None  # no validation
        assert row["duration_s"] > 0 and row["loader_start_s"] >= 0
    stages = summary["stages_s"]
    assert list(stages) == list(STAGES)
    for name in ("forward", "backward", "optimizer", "evaluation"):
        assert stages[name] == 0, name
    assert stages["data_wait"] > 0
    assert all(v >= 0 for v in stages.values()), stages

    on_disk = json.loads((out / "summary.json").read_text())
    assert on_disk["status"] == "completed" and on_disk["test_accuracy"] is None
    rec = load_run(out)
    steps = rec.events("step")
    assert len(steps) == 2 * DIGITS_STEPS
    assert all(s["loss"] is None for s in steps)
    # A step record times only what a data step does.
    assert all(set(s["stages"]) <= {"data_wait", "h2d"} for s in steps)
    assert sum(s["stages"]["data_wait"] for s in steps) > 0
    assert rec.events("test") == []
    assert [e["train_loss"] for e in rec.events("epoch")] == [None, None]
    # metrics.jsonl holds a JSON null for the loss, not NaN, 0 or a string.
    lines = (out / "metrics.jsonl").read_text().splitlines()
    step_lines = [line for line in lines if json.loads(line).get("event") == "step"]
    assert len(step_lines) == 2 * DIGITS_STEPS
    assert all('"loss": null' in line for line in step_lines)
    assert "NaN" not in "".join(lines)


def test_data_only_run_with_the_fast_loader_and_augmentation(tmp_path: Path) -> None:
    out = tmp_path / "fast-data-only"
    summary = run(
        tiny(
            out,
            workload={"augment": True},
            data={"loader": "fast"},
            train={"data_only": True, "max_steps_per_epoch": 10},
        )
    )
    assert summary["status"] == "completed" and summary["loader"] == "fast"
    assert summary["steps"] == 10 and summary["samples"] == 320
    assert summary["test_accuracy"] is None
    assert summary["stages_s"]["forward"] == 0


def test_data_only_from_the_command_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "cli"
    code = main(
        ["run", "--data-only", "--epochs", "1", "--max-steps-per-epoch", "3", "-q"]
        + ["--no-progress", "--out", str(out)]
    )
    assert code == 0
    assert capsys.readouterr().err == ""
    summary = json.loads((out / "summary.json").read_text())
    assert summary["data_only"] is True and summary["steps"] == 3
    assert summary["test_accuracy"] is None


# ----------------------------------------------------------------------- auto workers


@pytest.mark.usefixtures("two_candidates")
def test_num_workers_auto_run_records_and_caches_its_choice(
    tmp_path: Path, _isolated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "auto"
    cfg = tiny(out, data={"num_workers": "auto"}, train={"max_steps_per_epoch": 5})
    summary = run(cfg)
    assert summary["status"] == "completed"
    auto = summary["num_workers_auto"]
    assert isinstance(summary["num_workers"], int) and not isinstance(summary["num_workers"], bool)
    assert auto["chosen"] == summary["num_workers"] and auto["chosen"] in (0, 1)
    assert auto["cached"] is False
    assert [t["num_workers"] for t in auto["trials"]][0] == 0
    assert 1 <= len(auto["trials"]) <= 2

    rec = load_run(out)
    events = rec.events("num_workers_auto")
    assert len(events) == 1 and events[0]["chosen"] == auto["chosen"]
    assert rec.summary["num_workers"] == auto["chosen"]
    # The saved config keeps "auto": rerunning it measures (or reads the cache) again.
    assert rec.config["data"]["num_workers"] == "auto"
    cache_file = _isolated / autotune.CACHE_FILE
    assert cache_file.is_file()
    entries = json.loads(cache_file.read_text())["entries"]
    assert entries[auto["key"]]["chosen"] == auto["chosen"]

    # A second run on this machine uses the cached choice without measuring.
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the cached choice should have been used")

    monkeypatch.setattr(autotune, "measure", refuse)
    again = run(tiny(tmp_path / "auto2", data={"num_workers": "auto"}, train={"epochs": 1}))
    assert again["status"] == "completed"
    assert again["num_workers_auto"]["cached"] is True
    assert again["num_workers"] == auto["chosen"]


@pytest.mark.usefixtures("two_candidates")
def test_num_workers_auto_is_printed_by_the_cli(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "cli-auto"
    code = main(
        ["run", "--num-workers", "auto", "--epochs", "1", "--max-steps-per-epoch", "2"]
        + ["--no-progress", "--out", str(out)]
    )
    captured = capsys.readouterr()
    assert code == 0, captured.err
    # The console (stderr) names every tried count, then the choice.
    assert "num_workers auto: 0 workers" in captured.err
    assert "num_workers auto -> " in captured.err
    assert json.loads((out / "summary.json").read_text())["num_workers_auto"]["cached"] is False


def test_fixed_num_workers_has_no_auto_record(tmp_path: Path) -> None:
    summary = run(tiny(tmp_path / "fixed", train={"max_steps_per_epoch": 2}))
    assert summary["num_workers"] == 0 and "num_workers_auto" not in summary
    assert load_run(tmp_path / "fixed").events("num_workers_auto") == []
    assert not (tmp_path / "cache" / autotune.CACHE_FILE).exists()


# -------------------------------------------------------------------------- fast loader


def test_fast_loader_run_learns_digits(tmp_path: Path) -> None:
    out = tmp_path / "fast"
    summary = run(tiny(out, data={"loader": "fast"}, train={"epochs": 5}))
    assert summary["status"] == "completed"
    assert summary["loader"] == "fast" and summary["num_workers"] == 0
    assert summary["test_accuracy"] > 0.5
    assert summary["steps"] == 5 * DIGITS_STEPS and summary["samples"] == 5 * DIGITS_TRAIN
    assert all(row["val_accuracy"] is not None for row in summary["epochs"])
    assert summary["epochs"][-1]["train_loss"] < summary["epochs"][0]["train_loss"]
    assert load_run(out).config["data"]["loader"] == "fast"


def test_fast_loader_refuses_workers_on_the_command_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "refused"
    code = main(["run", "--loader", "fast", "--num-workers", "2", "--out", str(out)])
    captured = capsys.readouterr()
    assert code == 2
    lines = captured.err.splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("trainscope: error:") and "loader fast" in lines[0]
    assert "num_workers" in lines[0]
    assert captured.out == ""
    assert not out.exists()  # refused before the run directory was made


def test_unknown_loader_on_the_command_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["run", "--loader", "turbo", "--out", str(tmp_path / "x")])
    err = capsys.readouterr().err
    assert code == 2
    assert len(err.splitlines()) == 1 and "unknown loader 'turbo'" in err
    assert not (tmp_path / "x").exists()
