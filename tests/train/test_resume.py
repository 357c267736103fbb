"""``trainscope run --resume``: a killed run goes on from its last complete checkpoint and
ends exactly as an uninterrupted run does (losses step for step, weights bit for bit).

The runs are killed with SIGKILL at chosen points (``TRAINSCOPE_FAULT``, see
``trainscope.train.fault_injection``), each attempt a child forked from the test process
(``fault_driver.py``), so that twenty kills cost seconds, not minutes of imports. The
module's scenarios run once, in its ``runs`` fixture (slow tier); the refusals run
in-process.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tests.train import fault_driver
from trainscope.cli import main
from trainscope.records import load_run

# 320 samples in batches of 16: 20 steps an epoch, 60 in three epochs, seconds in all.
SMALL = ["--workload", "synthetic", "--synthetic-samples", "320", "--synthetic-shape", "1",
         "12", "12", "--batch-size", "16", "--epochs", "3", "-q", "--no-progress"]  # fmt: skip
KILLED = -9


def drive(attempts: list[dict]) -> list[int]:
    """Run the attempts in order, each in a forked child (``{"flip": PATH}`` instead
    damages one bit of PATH, and counts as 0); their exit codes."""
    codes = []
    for attempt in attempts:
        if "flip" in attempt:
            fault_driver.flip_a_bit(Path(attempt["flip"]))
            codes.append(0)
            continue
        done = fault_driver.trainscope(*attempt["argv"], fault=attempt.get("fault"))
        assert done.returncode in (0, KILLED), done.stderr[-3000:]
        codes.append(done.returncode)
    return codes


def weights(run_dir: Path) -> dict[str, torch.Tensor]:
    return load_file(str(run_dir / "model.safetensors"))


def assert_same_run(resumed: Path, reference: Path) -> None:
    """Bit for bit: final weights, every step's loss, every epoch's and the test figures."""
    a, b = weights(resumed), weights(reference)
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), f"weight {k} differs after the resume"
    ra, rb = load_run(resumed), load_run(reference)
    la = [(e["step"], e["loss"]) for e in ra.events("step")]
    lb = [(e["step"], e["loss"]) for e in rb.events("step")]
    assert la == lb
    assert [e["train_loss"] for e in ra.summary["epochs"]] == [
        e["train_loss"] for e in rb.summary["epochs"]
    ]
    assert [e["val_loss"] for e in ra.summary["epochs"]] == [
        e["val_loss"] for e in rb.summary["epochs"]
    ]
    assert ra.summary["test_loss"] == rb.summary["test_loss"]
    assert ra.summary["status"] == "completed"
    assert ra.summary["steps"] == rb.summary["steps"]
    assert ra.summary["samples"] == rb.summary["samples"]


PIPELINES = {
    "workers-0": [],
    "workers-2-augment": ["--num-workers", "2", "--augment"],
    "fast-augment": ["--loader", "fast", "--augment"],
    # The lr schedule and clipping resume from the checkpoint too (the scheduler's state).
    "cosine-clip": [
        "--optimizer",
        "adamw",
        "--lr",
        "0.003",
        "--schedule",
        "cosine",
        "--warmup-steps",
        "8",
        "--grad-clip",
        "0.5",
        "--weight-decay",
        "0.1",
    ],
}
CHAIN_KILLS = 20


def chain_plan(run: Path, args: list[str]) -> list[dict]:
    """One run killed at 20 random points (a stage of a step, or inside a checkpoint
    write), resumed after each, then resumed to its end."""
    rng = random.Random(1313)
    stages = ["data_wait", "h2d", "forward", "backward", "optimizer"]
    plan = []
    for i, step in enumerate(sorted(rng.sample(range(2, 60), CHAIN_KILLS))):
        # A checkpoint step may die while its checkpoint is being written.
        stage = rng.choice(stages + (["checkpoint"] * 2 if step % 3 == 0 else []))
        argv = ["run", *args, "--out", str(run)] if i == 0 else ["run", "--resume", str(run), "-q"]
        plan.append({"argv": argv, "fault": f"step={step},stage={stage},attempt={i + 1}"})
    return [*plan, {"argv": ["run", "--resume", str(run), "-q", "--no-progress"]}]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Every scenario of this module, run in one driver process (imports paid once):
    uninterrupted references, and runs killed at chosen points then resumed."""
    root = tmp_path_factory.mktemp("resume")
    plan: list[dict] = []
    expected: list[int] = []
    out: dict[str, Path] = {}

    def add(entries: list[dict], codes: list[int]) -> None:
        plan.extend(entries)
        expected.extend(codes)

    for name, flags in PIPELINES.items():
        args = [*SMALL, *flags, "--checkpoint-every", "5"]
        ref, mid, edge = (root / f"{name}-{k}" for k in ("ref", "mid", "edge"))
        out.update({f"{name}-ref": ref, f"{name}-mid": mid, f"{name}-edge": edge})
        add(
            [
                {"argv": ["run", *args, "--out", str(ref)]},
                # Step 28 dies in its backward: the checkpoint of step 25 is 5 steps into
                # epoch 2.
                {"argv": ["run", *args, "--out", str(mid)], "fault": "step=28,stage=backward"},
                {"argv": ["run", "--resume", str(mid), "-q", "--no-progress"]},
                # Step 41 dies in its forward: step 40 ended epoch 2, checkpointed after it.
                {"argv": ["run", *args, "--out", str(edge)], "fault": "step=41,stage=forward"},
                {"argv": ["run", "--resume", str(edge), "-q", "--no-progress"]},
            ],
            [0, KILLED, 0, KILLED, 0],
        )
    args = [*SMALL, "--checkpoint-every", "5"]
    # Killed while writing the checkpoint of step 10, after its first file.
    out["in-write"] = root / "in-write"
    add(
        [
            {
                "argv": ["run", *args, "--out", str(out["in-write"])],
                "fault": "step=10,stage=checkpoint",
            },
            {"argv": ["run", "--resume", str(out["in-write"]), "-q"]},
        ],
        [KILLED, 0],
    )
    # Killed at step 23, then a bit of the newest checkpoint (step 20) flipped.
    out["damaged"] = damaged = root / "damaged"
    add(
        [
            {"argv": ["run", *args, "--out", str(damaged)], "fault": "step=23"},
            {"flip": str(damaged / "checkpoints" / "step-20" / "model.safetensors")},
            {"argv": ["run", "--resume", str(damaged), "-q"]},
        ],
        [KILLED, 0, 0],
    )
    chain_args = [*SMALL, "--num-workers", "2", "--augment", "--checkpoint-every", "3",
                  "--log-every", "4"]  # fmt: skip
    out["chain-ref"], out["chain"] = root / "chain-ref", root / "chain"
    add([{"argv": ["run", *chain_args, "--out", str(out["chain-ref"])]}], [0])
    add(chain_plan(out["chain"], chain_args), [*[KILLED] * CHAIN_KILLS, 0])
    assert drive(plan) == expected
    return out


