"""Learning-rate schedules, weight-decay groups, gradient clipping, and their place in a run."""

from __future__ import annotations

import json
import math

import pytest
import torch
from torch import nn

from trainscope.config import ConfigError, TrainConfig, from_dict
from trainscope.techniques.precision import make_precision
from trainscope.train.run import run
from trainscope.train.schedule import lr_factor, make_scheduler, param_groups


def test_cosine_warms_up_then_decays_to_the_floor() -> None:
    f = [lr_factor(s, 110, "cosine", warmup=10, min_ratio=0.1) for s in range(110)]
    assert f[0] == pytest.approx(1 / 11) and f[9] == pytest.approx(10 / 11)  # nanoGPT's ramp
    assert f[10] == pytest.approx(1.0)  # the peak right after the warm-up
    assert f[-1] == pytest.approx(0.1)  # lr / 10 at the last step
    assert f[60] == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 50 / 99)))
    assert all(a >= b for a, b in zip(f[10:], f[11:]))


def test_linear_constant_and_one_cycle() -> None:
    lin = [lr_factor(s, 11, "linear") for s in range(11)]
    assert lin[0] == 1.0 and lin[5] == pytest.approx(0.5) and lin[-1] == pytest.approx(0.0)
    assert [lr_factor(s, 5, "constant", warmup=2) for s in range(5)] == pytest.approx(
        [1 / 3, 2 / 3, 1, 1, 1]
    )
    one = [lr_factor(s, 100, "one-cycle") for s in range(100)]
    assert one[0] == pytest.approx(1 / 25)  # OneCycleLR's start: max_lr / 25
    assert max(one) == 1.0 and one.index(max(one)) == 29  # OneCycleLR: 0.3 x 100 - 1
    assert one[-1] == pytest.approx(1 / 25 / 1e4)


def test_the_factor_matches_torchs_one_cycle() -> None:
    """The one-cycle shape is OneCycleLR's (cosine annealing, default factors)."""
    opt = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=0.1)
    ref = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.1, total_steps=50)
    lrs = []
    for _ in range(50):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        ref.step()
    ours = [0.1 * lr_factor(s, 50, "one-cycle", warmup=15) for s in range(50)]
    assert ours == pytest.approx(lrs, rel=1e-6, abs=1e-12)


def test_weight_decay_skips_biases_and_norms() -> None:
    model = nn.Sequential(nn.Linear(4, 4), nn.LayerNorm(4), nn.Embedding(3, 4))
    decayed, plain = param_groups(model, 0.1)
    assert [p.dim() for p in decayed["params"]] == [2, 2]  # Linear weight, embedding
    assert decayed["weight_decay"] == 0.1 and plain["weight_decay"] == 0.0
    assert len(plain["params"]) == 3  # Linear bias, LayerNorm weight and bias
    (only,) = param_groups(model, 0.0)
    assert len(only["params"]) == len(list(model.parameters()))


def test_scheduler_state_survives_a_json_round_trip() -> None:
    """A checkpoint keeps the schedule as plain JSON: the resumed lr is the one it had."""
    cfg = TrainConfig(schedule="cosine", warmup_steps=3, min_lr_ratio=0.1, lr=0.5)

    def fresh() -> tuple[torch.optim.Optimizer, object]:
        opt = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=cfg.lr)
        return opt, make_scheduler(opt, cfg, 20)

    opt, sched = fresh()
    for _ in range(7):
        opt.step()
        sched.step()
    saved = json.loads(json.dumps(sched.state_dict()))
    opt2, sched2 = fresh()
    opt2.load_state_dict(opt.state_dict())  # as a resume does: the lr in the param groups
    sched2.load_state_dict(saved)
    for o, sc in ((opt, sched), (opt2, sched2)):
        o.step()
        sc.step()
    assert opt2.param_groups[0]["lr"] == opt.param_groups[0]["lr"] != cfg.lr
    assert make_scheduler(opt, TrainConfig(), 20) is None  # constant, no warm-up


def test_clipping_bounds_the_global_norm() -> None:
    p = nn.Parameter(torch.zeros(3))
    opt = torch.optim.SGD([p], lr=1.0)
    p.grad = torch.tensor([3.0, 4.0, 0.0])  # norm 5
    make_precision("fp32", torch.device("cpu")).step(opt, clip=1.0)
    assert p.detach().norm().item() == pytest.approx(1.0)  # lr 1: the step is the gradient


@pytest.mark.parametrize(
    ("key", "value"),
    [("schedule", "warm"), ("betas", [0.9]), ("betas", [0.9, 1.0]), ("warmup_steps", -1),
     ("grad_clip", float("nan")), ("min_lr_ratio", 2.0)],
)  # fmt: skip
def test_bad_settings_are_refused(key: str, value: object) -> None:
    with pytest.raises(ConfigError, match=key):
        TrainConfig(**{key: value})


def test_a_run_records_the_lr_of_every_step(tmp_path) -> None:
    cfg = from_dict(
        {
            "out": str(tmp_path / "r"),
            "train": {"epochs": 1, "max_steps_per_epoch": 12, "lr": 0.1, "log_every": 4,
                      "schedule": "cosine", "warmup_steps": 2, "grad_clip": 1.0,
                      "optimizer": "adamw", "betas": [0.9, 0.95], "weight_decay": 0.1},
            "runtime": {"progress": False},
        }
    )  # fmt: skip
    assert run(cfg)["status"] == "completed"
    lines = (tmp_path / "r" / "metrics.jsonl").read_text().splitlines()
    lrs = [e["lr"] for e in map(json.loads, lines) if e.get("event") == "step"]
    assert lrs == pytest.approx([0.1 * lr_factor(s, 12, "cosine", warmup=2) for s in range(12)])
