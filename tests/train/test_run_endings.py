"""How runs end, recorded truthfully: a non-finite loss stops the run naming the step, the
record is strict JSON, and an empty validation split is "no validation data"."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainscope.cli import main
from trainscope.config import from_dict
from trainscope.errors import DivergedError
from trainscope.reports.run_report import build_run_report
from trainscope.train.run import NO_VALIDATION, run


def strict_json(text: str) -> object:
    """Parse as a strict parser would: bare NaN/Infinity are an error."""

    def refuse(constant: str) -> None:
        raise ValueError(f"bare {constant} in a record")

    return json.loads(text, parse_constant=refuse)


@pytest.fixture
def factory_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Write ``name.py`` (a user's workload factory) where imports find it."""

    def write(name: str, body: str) -> str:
        (tmp_path / f"{name}.py").write_text(
            "import torch\nfrom trainscope.workloads.builtin import digits\n" + body
        )
        monkeypatch.syspath_prepend(str(tmp_path))
        return f"{name}:factory"

    return write


NAN_AT_STEP_7 = """
calls = {"n": 0}
def loss(out, y):
    calls["n"] += 1
    value = torch.nn.functional.cross_entropy(out, y)
    return value * float("nan") if calls["n"] == 7 else value
def factory(cfg):
    wl = digits(cfg, None)
    wl.loss_fn = loss
    return wl
"""


def test_a_nan_loss_stops_the_run_naming_the_step(tmp_path, factory_module):
    spec = factory_module("nan_at_7", NAN_AT_STEP_7)
    out = tmp_path / "run"
    cfg = from_dict(
        {"workload": {"name": spec}, "train": {"epochs": 3, "log_every": 4}, "out": str(out)}
    )
    with pytest.raises(DivergedError, match=r"the loss was nan at step 7 \(epoch 1"):
        run(cfg)
    summary = strict_json((out / "summary.json").read_text())
    assert summary["status"] == "failed"
    assert "step 7" in summary["error"] and "loss + backward" in summary["error"]
    lines = [strict_json(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    steps = {e["step"]: e for e in lines if e["event"] == "step"}
    assert steps[7]["loss"] is None and steps[7]["nonfinite_loss"] == "nan"
    assert max(steps) == 8  # the log interval that held step 7, and nothing after it
    assert not any(e["event"] == "epoch" for e in lines)


def test_a_nan_loss_is_one_line_on_the_command_line(tmp_path, factory_module, capsys):
    spec = factory_module("nan_at_7b", NAN_AT_STEP_7)
    code = main(["run", "--workload", spec, "--epochs", "1", "--out", str(tmp_path / "r"), "-q"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and len(err) == 1
    assert err[0].startswith("trainscope: error: the loss was nan at step 7")


EMPTY_VALIDATION = """
from torch.utils.data import TensorDataset
def factory(cfg):
    wl = digits(cfg, None)
    wl.val_set = TensorDataset(torch.zeros(0, 1, 8, 8), torch.zeros(0, dtype=torch.long))
    return wl
"""


def test_an_empty_validation_split_is_no_validation_data(tmp_path, factory_module):
    spec = factory_module("no_val", EMPTY_VALIDATION)
    out = tmp_path / "run"
    summary = run(from_dict({"workload": {"name": spec}, "train": {"epochs": 2}, "out": str(out)}))
    assert summary["status"] == "completed"
    assert NO_VALIDATION in summary["notes"]
    for row in summary["epochs"]:
        assert row["val_loss"] is None and row["val_accuracy"] is None  # never 0 / 0%
    assert summary["test_accuracy"] is not None  # the test split was there and used
    report = build_run_report(out)
    assert "no validation data" in report.markdown_path.read_text()


def test_a_batch_larger_than_the_training_set_is_one_batch_and_says_so(tmp_path):
    cfg = {"data": {"batch_size": 100_000}, "train": {"epochs": 2}, "out": str(tmp_path / "r")}
    summary = run(from_dict(cfg))
    assert summary["status"] == "completed" and summary["steps"] == 2
    assert "batch size 100000 > 1258 training samples: one batch per epoch" in summary["notes"]
