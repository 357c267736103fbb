"""Placement variables that cannot all be true: ranks a scheduler's (or torchrun's)
variables claim but that never come are named in one line, with the variables that
claimed them; launch variables that contradict each other are refused before anything
starts. The lone process is forked from this one (tests/forked_launch.py): a real
process, its own process group, nothing else started."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.conftest import scaled
from tests.forked_launch import fork_trainscope, forked_launches
from trainscope.config import from_dict
from trainscope.errors import ConfigError
from trainscope.launch.cluster import adopt_scheduler
from trainscope.runtime.dist import free_port

pytestmark = pytest.mark.timeout(120)

PLACEMENT = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
             "MASTER_PORT", "TORCHELASTIC_RUN_ID", "GROUP_RANK")  # fmt: skip


def _alone(tmp_path: Path, capfd: pytest.CaptureFixture[str], placement: dict[str, str]) -> str:
    """``trainscope run --strategy ddp`` as the one process there is, under ``placement``:
    what it said on stderr (it must fail)."""
    env = {k: v for k, v in os.environ.items()
           if k not in PLACEMENT and not k.startswith(("SLURM_", "PET_"))}  # fmt: skip
    env.update(placement)
    out = tmp_path / "run"
    flags = ["run", "--strategy", "ddp", "--epochs", "1", "--max-steps-per-epoch", "2",
             "--timeout", "2", "--threads", "1", "--no-progress", "--out", str(out)]  # fmt: skip
    capfd.readouterr()
    with forked_launches() as launched:
        code = fork_trainscope(flags, env).wait(timeout=scaled(60))
    err = capfd.readouterr().err.strip().splitlines()
    assert code != 0 and launched == []
    assert len(err) == 1, err
    assert "internal error" not in err[0] and "DistStoreError" not in err[0]
    assert not out.exists()  # refused before the run folder
    return err[0]


def _srun(rank: int, port: int) -> dict[str, str]:
    return {"SLURM_JOB_ID": "77", "SLURM_STEP_ID": "0", "SLURM_PROCID": str(rank),
            "SLURM_LOCALID": str(rank), "SLURM_NODEID": "0", "SLURM_NTASKS": "2",
            "SLURM_JOB_NODELIST": "localhost", "MASTER_PORT": str(port)}  # fmt: skip


def test_slurm_tasks_that_never_started_are_named(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    said = _alone(tmp_path, capfd, _srun(0, free_port()))
    assert "rank 1 of 2 never joined" in said, said
    assert "SLURM_NTASKS=2" in said


def test_a_slurm_rank_whose_rank_0_never_came_names_it(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    said = _alone(tmp_path, capfd, _srun(1, free_port()))
    assert "rank 0 of 2 never joined" in said and "SLURM_NTASKS=2" in said, said


def test_torchrun_style_variables_whose_other_ranks_never_come(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    env = {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": str(free_port())}  # fmt: skip
    said = _alone(tmp_path, capfd, env)
    assert "rank 1 of 2 never joined" in said and "WORLD_SIZE=2" in said, said


@pytest.mark.parametrize(
    ("pet", "said"),
    [
        ({"PET_NPROC_PER_NODE": "4"}, "PET_NPROC_PER_NODE=4"),
        ({"PET_NPROC_PER_NODE": "1", "PET_NNODES": "3"}, "PET_NNODES=3"),
    ],
)
def test_pet_variables_that_contradict_the_world_size_are_refused(
    pet: dict[str, str], said: str
) -> None:
    env = {"RANK": "0", "WORLD_SIZE": "2", **pet}
    with pytest.raises(ConfigError) as e:
        adopt_scheduler(from_dict({"dist": {"strategy": "ddp"}}), env)
    text = str(e.value)
    assert said in text and "WORLD_SIZE=2" in text and "\n" not in text, text


def test_pet_variables_that_agree_with_the_world_size_are_the_launch_flags() -> None:
    env = {"RANK": "0", "WORLD_SIZE": "4", "PET_NPROC_PER_NODE": "2", "PET_NNODES": "2",
           "PET_MASTER_PORT": "29400"}  # fmt: skip
    placed = adopt_scheduler(from_dict({"dist": {"strategy": "ddp"}}), env)
    assert (placed.dist.nproc, placed.dist.nnodes) == (2, 2)
