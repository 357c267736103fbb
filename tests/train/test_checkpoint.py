"""Checkpoints of a TrainState: complete or ignored, bit-exact back, never unpickled."""

from __future__ import annotations

import pickle
import random
from pathlib import Path

import numpy as np
import pytest
import torch

from trainscope.errors import TrainscopeError
from trainscope.profiling.timer import HostStageTimer
from trainscope.techniques.precision import make_precision
from trainscope.train.checkpoint import (
    MANIFEST,
    complete_checkpoints,
    load_checkpoint,
    load_latest,
    prune,
    write_checkpoint,
)
from trainscope.train.loop import EpochOptions, train_epoch
from trainscope.train.state import TrainState

pytestmark = pytest.mark.timeout(60)


def _state(optimizer: str = "sgd") -> TrainState:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    opt = (
        torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        if optimizer == "sgd"
        else torch.optim.AdamW(model.parameters(), lr=1e-2)
    )
    return TrainState(
        model=model,
        optimizer=opt,
        precision=make_precision("fp32", torch.device("cpu")),
        loss_fn=torch.nn.functional.cross_entropy,
        device=torch.device("cpu"),
    )


def _batches(n: int, seed: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    return [
        (torch.randn(16, 4, generator=g), torch.randint(0, 3, (16,), generator=g)) for _ in range(n)
    ]


def _train(state: TrainState, batches: list) -> list[float]:
    losses: list[float] = []
    train_epoch(
        state,
        batches,
        HostStageTimer(),
        EpochOptions(log_every=1, on_steps=lambda recs: losses.extend(r["loss"] for r in recs)),
    )
    return losses


def _restore(state: TrainState, sd: dict) -> None:
    state.model.load_state_dict(sd["model"])
    state.optimizer.load_state_dict(sd["optimizer"])
    state.step, state.epoch, state.epoch_step = sd["step"], sd["epoch"], sd["epoch_step"]
    random.setstate(sd["rng"]["python"])
    np.random.set_state(sd["rng"]["numpy"])
    torch.set_rng_state(sd["rng"]["torch"])


@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
def test_training_on_from_a_checkpoint_is_bit_exact(tmp_path: Path, optimizer: str) -> None:
    """Train 2 epochs straight; train 1, checkpoint, load into a fresh state, train 1 more:
    the second epoch's losses and the final weights are equal bit for bit."""
    first, second = _batches(6, 1), _batches(6, 2)
    straight = _state(optimizer)
    _train(straight, first)
    expected = _train(straight, second)

    state = _state(optimizer)
    _train(state, first)
    ckpt = write_checkpoint(tmp_path / "checkpoints", state.state_dict())
    assert ckpt.path.name == "step-6" and (ckpt.path / MANIFEST).is_file()
    random.random(), np.random.rand(), torch.rand(3)  # draws the checkpoint must undo

    fresh = _state(optimizer)
    _restore(fresh, load_checkpoint(ckpt))
    assert (fresh.step, fresh.epoch, fresh.epoch_step) == (6, 1, 0)
    assert _train(fresh, second) == expected
    for a, b in zip(straight.model.state_dict().values(), fresh.model.state_dict().values()):
        assert torch.equal(a, b)


def test_rng_states_come_back_exactly(tmp_path: Path) -> None:
    state = _state()
    ckpt = write_checkpoint(tmp_path, state.state_dict())
    after = (random.random(), float(np.random.rand()), torch.rand(2).tolist())
    sd = load_checkpoint(ckpt)
    random.setstate(sd["rng"]["python"])
    np.random.set_state(sd["rng"]["numpy"])
    torch.set_rng_state(sd["rng"]["torch"])
    assert (random.random(), float(np.random.rand()), torch.rand(2).tolist()) == after


def test_only_complete_checkpoints_are_listed(tmp_path: Path) -> None:
    state = _state()
    write_checkpoint(tmp_path, state.state_dict())
    state.step = 9
    write_checkpoint(tmp_path, state.state_dict())
    (tmp_path / "step-12").mkdir()  # a killed write that got as far as the rename: no manifest
    (tmp_path / "step-12" / "model.safetensors").write_bytes(b"half")
    (tmp_path / ".tmp-step-15").mkdir()  # a killed write in its temporary folder
    assert [c.step for c in complete_checkpoints(tmp_path)] == [9, 0]


def test_a_damaged_checkpoint_is_named_and_the_previous_one_loads(tmp_path: Path) -> None:
    state = _state()
    write_checkpoint(tmp_path, state.state_dict())
    state.step = 5
    newest = write_checkpoint(tmp_path, state.state_dict())
    data = bytearray((newest.path / "model.safetensors").read_bytes())
    data[-1] ^= 0x01  # one flipped bit in a weight
    (newest.path / "model.safetensors").write_bytes(bytes(data))
    with pytest.raises(TrainscopeError, match=r"step-5/model.safetensors is damaged"):
        load_checkpoint(newest)
    warned: list[str] = []
    ckpt, sd = load_latest(tmp_path, warn=warned.append)
    assert ckpt.step == 0 and sd["step"] == 0
    assert len(warned) == 1 and "step-5/model.safetensors is damaged" in warned[0]
    data[-1] ^= 0x01  # the weights mended, the trainer state truncated instead
    (newest.path / "model.safetensors").write_bytes(bytes(data))
    (newest.path / "trainer.json").write_text("{")
    with pytest.raises(TrainscopeError, match="trainer.json"):
        load_checkpoint(newest)


class WritesAFile:
    """What a hostile pickle does when unpickled: here, create a file."""

    def __init__(self, target: Path) -> None:
        self.target = target

    def __reduce__(self):
        return (Path.write_text, (self.target, "pwned"))


def test_a_pickle_in_place_of_a_checkpoint_file_is_refused_and_runs_nothing(tmp_path: Path) -> None:
    state = _state()
    ckpt = write_checkpoint(tmp_path / "c", state.state_dict())
    target = tmp_path / "pwned.txt"
    payload = pickle.dumps(WritesAFile(target))
    for name in ("model.safetensors", "optimizer.safetensors", "rng.safetensors"):
        (ckpt.path / name).write_bytes(payload)
    # Even with the manifest made to match, the file is parsed as safetensors, never unpickled.
    import hashlib
    import json

    manifest = json.loads((ckpt.path / MANIFEST).read_text())
    for name in ("model.safetensors", "optimizer.safetensors", "rng.safetensors"):
        manifest["files"][name] = {
            "bytes": len(payload),
            "sha256": hashlib.sha256(payload).hexdigest(),
        }
    (ckpt.path / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(TrainscopeError, match="is unreadable"):
        load_checkpoint(ckpt)
    assert not target.exists()


def test_prune_keeps_the_newest_and_removes_only_what_a_checkpoint_holds(tmp_path: Path) -> None:
    state = _state()
    for step in (1, 2, 3, 4):
        state.step = step
        write_checkpoint(tmp_path, state.state_dict())
    (tmp_path / "step-2" / "notes.txt").write_text("the user's")  # not a checkpoint file
    outside = tmp_path.parent / f"{tmp_path.name}-outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("mine")
    (tmp_path / "step-1" / "link").symlink_to(outside)  # a link is never followed
    removed = prune(tmp_path, keep=2)
    assert [c.step for c in complete_checkpoints(tmp_path)] == [4, 3]
    assert removed == [] or all(p.name in ("step-1", "step-2") for p in removed)
    assert (tmp_path / "step-2" / "notes.txt").read_text() == "the user's"
    assert (outside / "keep.txt").read_text() == "mine"


# ------------------------------------------------------------------ in a real run


def test_a_run_writes_checkpoints_as_a_stage_of_its_own(tmp_path: Path) -> None:
    """digits for 2 epochs (80 steps), a checkpoint every 20 steps, 2 kept: step-60 and
    step-80 remain, step-80 holds exactly the saved weights, the checkpoint time is a
    stage (the stages still add up to the wall), and --overwrite removes them."""
    from safetensors.torch import load_file

    from trainscope.config import from_dict
    from trainscope.records import load_run
    from trainscope.train.run import run

    out = tmp_path / "run"
    cfg = {"out": str(out), "train": {"epochs": 2, "checkpoint_every": 20}}
    summary = run(from_dict(cfg))
    assert [c.step for c in complete_checkpoints(out / "checkpoints")] == [80, 60]
    last = load_checkpoint(complete_checkpoints(out / "checkpoints")[0])
    saved = load_file(str(out / "model.safetensors"))
    assert saved.keys() == last["model"].keys()
    assert all(torch.equal(saved[k], last["model"][k]) for k in saved)
    stages = summary["stages_s"]
    assert stages["checkpoint"] > 0
    assert sum(stages.values()) == pytest.approx(summary["wall_time_s"], rel=1e-9)
    events = load_run(out).events("checkpoint")
    assert [e["step"] for e in events] == [20, 40, 60, 80]
    assert all(e["seconds"] > 0 and e["path"].startswith("checkpoints/step-") for e in events)
    # --overwrite clears what the run wrote, checkpoints included.
    run(from_dict({"out": str(out), "overwrite": True, "train": {"epochs": 1}}))
    assert not (out / "checkpoints").exists()


def test_without_checkpoints_the_record_has_no_checkpoint_stage(tmp_path: Path) -> None:
    from trainscope.config import from_dict
    from trainscope.train.run import run

    summary = run(from_dict({"out": str(tmp_path / "r"), "train": {"epochs": 1}}))
    assert "checkpoint" not in summary["stages_s"]
    assert not (tmp_path / "r" / "checkpoints").exists()


def test_checkpoint_options_are_checked() -> None:
    from trainscope.config import from_dict
    from trainscope.errors import ConfigError

    from_dict({"dist": {"strategy": "fsdp", "nproc": 2}, "train": {"checkpoint_every": 5}})
    with pytest.raises(ConfigError, match="resume"):
        from_dict({"out": "r", "resume": True, "overwrite": True})
    with pytest.raises(ConfigError, match="max_restarts"):
        from_dict({"dist": {"max_restarts": -1}})
    with pytest.raises(ConfigError, match="checkpoint_every"):
        from_dict({"train": {"checkpoint_every": -1}})
    with pytest.raises(ConfigError, match="keep_checkpoints"):
        from_dict({"train": {"keep_checkpoints": 0}})


def test_a_checkpoint_at_every_epoch_end_from_the_command_line(tmp_path: Path) -> None:
    from trainscope.cli import main

    out = tmp_path / "r"
    argv = ["run", "--epochs", "2", "--checkpoint-every-epoch", "--keep-checkpoints", "3"]
    assert main([*argv, "--out", str(out), "-q", "--no-progress"]) == 0
    assert [c.step for c in complete_checkpoints(out / "checkpoints")] == [80, 40]
    assert load_checkpoint(complete_checkpoints(out / "checkpoints")[1])["epoch"] == 1


def test_resume_may_change_only_what_leaves_the_numbers_alone() -> None:
    from trainscope.config import RunConfig
    from trainscope.train.resume import MAY_CHANGE, config_differences

    base = RunConfig().to_dict()
    longer = {**base, "train": {**base["train"], "epochs": 99, "log_every": 3}}
    assert config_differences(base, longer) == []
    wider = {**base, "data": {**base["data"], "batch_size": 64, "num_workers": 2}}
    assert config_differences(base, wider) == ["data.batch_size: 32 then, 64 now"]
    assert "train.lr" not in MAY_CHANGE and "runtime.precision" not in MAY_CHANGE


def test_how_an_attempt_ended_is_read_from_every_rank() -> None:
    from trainscope.train.resume import how_it_ended

    assert how_it_ended([{"status": "completed"}]) == "completed"
    assert how_it_ended([{"status": "failed", "error": "boom"}]) == "failed: boom"
    text = how_it_ended([{"status": "failed", "error": "lost"}, {"status": "running"}])
    assert text == "failed: lost; rank(s) 1 ended without a record"
    assert how_it_ended([None]).startswith("ended without finishing its record")


def test_precision_state_comes_back() -> None:
    from trainscope.techniques.precision import make_precision

    p = make_precision("fp32", torch.device("cpu"))
    p.skipped_steps = 3
    q = make_precision("fp32", torch.device("cpu"))
    q.load_state_dict(p.state_dict())
    assert q.skipped_steps == 3


class Tied(torch.nn.Module):
    """An embedding and an output head sharing one weight, as GPTs do."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(5, 4)
        self.head = torch.nn.Linear(4, 5, bias=False)
        self.head.weight = self.emb.weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.emb(x))


def test_tied_weights_are_written_once_and_come_back_tied(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = Tied()
    state = TrainState(
        model=model,
        optimizer=torch.optim.AdamW(model.parameters(), lr=1e-2),
        precision=make_precision("fp32", torch.device("cpu")),
        loss_fn=torch.nn.functional.cross_entropy,
        device=torch.device("cpu"),
    )
    batches = [(torch.tensor([1, 2, 3]), torch.tensor([2, 3, 4]))] * 3
    _train(state, batches)
    ckpt = write_checkpoint(tmp_path, state.state_dict())
    from safetensors.torch import load_file

    assert set(load_file(str(ckpt.path / "model.safetensors"))) == {"emb.weight"}
    other = Tied()
    loaded = load_checkpoint(ckpt)
    assert set(loaded["model"]) == {"emb.weight", "head.weight"}
    other.load_state_dict(loaded["model"])
    assert torch.equal(other.emb.weight, model.emb.weight)
    assert other.head.weight is other.emb.weight
