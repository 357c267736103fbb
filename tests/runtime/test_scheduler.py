"""Which scheduler placed a process, read from the variables SLURM, a PyTorchJob and
torchrun set; SLURM's node lists; malformed or absurd values as one clear error."""

from __future__ import annotations

import pytest

from trainscope.errors import ConfigError
from trainscope.runtime.scheduler import (
    MAX_NODES_KEPT,
    check_flags,
    detect,
    export,
    parse_nodelist,
    tasks_per_node,
)

pytestmark = pytest.mark.timeout(30)

# What srun sets for the task of rank 5 of 8, two nodes of four tasks (abridged).
SRUN = {
    "SLURM_JOB_ID": "4242", "SLURM_STEP_ID": "0", "SLURM_PROCID": "5", "SLURM_LOCALID": "1",
    "SLURM_NODEID": "1", "SLURM_NTASKS": "8", "SLURM_STEP_NUM_TASKS": "8",
    "SLURM_STEP_NODELIST": "gpu[07-08]", "SLURM_JOB_NODELIST": "gpu[07-08]",
    "SLURM_STEP_TASKS_PER_NODE": "4(x2)",
}  # fmt: skip


@pytest.mark.parametrize(
    ("text", "hosts", "total"),
    [
        ("node01", ["node01"], 1),
        ("node[01-04,07]", ["node01", "node02", "node03", "node04", "node07"], 5),
        ("a[1-2],b,c[09-10]", ["a1", "a2", "b", "c09", "c10"], 5),
        ("rack[1-2]-n[1-2]", ["rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"], 4),
        ("gpu[8-10]", ["gpu8", "gpu9", "gpu10"], 3),
    ],
)
def test_a_slurm_node_list_names_its_hosts(text: str, hosts: list[str], total: int) -> None:
    assert parse_nodelist(text) == (hosts, total)


def test_a_huge_node_list_is_counted_not_expanded() -> None:
    hosts, total = parse_nodelist("n[1-900000],m[1-3]")
    assert total == 900_003
    assert len(hosts) == MAX_NODES_KEPT and hosts[:2] == ["n1", "n2"]
    with pytest.raises(ConfigError, match="more than 1,000,000 hosts"):
        parse_nodelist("n[1-999999999]")
    with pytest.raises(ConfigError, match="bracket groups"):
        parse_nodelist("n" + "[1-2]" * 40)
    with pytest.raises(ConfigError, match="characters long"):
        parse_nodelist("n," * 40000)


@pytest.mark.parametrize("text", ["", "n[1-", "n]1[", "n[4-2]", "n[a-b]", "n[[1]]", "n[1-2],"])
def test_a_node_list_that_cannot_be_read_is_one_clear_error(text: str) -> None:
    with pytest.raises(ConfigError, match="SLURM node list"):
        parse_nodelist(text)


def test_tasks_per_node_in_slurms_compressed_form() -> None:
    assert tasks_per_node("2(x3),1") == [2, 2, 2, 1]
    assert tasks_per_node("4") == [4]
    with pytest.raises(ConfigError, match="tasks per node"):
        tasks_per_node("2(x)")
    with pytest.raises(ConfigError, match="too many nodes"):
        tasks_per_node("1(x9999999)")


def test_an_srun_task_is_one_rank_of_its_step() -> None:
    p = detect(SRUN)
    assert p is not None and p.scheduler == "slurm"
    assert (p.rank, p.world_size, p.local_rank, p.local_world_size) == (5, 8, 1, 4)
    assert (p.node_rank, p.nnodes, p.job_id) == (1, 2, "4242")
    assert p.master_addr == "gpu07" and p.nodes == ("gpu07", "gpu08")
    # The port: the same for every task of the step, another for the job's next step.
    assert p.master_port == detect({**SRUN, "SLURM_PROCID": "0"}).master_port  # type: ignore[union-attr]
    assert p.master_port != detect({**SRUN, "SLURM_STEP_ID": "1"}).master_port  # type: ignore[union-attr]
    assert 1024 < p.master_port < 65536  # type: ignore[operator]
    record = p.record()
    assert (
        record["name"] == "slurm" and record["tasks"] == 8 and record["nodes"] == ["gpu07", "gpu08"]
    )


def test_a_slurm_batch_script_or_salloc_shell_is_not_a_rank() -> None:
    batch = {k: v for k, v in SRUN.items() if not k.startswith("SLURM_STEP")}
    assert detect(batch) is None
    assert detect({}) is None


def test_master_address_and_port_in_the_environment_win_over_slurms_hosts() -> None:
    p = detect({**SRUN, "MASTER_ADDR": "10.0.0.9", "MASTER_PORT": "29400"})
    assert p is not None and (p.master_addr, p.master_port) == ("10.0.0.9", 29400)


