"""``trainscope slurm-script``: the sbatch script it prints starts exactly the run that was
asked for (every value shell-quoted), with SLURM's signal, requeue and a run folder named
by the job; what cannot work is one line, before any script exists."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import pytest

from trainscope.cli import main
from trainscope.cli.slurm import run_flags
from trainscope.launch.slurm_script import slurm_time, time_limit_s

pytestmark = pytest.mark.timeout(60)

JOB = ["--nodes", "2", "--tasks-per-node", "4", "--time", "02:30"]


def script_of(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    assert main(["slurm-script", *args]) == 0
    return capsys.readouterr().out


def srun_words(script: str) -> list[str]:
    """The srun command as the shell will split it (continuation lines joined)."""
    body = script.split("\nsrun ", 1)[1].replace("\\\n", " ")
    return shlex.split("srun " + body.replace('"$RUN_DIR"', "RUN_DIR"))


def test_the_script_runs_the_asked_run_as_slurm_tasks(capsys: pytest.CaptureFixture[str]) -> None:
    hostile = "/data/it's $(touch pwned) `x`"
    script = script_of(capsys, "--workload", "digits", "--strategy", "ddp", "--epochs", "3",
                       "--data-dir", hostile, "--set", "train.lr=0.05", *JOB)  # fmt: skip
    assert script.startswith("#!/bin/bash\n# Written by trainscope")
    directives = dict(re.findall(r"#SBATCH --([\w-]+)(?:=(\S+))?", script))
    assert directives["nodes"] == "2" and directives["ntasks-per-node"] == "4"
    assert directives["time"] == "02:30:00"  # HH:MM here; SLURM would read 02:30 as minutes
    assert directives["signal"] == "USR1@90" and "requeue" in directives
    assert directives["open-mode"] == "append"
    words = srun_words(script)
    assert words[0] == "srun" and words[2] == "run"
    run = words[3:]
    assert f"--data-dir={hostile}" in run  # one word, nothing expanded
    assert run[-3:] == ["--requeue", "--out", "RUN_DIR"]
    assert {"--workload=digits", "--strategy=ddp", "--epochs=3", "--lr=0.05"} <= set(run)
    assert 'RUN_DIR="$TRAINSCOPE_RUNS/trainscope-digits-$SLURM_JOB_ID"' in script
    # Every line explained: each #SBATCH directive has its comment.
    assert all("# " in line for line in script.splitlines() if line.startswith("#SBATCH"))
    if subprocess.run(["bash", "-n"], input=script, text=True).returncode != 0:
        pytest.fail("the script is not valid bash")


def test_run_flags_give_back_what_was_set() -> None:
    assert run_flags({"workload.name": "mnist", "runtime.compile": True,
                      "train.save_weights": False, "runtime.track": ["wandb", "tensorboard"],
                      "workload.data_dir": "-odd", "workload.options": {"delay_ms": 2}}) == [
        "--workload=mnist", "--compile", "--no-save-weights", "--track=wandb,tensorboard",
        "--data-dir=-odd", "--set", 'workload.options={"delay_ms": 2}',
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("text", "seconds", "slurm"),
    [("00:10", 600, "00:10:00"), ("1:00:30", 3630, "01:00:30"), ("2-03:04", 183840, "2-03:04:00")],
)
def test_time_limits(text: str, seconds: int, slurm: str) -> None:
    assert time_limit_s(text) == seconds and slurm_time(text) == slurm


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--strategy", "ddp", "--nodes", "1", "--tasks-per-node", "1", "--time", "00:01"],
         "ends before the signal"),
        (["--strategy", "ddp", "--nodes", "1", "--tasks-per-node", "1", "--time", "ten"],
         "expected HH:MM"),
        (["--nodes", "1", "--tasks-per-node", "2", "--time", "01:00"], "strategy single"),
        (["--strategy", "ddp", "--nodes", "0", "--tasks-per-node", "2", "--time", "01:00"],
         "nnodes must be"),
        (["--strategy", "ddp", "--nodes", "1", "--tasks-per-node", "2", "--time", "01:00",
          "--job-name", "a b"], "--job-name"),
    ],
)  # fmt: skip
def test_what_cannot_work_is_one_line(
    capsys: pytest.CaptureFixture[str], args: list[str], said: str
) -> None:
    assert main(["slurm-script", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert said in err and len(err.splitlines()) == 1


def test_out_writes_the_script_and_never_over_a_file_it_did_not_write(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "job.sbatch"
    args = ["slurm-script", "--strategy", "ddp", *JOB, "--out", str(out)]
    assert main(args) == 0 and out.read_text().startswith("#!/bin/bash\n# Written by trainscope")
    assert main(args) == 0  # its own script: replaced
    mine = tmp_path / "mine.sh"
    mine.write_text("#!/bin/bash\necho precious\n")
    assert main([*args[:-1], str(mine)]) == 2
    assert mine.read_text() == "#!/bin/bash\necho precious\n"
    link = tmp_path / "link.sh"
    link.symlink_to(out)
    assert main([*args[:-1], str(link)]) == 2
    assert "trainscope did not write" in capsys.readouterr().err
