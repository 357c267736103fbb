"""The run as an object: its phases in order, and a TrainState that knows where it is."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from trainscope.data.loaders import BatchLoader  # noqa: F401 (the loop's loader type)
from trainscope.profiling.timer import HostStageTimer
from trainscope.techniques.precision import make_precision
from trainscope.train.loop import EpochOptions, train_epoch
from trainscope.train.state import TrainState, rng_states

pytestmark = pytest.mark.timeout(60)


def _state() -> TrainState:
    model = torch.nn.Linear(4, 2)
    return TrainState(
        model=model,
        optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
        precision=make_precision("fp32", torch.device("cpu")),
        loss_fn=torch.nn.functional.cross_entropy,
        device=torch.device("cpu"),
    )


def test_train_state_knows_its_position_inside_and_between_epochs():
    state = _state()
    data = [(torch.randn(8, 4), torch.randint(0, 2, (8,))) for _ in range(5)]
    seen = []

    def on_steps(records):
        seen.extend((r["step"], state.epoch_step) for r in records)

    train_epoch(
        state, data, HostStageTimer(), EpochOptions(max_steps=3, log_every=1, on_steps=on_steps)
    )
    assert seen == [(1, 1), (2, 2), (3, 3)]  # mid-epoch: the steps taken in this epoch
    assert (state.step, state.epoch, state.epoch_step) == (3, 1, 0)  # between epochs
    sd = state.state_dict()
    assert (sd["step"], sd["epoch"], sd["epoch_step"]) == (3, 1, 0)


def test_rng_states_restore_every_generator_a_run_draws_from():
    states = rng_states()
    assert {"python", "numpy", "torch"} <= states.keys()
    first = (random.random(), float(np.random.rand()), torch.rand(1).item())
    random.setstate(states["python"])
    np.random.set_state(states["numpy"])
    torch.set_rng_state(states["torch"])
    assert (random.random(), float(np.random.rand()), torch.rand(1).item()) == first
