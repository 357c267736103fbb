"""A run placed by a scheduler: srun's tasks and a PyTorchJob's pods become ranks (flags
checked against them, torchrun's variables exported), Kubeflow's PET_* variables become
the launch flags; and two processes with srun's variables train as one DDP job
whose record names the scheduler, the job and both ranks."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.conftest import scaled
from tests.forked_launch import fork_trainscope, forked_launches
from trainscope.config import RunConfig, from_dict
from trainscope.errors import ConfigError
from trainscope.launch.cluster import adopt_scheduler
from trainscope.runtime.dist import free_port

pytestmark = pytest.mark.timeout(120)


def srun_env(rank: int, tasks: int = 2, job: str = "77") -> dict[str, str]:
    """The variables srun gives task ``rank`` of a one-node step of ``tasks`` tasks."""
    return {
        "SLURM_JOB_ID": job, "SLURM_STEP_ID": "0", "SLURM_PROCID": str(rank),
        "SLURM_LOCALID": str(rank), "SLURM_NODEID": "0", "SLURM_NTASKS": str(tasks),
        "SLURM_STEP_NUM_TASKS": str(tasks), "SLURM_STEP_NODELIST": "localhost",
        "SLURM_JOB_NODELIST": "localhost", "SLURM_STEP_TASKS_PER_NODE": str(tasks),
    }  # fmt: skip


def cfg(**dist: object) -> RunConfig:
    return from_dict({"dist": {"strategy": "ddp", **dist}})


def test_an_srun_task_becomes_a_rank_that_launches_nothing() -> None:
    env = srun_env(1)
    placed = adopt_scheduler(cfg(), env)
    assert (placed.dist.nproc, placed.dist.nnodes, placed.dist.node_rank) == (2, 1, 0)
    assert placed.dist.master_addr == "localhost" and placed.dist.master_port is not None
    assert env["RANK"] == "1" and env["WORLD_SIZE"] == "2" and env["LOCAL_RANK"] == "1"
    assert env["MASTER_PORT"] == str(placed.dist.master_port)
    from trainscope.launch.launcher import needs_launch

    saved = dict(os.environ)
    try:
        os.environ.update(env)
        assert not needs_launch(placed)  # a rank already: torchrun is not started again
    finally:
        os.environ.clear()
        os.environ.update(saved)


def test_flags_override_the_rendezvous_and_contradictions_are_refused() -> None:
    env = srun_env(0)
    placed = adopt_scheduler(cfg(master_addr="10.0.0.2", master_port=29511), env)
    assert (env["MASTER_ADDR"], env["MASTER_PORT"]) == ("10.0.0.2", "29511")
    assert placed.dist.master_port == 29511
    with pytest.raises(ConfigError, match=r"--nproc 4.*SLURM started 2 tasks"):
        adopt_scheduler(cfg(nproc=4), srun_env(0))
    with pytest.raises(ConfigError, match=r"SLURM started 2 tasks, and strategy single"):
        adopt_scheduler(from_dict({}), srun_env(0))


def test_nothing_changes_without_a_scheduler_or_in_a_job_of_one_task() -> None:
    plain = cfg(nproc=2)
    env: dict[str, str] = {}
    assert adopt_scheduler(plain, env) is plain and env == {}
    one = srun_env(0, tasks=1)
    assert adopt_scheduler(plain, one) is plain and "RANK" not in one


def test_kubeflows_pet_variables_are_the_launch_flags_a_user_did_not_give() -> None:
    env = {"PET_NNODES": "2", "PET_NPROC_PER_NODE": "2", "PET_NODE_RANK": "1",
           "PET_MASTER_ADDR": "job-master-0", "PET_MASTER_PORT": "23456"}  # fmt: skip
    placed = adopt_scheduler(cfg(), env)
    d = placed.dist
    assert (d.nnodes, d.nproc, d.node_rank, d.master_addr, d.master_port) == (
        2, 2, 1, "job-master-0", 23456)  # fmt: skip
    mine = adopt_scheduler(cfg(master_port=29000, nnodes=2), env).dist
    assert mine.master_port == 29000  # the flag given wins
    with pytest.raises(ConfigError, match="PET_NNODES"):
        adopt_scheduler(cfg(), {"PET_NNODES": "1:4"})


def pod_env(rank: int, port: str) -> dict[str, str]:
    """What Kubeflow's training operator gives the pod of ``rank`` (one rank a pod)."""
    return {"RANK": str(rank), "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port}


@pytest.mark.parametrize("scheduler", ["slurm", "pytorchjob"])
def test_two_tasks_of_a_scheduler_train_as_one_ddp_job(
    tmp_path: Path, scheduler: str, capfd: pytest.CaptureFixture[str]
) -> None:
    """What ``srun -n 2 trainscope run --strategy ddp`` starts, or a PyTorchJob's two pods,
    without either: two processes, each with its task's variables; no torchrun anywhere.
    The processes are forked from this one (tests/forked_launch.py); the real srun is in
    tests/cluster/test_slurm.py."""
    out = tmp_path / "run"
    flags = ["run", "--workload", "digits", "--strategy", "ddp", "--epochs", "1",
             "--max-steps-per-epoch", "3", "--threads", "1", "--out", str(out), "-q",
             "--no-progress"]  # fmt: skip
    port = str(free_port())
    procs = []
    with forked_launches() as launched:
        for rank in (0, 1):
            env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
            env.update({**srun_env(rank, job="9001"), "MASTER_PORT": port}
                       if scheduler == "slurm" else pod_env(rank, port))  # fmt: skip
            procs.append(fork_trainscope(flags, env))
        codes = [p.wait(timeout=scaled(60)) for p in procs]
    assert codes == [0, 0], capfd.readouterr()
    assert launched == []  # each task is a rank: it launches nothing
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["world_size"] == 2
    sched = summary["scheduler"]
    assert (sched["name"], sched["tasks"]) == (scheduler, 2)
    assert (out / "ranks" / "rank1").is_dir()
    from trainscope.reports.tables import overview_table

    rows = {r[0]: r[1] for r in overview_table(summary).cells()}
    if scheduler == "slurm":
        assert sched["job_id"] == "9001" and sched["nodes"] == ["localhost"]
        assert rows["Scheduler"] == "SLURM job 9001: 2 task(s) on 1 node(s) (localhost)"
    else:
        assert rows["Scheduler"] == "PyTorchJob: 2 task(s) on 2 node(s)"


def test_a_hostile_scheduler_section_is_read_as_far_as_it_is_sound(tmp_path: Path) -> None:
    from trainscope.records.run_dir import read_summary
    from trainscope.reports.tables import overview_table

    record = {"status": "completed", "error": None,
              "scheduler": {"name": "slurm", "job_id": "<b>1</b>", "nodes": "n1", "tasks": -3,
                            "nnodes": 10**9}}  # fmt: skip
    (tmp_path / "summary.json").write_text(json.dumps(record))
    summary, problems = read_summary(tmp_path / "summary.json")
    assert summary["scheduler"] == {"name": "slurm", "job_id": "<b>1</b>"}
    assert len(problems) == 3  # nodes, tasks, nnodes: each left out, each said
    rows = {r[0]: r[1] for r in overview_table(summary).cells()}
    assert rows["Scheduler"] == "SLURM job <b>1</b>"  # text; escaped where it is rendered
