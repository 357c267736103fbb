"""A real one-node SLURM cluster for tests (test helper): started from this folder's
config by ``start-slurm.sh`` where Debian's slurm-wlm and munge are installed and the
tests run as root, or the one ``$SLURM_CONF`` names if it answers; else the tests that
need it skip with one line."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def _answers(env: dict[str, str]) -> bool:
    try:
        out = subprocess.run(["sinfo", "-h", "-o", "%T"], env=env, capture_output=True,
                             text=True, timeout=20)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0 and "idle" in out.stdout.split()


@pytest.fixture(scope="module")
def slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """The environment to run SLURM's commands with (``SLURM_CONF`` set)."""
    env = dict(os.environ)
    if env.get("SLURM_CONF") and _answers(env):
        yield env
        return
    missing = [c for c in ("sbatch", "slurmctld", "slurmd", "munged")
               if shutil.which(c) is None and not Path("/usr/sbin", c).exists()]  # fmt: skip
    if missing:
        pytest.skip(
            f"no SLURM here ({', '.join(missing)} missing: apt-get install slurm-wlm munge)"
        )
    if os.geteuid() != 0:
        pytest.skip("starting a test SLURM cluster needs root")
    folder = tmp_path_factory.mktemp("slurm")
    started = subprocess.run([str(HERE / "start-slurm.sh"), str(folder)], capture_output=True,
                             text=True, timeout=120)  # fmt: skip
    if started.returncode != 0:
        pytest.skip(f"the test SLURM cluster did not start: {started.stderr.strip()[-300:]}")
    env["SLURM_CONF"] = str(folder / "slurm.conf")
    try:
        yield env
    finally:
        subprocess.run(["scancel", "--user", "root"], env=env, capture_output=True, timeout=30)
        subprocess.run([str(HERE / "stop-slurm.sh"), str(folder)], capture_output=True, timeout=60)


def sbatch(env: dict[str, str], script: str, cwd: Path) -> str:
    """Submit ``script``; its job id."""
    path = cwd / "job.sh"
    path.write_text(script)
    out = subprocess.run(["sbatch", "--parsable", str(path)], env=env, cwd=cwd,
                         capture_output=True, text=True, timeout=30)  # fmt: skip
    assert out.returncode == 0, out.stderr
    return out.stdout.strip().split(";")[0]


def job_state(env: dict[str, str], job: str) -> str:
    """The job's state as the controller says it (PENDING, RUNNING, COMPLETED, ...)."""
    out = subprocess.run(["scontrol", "show", "job", job], env=env, capture_output=True,
                         text=True, timeout=30)  # fmt: skip
    m = re.search(r"JobState=(\w+)", out.stdout)
    return m[1] if m else "UNKNOWN"


def wait_for(env: dict[str, str], job: str, states: set[str], timeout: float) -> str:
    """Poll until the job is in one of ``states``; the state it reached (with SLURM's
    whole account of the job when it is none of them)."""
    deadline = time.monotonic() + timeout
    state = job_state(env, job)
    while state not in states and time.monotonic() < deadline:
        time.sleep(1)
        state = job_state(env, job)
    if state not in states:
        shown = subprocess.run(["scontrol", "show", "job", job], env=env, capture_output=True,
                               text=True, timeout=30)  # fmt: skip
        return f"{state}: {' '.join(shown.stdout.split())}"
    return state
