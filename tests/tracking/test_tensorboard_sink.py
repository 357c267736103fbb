"""The TensorBoard sink: events written for fake records read back with TensorBoard itself."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.conftest import requires
from tests.tracking import CONFIG, STAGE_NAMES, fake_epoch, fake_sample, fake_steps, fake_summary
from trainscope.tracking import make_sinks

pytestmark = [pytest.mark.timeout(120), requires("tensorboard")]


def read_events(log_dir: Path) -> Any:
    """Every scalar and tensor in ``log_dir`` (size_guidance 0 = keep all, no sampling)."""
    from tensorboard.backend.event_processing import event_accumulator

    acc = event_accumulator.EventAccumulator(
        str(log_dir), size_guidance={"scalars": 0, "tensors": 0}
    )
    acc.Reload()
    return acc


def text_of(acc: Any, tag: str) -> str:
    return acc.Tensors(tag)[0].tensor_proto.string_val[0].decode()


def test_scalars_and_text_round_trip(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    steps = fake_steps(1, 1, 3) + fake_steps(2, 4, 3)
    samples = [fake_sample(1_700_000_000.0 + i) for i in range(3)]

    sinks = make_sinks(["tensorboard"])
    sinks.start(run_dir, CONFIG, {"status": "running", "device": "cpu"})
    sinks.log_steps(steps[:3])
    sinks.log_system(samples[0])
    sinks.log_epoch(fake_epoch(1, val=False))
    sinks.log_system(samples[1])
    sinks.log_steps(steps[3:])
    sinks.log_epoch(fake_epoch(2, val=True))
    sinks.log_system(samples[2])
    sinks.finish(fake_summary())
    assert sinks.warnings_list == []

    log_dir = run_dir / "tensorboard"
    assert list(log_dir.glob("events.out.tfevents.*"))
    acc = read_events(log_dir)
    tags = set(acc.Tags()["scalars"])
    assert {
        "train/loss",
        *(f"stages/{k}_s" for k in STAGE_NAMES),
        "epoch/train_loss",
        "epoch/val_loss",
        "epoch/val_accuracy",
        "epoch/duration_s",
        "epoch/samples_per_s",
        "system/cpu_percent",
        "system/rss_mib",
        "system/memory_percent",
        "system/gpu0_util_percent",
        "system/gpu0_memory_used_mib",
        "system/gpu0_power_w",
    } == tags  # and nothing for the GPU whose query failed

    loss = acc.Scalars("train/loss")
    assert [e.step for e in loss] == [r["step"] for r in steps]
    # Event files store float32: equal to what was logged within float32 precision.
    assert [e.value for e in loss] == pytest.approx([r["loss"] for r in steps], rel=1e-6)
    fwd = acc.Scalars("stages/forward_s")
    assert [e.value for e in fwd] == pytest.approx(
        [r["stages"]["forward"] for r in steps], rel=1e-6
    )

    train_loss = acc.Scalars("epoch/train_loss")
    assert [(e.step, e.value) for e in train_loss] == [(1, 1.0), (2, 0.5)]
    val_acc = acc.Scalars("epoch/val_accuracy")  # epoch 1 had no validation
    assert [e.step for e in val_acc] == [2] and val_acc[0].value == pytest.approx(0.7)

    cpu = acc.Scalars("system/cpu_percent")
    assert [e.step for e in cpu] == [0, 1, 2]
    assert [e.wall_time for e in cpu] == pytest.approx([s["t"] for s in samples])
    assert acc.Scalars("system/rss_mib")[0].value == 512.0

    text_tags = set(acc.Tags()["tensors"])
    assert {"config/text_summary", "run/text_summary", "summary/text_summary"} <= text_tags
    assert "optimizer: sgd" in text_of(acc, "config/text_summary")
    summary = text_of(acc, "summary/text_summary")
    assert "| test_accuracy | 0.9375 |" in summary and "| status | completed |" in summary


def test_finish_closes_the_writer(tmp_path: Path) -> None:
    sinks = make_sinks(["tensorboard"])
    sinks.start(tmp_path, CONFIG, {})
    sinks.log_steps(fake_steps(1, 1, 2))
    sinks.finish(fake_summary("failed"))
    sinks.log_system(fake_sample(1.0))  # a late sample: ignored, not an error
    assert sinks.warnings_list == []
    acc = read_events(tmp_path / "tensorboard")
    assert [e.step for e in acc.Scalars("train/loss")] == [1, 2]
    assert "| status | failed |" in text_of(acc, "summary/text_summary")
