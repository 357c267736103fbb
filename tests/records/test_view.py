"""SummaryView: a summary.json's fields typed, each missing or wrong-typed field read as
its empty value (None, {}, [], "") rather than each reader checking it again."""

from __future__ import annotations

import math

from trainscope.records.view import SummaryView


def test_fields_read_as_recorded() -> None:
    view = SummaryView({
        "status": "completed", "device": "cuda:1", "strategy": "ddp", "world_size": 2,
        "steps": 40, "wall_time_s": 12.5, "stages_s": {"forward": 1.0, "other": -0.01},
        "epochs": [{"epoch": 1}], "steady_state": {"step_s": {"median": 0.25}},
        "cpu": {"cores": 2}, "data_only": True, "ranks": [{"rank": 0}],
    })  # fmt: skip
    assert (view.status, view.device, view.on_gpu, view.strategy) == (
        "completed", "cuda:1", True, "ddp")  # fmt: skip
    assert (view.world_size, view.steps, view.wall_time_s) == (2, 40, 12.5)
    assert view.stages_s == {"forward": 1.0, "other": -0.01}  # signed: other can be < 0
    assert view.epochs == [{"epoch": 1}] and view.ranks == [{"rank": 0}]
    assert view.steady_step_s == 0.25 and view.cpu == {"cores": 2} and view.data_only


def test_missing_null_and_wrong_types_read_as_empty() -> None:
    for summary in ({}, None, {"status": None, "world_size": True, "steps": 2.5,
                               "wall_time_s": "12", "stages_s": [1], "epochs": {"a": 1},
                               "steady_state": None, "cpu": "x", "data_only": "yes",
                               "lr": math.nan, "strategy": ""}):  # fmt: skip
        view = SummaryView(summary)
        assert view.status == "" and view.strategy is None and not view.on_gpu
        assert view.world_size is None and view.steps is None and view.wall_time_s is None
        assert view.stages_s == {} and view.epochs == [] and view.steady_state == {}
        assert view.steady_step_s is None and view.cpu == {} and not view.data_only
        assert view.number("lr") is None and view.section("memory") == {}


def test_a_stage_that_is_not_a_number_is_left_out_of_stages() -> None:
    view = SummaryView({"stages_s": {"forward": 1, "backward": None, "odd": True}})
    assert view.stages_s == {"forward": 1.0}


def test_the_reports_fields_read_as_recorded_or_empty() -> None:
    view = SummaryView({
        "samples_per_s": 250, "peak_memory_bytes": 2048, "train_time_s": 3.5,
        "process": {"startup_s": 1.2}, "comm": {"hook_inflight_s": 0.1},
        "target": {"reached": True},
    })  # fmt: skip
    assert (view.samples_per_s, view.peak_memory_bytes, view.train_time_s) == (250.0, 2048, 3.5)
    assert view.process == {"startup_s": 1.2} and view.comm == {"hook_inflight_s": 0.1}
    assert view.target == {"reached": True}
    wrong = SummaryView({
        "samples_per_s": "fast", "peak_memory_bytes": 2.5e9, "train_time_s": math.inf,
        "process": [1], "comm": "x", "target": None,
    })  # fmt: skip
    assert wrong.samples_per_s is None and wrong.peak_memory_bytes is None
    assert wrong.train_time_s is None
    assert wrong.process == {} and wrong.comm == {} and wrong.target == {}


def test_process_time_reads_the_process_section() -> None:
    assert SummaryView({"process": {"time_s": 3.5}}).process_time_s == 3.5
    assert SummaryView({"process": {"time_s": "3"}}).process_time_s is None
    assert SummaryView({"process": None}).process_time_s is None
