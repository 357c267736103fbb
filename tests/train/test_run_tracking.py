"""A real run with a tracking sink: the sink sees what the run record holds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainscope.config import from_dict
from trainscope.train.run import run

pytestmark = pytest.mark.timeout(120)


def _cfg(out: Path, **runtime: object):
    return from_dict(
        {
            "train": {"epochs": 2, "max_steps_per_epoch": 6, "log_every": 3},
            "runtime": {"progress": False, "system_interval_s": 0.1, **runtime},
            "out": str(out),
            "overwrite": True,
        }
    )


def test_tensorboard_sink_mirrors_the_run_record(tmp_path: Path) -> None:
    event_accumulator = pytest.importorskip(
        "tensorboard.backend.event_processing.event_accumulator"
    )
    out = tmp_path / "run"
    summary = run(_cfg(out, track=["tensorboard"]))
    assert summary["status"] == "completed"
    assert summary["tracking"]["sinks"] == ["tensorboard"] and not summary["tracking"]["warnings"]
    acc = event_accumulator.EventAccumulator(str(out / "tensorboard"), size_guidance={"scalars": 0})
    acc.Reload()
    logged = {e.step: e.value for e in acc.Scalars("train/loss")}
    steps = [
        json.loads(line)
        for line in (out / "metrics.jsonl").read_text().splitlines()
        if json.loads(line)["event"] == "step"
    ]
    # Every step of the run record, with the same loss (float32 in the event file).
    assert sorted(logged) == [s["step"] for s in steps]
    for s in steps:
        assert logged[s["step"]] == pytest.approx(s["loss"], rel=1e-6)
    assert [e.step for e in acc.Scalars("epoch/train_loss")] == [1, 2]


def test_overwrite_removes_the_old_event_files(tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    out = tmp_path / "run"
    run(_cfg(out, track=["tensorboard"]))
    first = sorted(p.name for p in (out / "tensorboard").iterdir())
    run(_cfg(out, track=["tensorboard"]))
    second = sorted(p.name for p in (out / "tensorboard").iterdir())
    assert len(first) == len(second) == 1 and first != second
    run(_cfg(out))  # no sink this time: nothing of the old sink's output is left
    assert not (out / "tensorboard").exists()


def test_unknown_sink_is_a_config_error() -> None:
    from trainscope.errors import ConfigError

    with pytest.raises(ConfigError, match="unknown tracking sink 'mlflow'"):
        from_dict({"runtime": {"track": ["mlflow"]}})
