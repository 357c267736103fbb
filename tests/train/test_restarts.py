"""Elastic restarts: ``--max-restarts K`` passes to torchrun; when a rank dies, torchrun
starts every rank again and they resume from the run's last complete checkpoint, ending
where an uninterrupted run ends (PyTorch's own elastic tests kill rank 1 the same way).

The restarted runs are real launches: ``trainscope run`` is called in the test process,
and its launcher starts torchrun, whose elastic agent restarts the ranks in fresh
interpreters (forked launches have no agent to restart anything). The uninterrupted
references, whose ranks' training alone is compared, are forked launches
(``tests/forked_launch.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tests.forked_launch import forked_launches
from trainscope.cli import main
from trainscope.launch.launcher import torchrun_argv
from trainscope.records import load_run

# 320 samples, a global batch of 16 (8 a rank): 20 steps an epoch, 60 in all.
SMALL = ["--workload", "synthetic", "--synthetic-samples", "320", "--synthetic-shape", "1",
         "12", "12", "--batch-size", "16", "--epochs", "3", "-q", "--no-progress",
         "--nproc", "2", "--checkpoint-every", "5"]  # fmt: skip


@pytest.mark.slow
@pytest.mark.timeout(150)
@pytest.mark.parametrize(
    "strategy", ["ddp", pytest.param("fsdp", id="fsdp-each-rank-its-own-shard")]
)
def test_rank_1_killed_then_every_rank_restarts_and_the_run_ends_as_uninterrupted(
    tmp_path: Path, strategy: str, monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    args = ["run", *SMALL, "--strategy", strategy, "--optimizer", "adamw", "--lr", "0.001"]
    ref, run = tmp_path / "ref", tmp_path / "run"
    with forked_launches() as launched:
        assert main([*args, "--out", str(ref)]) == 0, capfd.readouterr().err
    assert [kind for kind, _ in launched] == ["torchrun"]
    # Rank 1 dies in the forward of step 27 (the checkpoint of step 25 is 5 steps into
    # epoch 2), on the first attempt only.
    monkeypatch.setenv("TRAINSCOPE_FAULT", "step=27,stage=forward,rank=1,attempt=1")
    code = main([*args, "--out", str(run), "--max-restarts", "1"])  # torchrun, for real
    monkeypatch.delenv("TRAINSCOPE_FAULT")
    assert code == 0, capfd.readouterr().err
    a, b = load_file(str(run / "model.safetensors")), load_file(str(ref / "model.safetensors"))
    assert all(torch.equal(a[k], b[k]) for k in b) and a.keys() == b.keys()
    record, reference = load_run(run), load_run(ref)
    steps = [(e["step"], e["loss"]) for e in record.events("step")]
    assert steps == [(e["step"], e["loss"]) for e in reference.events("step")]
    first, second = record.summary["attempts"]
    assert "rank(s) 1 ended without a record" in first["ended"]
    assert second["by"] == "torchrun restart"
    assert (second["from_step"], second["epoch_step"]) == (25, 5)
    assert second["ended"] == "completed"
    # Each rank wrote its own checkpoints; under fsdp each holds its own half of a tensor.
    own = load_file(str(run / "ranks" / "rank1" / "checkpoints" / "step-60" / "model.safetensors"))
    full = load_file(str(ref / "model.safetensors"))
    halves = strategy == "fsdp"
    name = next(k for k in full if full[k].dim() == 2)
    mine = next(v for k, v in own.items() if k.endswith(name))  # ddp: "module." first
    assert mine.shape[0] * (2 if halves else 1) == full[name].shape[0]


def test_max_restarts_goes_to_torchrun(tmp_path: Path) -> None:
    from trainscope.config import from_dict

    cfg = from_dict({"dist": {"strategy": "ddp", "nproc": 2, "max_restarts": 3}})
    assert "--max-restarts=3" in torchrun_argv(cfg, tmp_path / "c.yaml", [])
    cfg = from_dict({"dist": {"strategy": "ddp", "nproc": 2}})
    assert not any(a.startswith("--max-restarts") for a in torchrun_argv(cfg, tmp_path, []))