@pytest.mark.slow
@pytest.mark.timeout(180)
@pytest.mark.parametrize("pipeline", PIPELINES)
def test_resume_mid_epoch_and_at_an_epoch_boundary_is_bit_exact(
    runs: dict[str, Path], pipeline: str
) -> None:
    ref, mid, edge = (runs[f"{pipeline}-{k}"] for k in ("ref", "mid", "edge"))
    assert_same_run(mid, ref)
    assert_same_run(edge, ref)
    first, second = load_run(mid).summary["attempts"]
    assert first["ended"].startswith("ended without finishing its record")
    assert (second["from_step"], second["from_epoch"], second["epoch_step"]) == (25, 1, 5)
    assert load_run(edge).summary["attempts"][1]["from_step"] == 40
    assert load_run(edge).summary["attempts"][1]["epoch_step"] == 0


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_twenty_random_kills_each_resumed_end_bit_exact(runs: dict[str, Path]) -> None:
    """A run killed at 20 random points, resumed after each, ends as the uninterrupted
    run does (with two DataLoader workers and augmentation: the hardest input pipeline)."""
    run = runs["chain"]
    assert_same_run(run, runs["chain-ref"])
    attempts = load_run(run).summary["attempts"]
    assert [a["attempt"] for a in attempts] == list(range(1, CHAIN_KILLS + 2))
    assert all(a["ended"].startswith("ended without") for a in attempts[:-1])
    # Every line after the first attempt says which attempt wrote it.
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    resumes = [x for x in lines if x["event"] == "resume"]
    assert [x["attempt"] for x in resumes] == list(range(2, CHAIN_KILLS + 2))
    assert all("attempt" in x for x in lines[lines.index(resumes[0]) :])


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_kill_inside_a_checkpoint_write_leaves_the_previous_one_to_resume_from(
    runs: dict[str, Path],
) -> None:
    run = runs["in-write"]
    # The half-written step-10 was never listed: the resume went on from step 5.
    assert load_run(run).summary["attempts"][1]["from_step"] == 5
    assert_same_run(run, runs["workers-0-ref"])


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_damaged_newest_checkpoint_is_named_and_the_one_before_resumes(
    runs: dict[str, Path],
) -> None:
    summary = load_run(runs["damaged"]).summary
    assert summary["attempts"][1]["from_step"] == 15
    assert any("step-20/model.safetensors is damaged" in n for n in summary["notes"])
    assert_same_run(runs["damaged"], runs["workers-0-ref"])


