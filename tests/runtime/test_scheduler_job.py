"""A SLURM job as the environment names it: a job id that is not one is refused before
anything can pass it to ``scontrol``; a run in a batch script without ``srun`` still
records the job it ran in (as provenance: SLURM placed no ranks there)."""

from __future__ import annotations

import pytest

from trainscope.errors import ConfigError
from trainscope.launch.cluster import adopt_scheduler
from trainscope.runtime.scheduler import detect, scheduler_record, slurm_job_id

pytestmark = pytest.mark.timeout(30)

# What a batch script sees (sbatch --wrap "trainscope run"): the job, no step, no task.
BATCH = {"SLURM_JOB_ID": "4242", "SLURM_JOB_NAME": "sweep", "SLURM_JOB_NODELIST": "gpu[07-08]",
         "SLURM_JOB_NUM_NODES": "2", "SLURM_NTASKS": "1"}  # fmt: skip


@pytest.mark.parametrize("job", ["4242", "123_4", "77+1"])
def test_job_ids_slurm_gives_are_taken(job: str) -> None:
    assert slurm_job_id({"SLURM_JOB_ID": job}) == job
    assert slurm_job_id({}) is None and slurm_job_id({"SLURM_JOB_ID": ""}) is None


@pytest.mark.parametrize("job", ["--help", "-o", "12 34", "1;reboot", "x" * 80, "1_", "0x1f"])
def test_a_job_id_that_is_not_one_is_refused_in_one_line(job: str) -> None:
    for name in ("SLURM_JOB_ID", "SLURM_JOBID"):
        with pytest.raises(ConfigError, match=name) as e:
            slurm_job_id({name: job})
        assert "\n" not in str(e.value)
    # Before any run could ask scontrol about it: in the srun task, and in a batch script.
    srun = {**BATCH, "SLURM_STEP_ID": "0", "SLURM_PROCID": "0", "SLURM_LOCALID": "0",
            "SLURM_JOB_ID": job}  # fmt: skip
    with pytest.raises(ConfigError, match="SLURM_JOB_ID"):
        detect(srun)
    with pytest.raises(ConfigError, match="SLURM_JOB_ID"):
        adopt_scheduler(_cfg(), {**BATCH, "SLURM_JOB_ID": job})


def test_a_batch_script_without_srun_records_its_job() -> None:
    assert detect(BATCH) is None  # no ranks placed: trainscope's own flags decide
    record = scheduler_record(BATCH)
    assert record is not None
    assert (record["name"], record["job_id"], record["job_name"]) == ("slurm", "4242", "sweep")
    assert record["nodes"] == ["gpu07", "gpu08"] and record["nnodes"] == 2
    assert record["placed_ranks"] is False and record["tasks"] is None
    bare = scheduler_record({"SLURM_JOB_ID": "9"})
    assert bare is not None and (bare["job_id"], bare["nodes"], bare["job_name"]) == ("9", [], None)
    assert scheduler_record({}) is None


def test_an_srun_task_says_slurm_placed_its_rank() -> None:
    srun = {**BATCH, "SLURM_STEP_ID": "0", "SLURM_PROCID": "0", "SLURM_LOCALID": "0",
            "SLURM_JOB_NODELIST": "gpu07", "SLURM_JOB_NUM_NODES": "1"}  # fmt: skip
    record = scheduler_record(srun)
    assert record is not None and record["placed_ranks"] is True and record["tasks"] == 1


def _cfg():  # noqa: ANN202 - a RunConfig
    from trainscope.config import from_dict

    return from_dict({})
