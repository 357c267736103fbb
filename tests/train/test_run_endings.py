"""How runs end, recorded truthfully: a non-finite loss stops the run naming the step
(except under fp16's GradScaler, which skips such a step and counts it), the record is
strict JSON, and an empty validation split is "no validation data"."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from trainscope.cli import main
from trainscope.config import from_dict
from trainscope.errors import DivergedError
from trainscope.profiling.timer import HostStageTimer
from trainscope.reports.run_report import build_run_report
from trainscope.techniques.precision import Precision
from trainscope.train.loop import EpochOptions, train_epoch
from trainscope.train.run import run
from trainscope.train.setup import NO_VALIDATION
from trainscope.train.state import TrainState


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


class SkippingPrecision(Precision):
    """fp16's contract on a CPU: a step whose gradients are not finite is skipped and
    counted (GradScaler's found_inf), and the run goes on."""

    name = "fp16-like"
    skips_nonfinite_steps = True

    def step(self, optimizer: torch.optim.Optimizer, clip: float = 0.0, norm=None) -> None:
        grads = [p.grad for g in optimizer.param_groups for p in g["params"] if p.grad is not None]
        if all(torch.isfinite(g).all() for g in grads):
            optimizer.step()
        else:
            self.skipped_steps += 1


def _nan_at(step: int):
    calls = {"n": 0}

    def loss(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        calls["n"] += 1
        value = torch.nn.functional.cross_entropy(out, y)
        return value * float("nan") if calls["n"] == step else value

    return loss


@pytest.mark.parametrize("skips", [True, False])
def test_the_loop_stops_at_a_nan_loss_only_where_the_precision_does_not_skip_it(skips):
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    cpu = torch.device("cpu")
    precision = SkippingPrecision(cpu) if skips else Precision(cpu)
    state = TrainState(
        model=model,
        optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
        precision=precision,
        loss_fn=_nan_at(3),
        device=cpu,
    )
    data = [(torch.randn(8, 4), torch.randint(0, 3, (8,))) for _ in range(6)]
    seen: list[dict] = []

    def train():
        options = EpochOptions(log_every=2, on_steps=seen.extend)
        return train_epoch(state, data, HostStageTimer(), options)

    if not skips:
        with pytest.raises(DivergedError, match=r"the loss was nan at step 3 \(epoch 1"):
            train()
        assert [r["step"] for r in seen] == [1, 2, 3, 4]  # the interval that held step 3
        return
    result = train()  # no DivergedError: the step was skipped and counted, the run goes on
    assert result.steps == 6 and [r["step"] for r in seen] == [1, 2, 3, 4, 5, 6]
    assert seen[2]["loss"] is None and seen[2]["nonfinite_loss"] == "nan"
    others = seen[:2] + seen[3:]
    assert all(r["loss"] is not None and "nonfinite_loss" not in r for r in others)
    assert precision.skipped_steps == 1
    assert all(torch.isfinite(p).all() for p in model.parameters())  # the NaN never landed
    assert result.mean_loss is not None and result.mean_loss == result.mean_loss  # not NaN


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_under_fp16_a_nan_loss_is_a_skipped_step_not_the_end_of_the_run(tmp_path, factory_module):
    spec = factory_module("nan_at_7_fp16", NAN_AT_STEP_7)
    out = tmp_path / "run"
    cfg = {
        "workload": {"name": spec},
        "runtime": {"device": "cuda", "precision": "fp16"},
        "train": {"epochs": 2, "log_every": 4},
        "out": str(out),
    }
    summary = run(from_dict(cfg))
    assert summary["status"] == "completed" and summary["error"] is None
    assert summary["skipped_steps"] >= 1  # step 7's, and any of GradScaler's own early ones
    record = strict_json((out / "summary.json").read_text())
    assert record["status"] == "completed" and record["skipped_steps"] == summary["skipped_steps"]
    lines = [strict_json(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    steps = {e["step"]: e for e in lines if e["event"] == "step"}
    assert steps[7]["loss"] is None and steps[7]["nonfinite_loss"] == "nan"
    assert max(steps) == summary["steps"] > 7  # it went on past step 7, to the end
    assert sum(e["event"] == "epoch" for e in lines) == 2


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