def _cli(*argv: str) -> int:
    return main(list(argv))


@pytest.mark.timeout(60)
def test_a_resume_that_would_change_the_numbers_is_refused_with_the_difference(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    assert _cli("run", *SMALL, "--epochs", "1", "--checkpoint-every", "10", "--out", str(run)) == 0
    before = (run / "metrics.jsonl").read_bytes()
    for flags, shown in (
        (["--batch-size", "32"], "data.batch_size: 16 then, 32 now"),
        (["--lr", "0.1"], "train.lr: 0.02 then, 0.1 now"),
        (["--optimizer", "adamw"], "train.optimizer: 'sgd' then, 'adamw' now"),
        (["--synthetic-shape", "1", "10", "10"], "workload.synthetic_shape"),
        (["--shuffle-seed", "3"], "data.shuffle_seed: 0 then, 3 now"),
    ):
        capsys.readouterr()
        assert _cli("run", "--resume", str(run), "--epochs", "2", *flags) != 0
        err = capsys.readouterr().err
        assert "cannot resume" in err and shown in err, err
        assert len(err.strip().splitlines()) == 1
    # The run completed its one epoch: resuming it as it is trains nothing; more epochs do.
    assert _cli("run", "--resume", str(run)) != 0
    assert "pass --epochs N" in capsys.readouterr().err
    assert (run / "metrics.jsonl").read_bytes() == before  # refusals write nothing
    assert _cli("run", "--resume", str(run), "--epochs", "2", "-q", "--num-workers", "2") == 0
    summary = load_run(run).summary
    assert summary["status"] == "completed" and len(summary["epochs"]) == 2
    assert summary["attempts"][0]["ended"] == "completed"


@pytest.mark.timeout(60)
def test_resume_refuses_what_it_cannot_go_on_from(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "notes.txt").write_text("mine")
    assert _cli("run", "--resume", str(plain)) != 0
    assert "not a run directory" in capsys.readouterr().err
    run = tmp_path / "run"
    assert _cli("run", *SMALL, "--epochs", "1", "--out", str(run)) == 0
    capsys.readouterr()
    assert _cli("run", "--resume", str(run), "--epochs", "2") != 0
    assert "no complete checkpoint" in capsys.readouterr().err
    assert _cli("run", "--resume", str(run), "--out", str(tmp_path / "x")) != 0
    assert "leave out --out" in capsys.readouterr().err
    assert _cli("run", "--resume", str(run), "--overwrite") != 0


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_the_report_shows_where_a_run_resumed(runs: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "report"
    assert _cli("report", str(runs["workers-0-mid"]), "--out", str(out), "-q") == 0
    md = (out / "report.md").read_text()
    assert "Attempts (resumed run)" in md
    assert "step 25 (epoch 1 + 5 steps)" in md
    assert "ended without finishing its record" in md
    assert "Attempt" in (out / "tables.tex").read_text()
