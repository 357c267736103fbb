"""examples/cluster/: the sbatch script is what ``trainscope slurm-script`` writes for its
command (so it never drifts), and the PyTorchJob manifest starts a valid run whose pods
become its two ranks."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
import yaml

from trainscope.cli import build_parser, main, overrides_from_args
from trainscope.config import resolve
from trainscope.launch.cluster import adopt_scheduler

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "cluster"
# The command examples/cluster/README.md says made digits-ddp.sbatch.
SBATCH_ARGS = ["--workload", "digits", "--strategy", "ddp", "--epochs", "20",
               "--checkpoint-every-epoch", "--nodes", "2", "--tasks-per-node", "2",
               "--cpus-per-task", "4", "--time", "00:30", "--trainscope", "trainscope"]  # fmt: skip


def test_the_sbatch_example_is_what_slurm_script_writes(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["slurm-script", *SBATCH_ARGS]) == 0
    assert capsys.readouterr().out == (EXAMPLES / "digits-ddp.sbatch").read_text()
    readme = (EXAMPLES / "README.md").read_text()
    assert "trainscope slurm-script " + shlex.join(SBATCH_ARGS) in " ".join(readme.split())


def test_the_pytorchjob_pods_are_the_two_ranks_of_one_valid_run() -> None:
    job = yaml.safe_load((EXAMPLES / "pytorchjob.yaml").read_text())
    assert job["kind"] == "PyTorchJob"
    specs = job["spec"]["pytorchReplicaSpecs"]
    commands = [c["command"] for s in specs.values() for c in s["template"]["spec"]["containers"]]
    assert len(commands) == sum(s["replicas"] for s in specs.values()) == 2
    assert commands[0] == commands[1] and commands[0][:2] == ["trainscope", "run"]
    assert all(s["restartPolicy"] == "ExitCode" for s in specs.values())  # 128+signal restarts
    args = build_parser().parse_args(commands[0][1:])
    cfg = resolve(None, overrides_from_args(args))
    assert cfg.dist.requeue and cfg.out == "/runs/trainscope-digits"
    for rank in (0, 1):
        env = {"RANK": str(rank), "WORLD_SIZE": "2", "MASTER_ADDR": "trainscope-digits-master-0",
               "MASTER_PORT": "23456"}  # fmt: skip
        placed = adopt_scheduler(cfg, env)
        assert (placed.dist.world_size, placed.dist.node_rank) == (2, rank)
        assert env["LOCAL_RANK"] == "0"
