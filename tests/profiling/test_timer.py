"""Stage timers: exact accounting with a fake clock; CUDA events where a GPU exists."""

from __future__ import annotations

import itertools

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from trainscope.profiling.timer import CudaEventStageTimer, HostStageTimer, make_stage_timer
from trainscope.techniques.precision import Precision
from trainscope.train.loop import TRAIN_STAGES, EpochOptions, train_epoch
from trainscope.train.state import TrainState


def test_host_timer_attributes_each_interval_to_the_stage_it_closes():
    ticks = iter([0.0, 1.0, 3.0, 6.0, 10.0, 20.0, 21.0])
    timer = HostStageTimer(clock=lambda: next(ticks))
    timer.start_step()  # 0
    timer.mark("a")  # 1
    timer.mark("b")  # 3
    timer.mark("a")  # 6: stages may repeat, their times add
    timer.end_step()
    timer.start_step()  # 10: the gap between steps belongs to no stage
    timer.mark("b")  # 20
    timer.end_step()
    assert timer.resolve() == [{"a": 1.0 + 3.0, "b": 2.0}, {"b": 10.0}]
    assert timer.resolve() == []  # each step is handed out once


def test_host_timer_exact_mode_syncs_before_every_reading():
    calls = []
    clock = itertools.count()
    timer = HostStageTimer(clock=lambda: float(next(clock)), sync=lambda: calls.append(1))
    assert timer.kind == "cuda_sync"
    timer.start_step()
    timer.mark("x")
    timer.mark("y")
    assert len(calls) == 3


def test_cpu_gets_perf_counter_timer():
    assert isinstance(make_stage_timer(torch.device("cpu"), "auto"), HostStageTimer)
    assert make_stage_timer(torch.device("cpu"), "exact").kind == "perf_counter"


def test_train_epoch_sums_stages_exactly_with_a_fake_clock():
    """Every stage of every step gets exactly one tick: the loop times each stage once."""
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(40, 4), torch.randint(0, 3, (40,)))
    loader = DataLoader(data, batch_size=8)
    model = torch.nn.Linear(4, 3)
    state = TrainState(
        model=model,
        optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
        precision=Precision(torch.device("cpu")),
        loss_fn=torch.nn.functional.cross_entropy,
        device=torch.device("cpu"),
    )
    clock = itertools.count()
    timer = HostStageTimer(clock=lambda: float(next(clock)))
    seen: list[dict] = []
    res = train_epoch(state, loader, timer, EpochOptions(log_every=2, on_steps=seen.extend))
    assert res.steps == 5 and res.samples == 40 and state.step == 5 and state.epoch == 1
    assert [r["step"] for r in seen] == [1, 2, 3, 4, 5]
    # No strategy that syncs gradients by hand: no "comm" stage in the step; no pipeline
    # schedule: no "pipeline_wait".
    for r in seen:
        assert r["stages"] == {s: 1.0 for s in TRAIN_STAGES if s not in ("comm", "pipeline_wait")}
        assert r["batch_size"] == 8
    # data_wait also holds the (real-clock) DataLoader iterator start-up.
    assert res.stage_s["forward"] == 5.0 and res.stage_s["data_wait"] >= 5.0
    # The epoch's mean loss is the sample-weighted mean of the step losses.
    assert res.mean_loss == pytest.approx(sum(r["loss"] for r in seen) / 5)


def test_max_steps_and_short_last_batch_are_counted():
    data = TensorDataset(torch.randn(21, 4), torch.randint(0, 3, (21,)))
    model = torch.nn.Linear(4, 3)
    state = TrainState(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        Precision(torch.device("cpu")),
        torch.nn.functional.cross_entropy,
        torch.device("cpu"),
    )
    res = train_epoch(state, DataLoader(data, batch_size=8), HostStageTimer())
    assert (res.steps, res.samples) == (3, 21)
    loader = DataLoader(data, batch_size=8)
    res = train_epoch(state, loader, HostStageTimer(), EpochOptions(max_steps=2))
    assert (res.steps, res.samples, state.step) == (2, 16, 5)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_event_timer_resolves_lazily_and_measures_gpu_work():
    dev = torch.device("cuda")
    timer = make_stage_timer(dev, "auto")
    assert isinstance(timer, CudaEventStageTimer)
    a = torch.randn(4096, 4096, device=dev)
    torch.cuda.synchronize()
    for _ in range(3):
        timer.start_step()
        b = a @ a  # noqa: F841  (work between the marks)
        timer.mark("matmul")
        timer.mark("nothing")
        timer.end_step()
    steps = timer.resolve(block=True)
    assert len(steps) == 3
    for st in steps:
        assert st["matmul"] > 0 and st["matmul"] > 10 * st["nothing"]
