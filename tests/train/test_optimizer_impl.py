"""``train.optimizer_impl``: torch.optim's for-loop, foreach or fused update, and auto."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
import yaml
from torch import nn

from trainscope.cli import main
from trainscope.config import OPTIMIZER_IMPLS, RunConfig, TrainConfig
from trainscope.records.run_dir import load_run
from trainscope.train.resume import MAY_CHANGE, config_differences
from trainscope.train.schedule import build_optimizer

# What each impl passes to torch.optim: (foreach, fused) in the optimizer's defaults.
# auto passes neither, so torch picks at the first step (the for-loop on CPU).
EXPECTED = {
    "auto": (None, None),
    "for-loop": (False, None),
    "foreach": (True, None),
    "fused": (None, True),
}


def _model(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.LayerNorm(16), nn.Linear(16, 3))


def test_every_impl_is_covered() -> None:
    assert tuple(EXPECTED) == OPTIMIZER_IMPLS


@pytest.mark.parametrize("optimizer", ["sgd", "adam", "adamw"])
@pytest.mark.parametrize("impl", OPTIMIZER_IMPLS)
def test_the_impl_reaches_torch_optim(optimizer: str, impl: str) -> None:
    cfg = TrainConfig(optimizer=optimizer, lr=0.01, optimizer_impl=impl)
    opt = build_optimizer(cfg, _model())
    assert (opt.defaults["foreach"], opt.defaults["fused"]) == EXPECTED[impl]
    assert all(g["fused"] == EXPECTED[impl][1] for g in opt.param_groups)


def _one_step(optimizer: str, impl: str) -> dict[str, torch.Tensor]:
    """The parameters after one step of ``impl`` on a fixed batch (weight decay on)."""
    model = _model()
    cfg = TrainConfig(optimizer=optimizer, lr=1e-2, weight_decay=0.1, optimizer_impl=impl)
    opt = build_optimizer(cfg, model)
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(32, 8, generator=g), torch.randint(0, 3, (32,), generator=g)
    nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


@pytest.mark.parametrize("optimizer", ["sgd", "adam", "adamw"])
@pytest.mark.parametrize("impl", ["foreach", "fused"])
def test_one_step_matches_the_for_loop(optimizer: str, impl: str) -> None:
    """foreach and fused compute the for-loop's update; fused in one kernel whose order of
    operations may round differently (measured on CPU: a few 1e-9 after Adam steps), so
    the tolerance is loose; the step moves the weights by far more than it."""
    want, got = _one_step(optimizer, "for-loop"), _one_step(optimizer, impl)
    for k in want:
        torch.testing.assert_close(got[k], want[k], rtol=1e-5, atol=1e-6, msg=k)
    start = _model().state_dict()
    assert max((want[k] - start[k]).abs().max().item() for k in want) > 1e-3


def test_resume_keeps_the_impl_and_an_older_config_counts_as_auto() -> None:
    now = RunConfig().to_dict()
    fused = copy.deepcopy(now)
    fused["train"]["optimizer_impl"] = "fused"
    assert "train.optimizer_impl" not in MAY_CHANGE
    assert config_differences(fused, now) == ["train.optimizer_impl: 'fused' then, 'auto' now"]
    older = copy.deepcopy(now)  # a checkpoint written before the setting existed
    del older["train"]["optimizer_impl"]
    assert config_differences(older, now) == []
    assert config_differences(older, fused) == ["train.optimizer_impl: 'auto' then, 'fused' now"]


SMALL = ["--workload", "synthetic", "--synthetic-samples", "64", "--synthetic-shape", "1",
         "12", "12", "--batch-size", "16", "--max-steps-per-epoch", "2", "--optimizer",
         "adamw", "--lr", "0.001", "--device", "cpu", "-q", "--no-progress"]  # fmt: skip


@pytest.mark.timeout(120)
def test_a_fused_run_is_recorded_checkpointed_and_resumed_as_fused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    argv = [*SMALL, "--optimizer-impl", "fused", "--checkpoint-every", "2"]
    assert main(["run", *argv, "--epochs", "1", "--out", str(run)]) == 0
    saved = yaml.safe_load((run / "config.yaml").read_text())
    assert saved["train"]["optimizer_impl"] == "fused"
    capsys.readouterr()
    assert main(["run", "--resume", str(run), "--epochs", "2", "--optimizer-impl", "for-loop"])
    err = capsys.readouterr().err
    assert "train.optimizer_impl: 'fused' then, 'for-loop' now" in err, err
    assert main(["run", "--resume", str(run), "--epochs", "2", "-q", "--no-progress"]) == 0
    summary = load_run(run).summary
    assert summary["status"] == "completed" and len(summary["epochs"]) == 2
