"""The Checkpointer: when a checkpoint is due, what it saves, how many it keeps; and the
RunProgress it saves beside the TrainState, back in one call."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from trainscope.config import TrainConfig
from trainscope.profiling.timer import HostStageTimer
from trainscope.records import RunWriter
from trainscope.records.record_specs import RUN_STATE
from trainscope.records.schema import check
from trainscope.techniques.precision import make_precision
from trainscope.train.checkpoint import complete_checkpoints, load_checkpoint
from trainscope.train.checkpointer import Checkpointer
from trainscope.train.loop import EpochOptions, train_epoch
from trainscope.train.progress import EpochProgress, RunProgress
from trainscope.train.state import TrainState

pytestmark = pytest.mark.timeout(60)

FACTS = {"config": {"train": {"lr": 0.1}}, "world_size": 1, "device_type": "cpu", "data": None}


def _checkpointer(tmp_path: Path, **train: object) -> tuple[Checkpointer, RunWriter]:
    writer = RunWriter(tmp_path)
    progress = RunProgress(started=0.0, attempt=1)
    return Checkpointer(TrainConfig(**train), writer, progress, lambda: dict(FACTS)), writer


def _state() -> TrainState:
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    return TrainState(
        model=model,
        optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
        precision=make_precision("fp32", torch.device("cpu")),
        loss_fn=torch.nn.functional.cross_entropy,
        device=torch.device("cpu"),
    )


def test_due_every_n_steps_and_at_epoch_ends(tmp_path: Path) -> None:
    never, _ = _checkpointer(tmp_path)
    assert not never.enabled
    assert not any(never.due(s) or never.due_at_epoch_end(s) for s in range(1, 20))
    steps, _ = _checkpointer(tmp_path, checkpoint_every=3)
    assert steps.enabled
    assert [s for s in range(1, 10) if steps.due(s)] == [3, 6, 9]
    # An epoch that ends on a step checkpoint's step takes it after its row; no other.
    assert steps.due_at_epoch_end(6) and not steps.due_at_epoch_end(7)
    epochs, _ = _checkpointer(tmp_path, checkpoint_every_epoch=True)
    assert epochs.enabled and not epochs.due(3)
    assert epochs.due_at_epoch_end(7)


def test_the_loop_saves_mid_epoch_and_only_the_newest_are_kept(tmp_path: Path) -> None:
    checkpointer, writer = _checkpointer(tmp_path, checkpoint_every=3, keep_checkpoints=2)
    state = _state()
    data = [(torch.randn(8, 4), torch.randint(0, 3, (8,))) for _ in range(10)]

    def on_steps(records: list[dict]) -> None:  # as the trainer records them
        for r in records:
            writer.log("step", **r)

    options = EpochOptions(log_every=4, on_steps=on_steps, checkpointer=checkpointer)
    train_epoch(state, data, HostStageTimer(), options)
    writer.close()
    # Steps 3, 6 and 9 were saved; the keep policy left the newest two.
    assert [c.step for c in complete_checkpoints(tmp_path / "checkpoints")] == [9, 6]
    lines = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    saved = [e for e in lines if e["event"] == "checkpoint"]
    assert [e["step"] for e in saved] == [3, 6, 9]
    # Every step up to a checkpoint is in the record before its line.
    order = [(e["event"], e["step"]) for e in lines]
    assert order.index(("step", 9)) < order.index(("checkpoint", 9))
    assert checkpointer.progress.stages["checkpoint"] == pytest.approx(
        sum(e["seconds"] for e in saved)
    )
    run = load_checkpoint(complete_checkpoints(tmp_path / "checkpoints")[0])["run"]
    assert {k: run[k] for k in FACTS} == FACTS
    assert run["epoch_progress"]["samples"] == 9 * 8  # the epoch under way, 9 steps in
    assert check(run, RUN_STATE, "trainer.json")[1] == []  # what a resume reads


def test_an_epoch_that_ends_on_a_due_step_leaves_it_to_the_trainer(tmp_path: Path) -> None:
    checkpointer, _ = _checkpointer(tmp_path, checkpoint_every=5)
    state = _state()
    data = [(torch.randn(8, 4), torch.randint(0, 3, (8,))) for _ in range(5)]
    train_epoch(state, data, HostStageTimer(), EpochOptions(checkpointer=checkpointer))
    assert complete_checkpoints(tmp_path / "checkpoints") == []
    assert checkpointer.due_at_epoch_end(state.step)
    checkpointer.save(state)
    [ckpt] = complete_checkpoints(tmp_path / "checkpoints")
    assert ckpt.step == 5 and load_checkpoint(ckpt)["run"]["epoch_progress"] is None


def test_run_progress_state_dict_round_trip() -> None:
    """What a checkpoint saves of the run's progress comes back whole in one call; the
    stage seconds add to what the new attempt has spent already (its setup)."""
    before = RunProgress(started=100.0, attempt=2, wall_before=7.0)
    before.add_stage("setup", 1.5)
    before.add_stage("forward", 2.0)
    before.samples, before.steps, before.train_time = 64, 8, 3.25
    before.epochs.append({"epoch": 1, "train_loss": 0.5})
    before.add_steps(
        [{"batch_size": 8, "stages": {"forward": 0.1}, "loss": float(i)} for i in range(7)]
    )
    epoch = EpochProgress(samples=24, loss_sum=3.0, loss_samples=24, t_start=12.0)
    sd = json.loads(json.dumps(before.state_dict(at=110.0, epoch=epoch)))  # as JSON holds it
    assert sd["wall_s"] == 17.0  # 7 s before this attempt, 10 s of it
    assert "other" not in sd["stages"]
    assert check(sd, RUN_STATE, "trainer.json")[1] == []

    after = RunProgress(started=200.0, attempt=3)
    after.add_stage("setup", 0.5)  # the new attempt's own setup so far
    records = [{"batch_size": 8, "stages": {"forward": 0.1}}]
    after.load_state_dict(sd, written_s=0.25, step_records=records)
    assert after.stages["setup"] == 2.0 and after.stages["forward"] == 2.0
    assert after.stages["checkpoint"] == 0.25
    assert after.wall_before == 17.25  # up to the checkpoint, and its write
    assert (after.samples, after.steps, after.train_time) == (64, 8, 3.25)
    assert after.epochs == before.epochs
    assert after.first_losses == [0.0, 1.0, 2.0, 3.0, 4.0]  # the first five only
    assert after.step_records == records
    assert after.take_resumed_epoch() == epoch
    assert after.take_resumed_epoch() is None  # only the epoch that goes on has it
    again = after.state_dict(at=200.0)
    assert {k: again[k] for k in ("samples", "steps", "train_time", "epochs")} == {
        k: sd[k] for k in ("samples", "steps", "train_time", "epochs")
    }