def test_torchrun_workers_inside_a_slurm_task_are_torchruns() -> None:
    env = {**SRUN, "TORCHELASTIC_RUN_ID": "x", "RANK": "3", "WORLD_SIZE": "4",
           "LOCAL_RANK": "3", "LOCAL_WORLD_SIZE": "4", "GROUP_RANK": "0", "MASTER_ADDR": "h",
           "MASTER_PORT": "1234"}  # fmt: skip
    p = detect(env)
    assert p is not None and p.scheduler == "torchrun"
    assert (p.rank, p.world_size, p.local_world_size, p.nnodes, p.job_id) == (3, 4, 4, 1, "4242")


def test_a_pytorchjob_pod_is_one_rank() -> None:
    env = {"RANK": "2", "WORLD_SIZE": "3", "MASTER_ADDR": "job-master-0", "MASTER_PORT": "23456"}
    p = detect(env)
    assert p is not None and p.scheduler == "pytorchjob"
    assert (p.rank, p.world_size, p.local_rank, p.local_world_size, p.nnodes) == (2, 3, 0, 1, 3)
    assert (p.node_rank, p.master_addr, p.master_port) == (2, "job-master-0", 23456)
    # Once exported as torchrun's variables, it still reads as the pod it is.
    export(p, env)
    assert env["LOCAL_RANK"] == "0" and env["LOCAL_WORLD_SIZE"] == "1"
    again = detect(env)
    assert again is not None and again.scheduler == "pytorchjob" and again.rank == 2


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"SLURM_PROCID": "8"}, "SLURM_PROCID"),  # beyond the step's 8 tasks
        ({"SLURM_PROCID": "-1"}, "SLURM_PROCID"),
        ({"SLURM_STEP_NUM_TASKS": "lots"}, "SLURM_STEP_NUM_TASKS"),
        ({"SLURM_STEP_NUM_TASKS": "0"}, "SLURM_STEP_NUM_TASKS"),
        ({"MASTER_PORT": "70000"}, "MASTER_PORT"),
        ({"SLURM_LOCALID": "9"}, "SLURM_LOCALID"),
    ],
)
def test_a_malformed_variable_is_one_error_naming_it(change: dict[str, str], named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        detect({**SRUN, **change})


def test_slurm_variables_that_disagree_or_place_unevenly_are_refused() -> None:
    with pytest.raises(ConfigError, match="as many on each"):
        uneven = {
            "SLURM_STEP_NUM_TASKS": "7",
            "SLURM_PROCID": "0",
            "SLURM_STEP_NODELIST": "n[1-4]",
            "SLURM_STEP_TASKS_PER_NODE": "2(x3),1",
        }
        detect({**SRUN, **uneven})
    with pytest.raises(ConfigError, match="disagree"):
        detect({**SRUN, "SLURM_STEP_TASKS_PER_NODE": "3(x2)"})  # 6 is not 8
    with pytest.raises(ConfigError, match="disagree"):
        detect({**SRUN, "SLURM_STEP_NODELIST": "gpu[07-09]", "SLURM_NODEID": "0"})


def test_a_pod_that_starts_its_own_processes_is_not_a_rank() -> None:
    pod = {"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "m", "MASTER_PORT": "23456",
           "PET_NPROC_PER_NODE": "4", "PET_NNODES": "2"}  # fmt: skip
    assert detect(pod) is None


def test_flags_that_contradict_the_scheduler_are_refused() -> None:
    p = detect(SRUN)
    assert p is not None
    check_flags(1, 1, p)  # the defaults say nothing
    check_flags(4, 2, p)  # the same placement, said twice
    with pytest.raises(ConfigError, match=r"4 processes.*SLURM started 8 tasks"):
        check_flags(4, 1, p)
    with pytest.raises(ConfigError, match=r"2 processes on each of 4 nodes.*4 tasks on each of 2"):
        check_flags(2, 4, p)
    one = detect({**SRUN, "SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_NODEID": "0",
                  "SLURM_STEP_NUM_TASKS": "1", "SLURM_STEP_TASKS_PER_NODE": "1",
                  "SLURM_STEP_NODELIST": "gpu07"})  # fmt: skip
    assert one is not None
    check_flags(2, 1, one)  # a job of one task: trainscope launches its own processes


def test_export_sets_torchruns_variables_and_flags_win() -> None:
    p = detect(SRUN)
    assert p is not None
    env: dict[str, str] = {}
    export(p, env, master_addr="10.1.1.1", master_port=29500)
    assert env["RANK"] == "5" and env["WORLD_SIZE"] == "8" and env["LOCAL_RANK"] == "1"
    assert env["LOCAL_WORLD_SIZE"] == "4"
    assert (env["MASTER_ADDR"], env["MASTER_PORT"]) == ("10.1.1.1", "29500")
