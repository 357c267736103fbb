"""Launches (``trainscope run --nproc 2``, gloo on 127.0.0.1): workers import only what
the console script would, a stalled or dead rank ends in one true line, and killing the
launcher stops every process it started.

Real launches (the console script in a subprocess, torchrun, fresh interpreters), where
how the processes start is what is tested: imports from the current directory, the
process tree that killing the launcher must stop, a rank killed under torchrun's agent.
The others ask what the ranks do once started (a refusal, a stall, a bad input, the
README's config) and run in-process with the ranks forked (``forked_launch``,
tests/forked_launch.py): the same trainscope code in real processes, without a fresh
interpreter's start-up.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.conftest import scaled
from trainscope.cli import main
from trainscope.records.launch_outcomes import conclude

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]

DDP2 = ["--strategy", "ddp", "--nproc", "2", "--no-progress", "-q"]
SHORT = ["--epochs", "1", "--max-steps-per-epoch", "3"]

# Modules a user may well have lying in a project folder, each shadowing what trainscope,
# torch or torchrun import. If any is imported, it leaves a file saying so.
HOSTILE = """
import os, sys
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "IMPORTED"), "a") as f:
    f.write(__name__ + " " + str(os.getpid()) + "\\n")
raise SystemExit("a module from the current directory was imported: " + __name__)
"""


FACTORY = """
from trainscope.workloads.builtin import digits
def factory(cfg):
    return digits(cfg, None)
"""


def trainscope(cwd: Path, *args: str, timeout: float = 150) -> subprocess.CompletedProcess:
    """``trainscope ARGS`` as a user runs it: the console script, in ``cwd``."""
    script = Path(sys.executable).parent / "trainscope"
    argv = [str(script)] if script.exists() else [sys.executable, "-m", "trainscope.cli"]
    return subprocess.run(
        [*argv, *args], cwd=cwd, capture_output=True, text=True, timeout=scaled(timeout)
    )


def run_main(capfd: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """``trainscope ARGV`` in this process: (exit code, stdout, stderr), the forked ranks'
    output included (captured at the file descriptors)."""
    capfd.readouterr()
    try:
        code = main(list(argv))
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    out, err = capfd.readouterr()
    return code, out, err


def launched_pids(root_pid: int) -> list[int]:
    """Every process started under ``root_pid`` (children, grandchildren, ...) now alive."""
    out = subprocess.run(["ps", "-eo", "pid=,ppid="], capture_output=True, text=True).stdout
    children: dict[int, list[int]] = {}
    for line in out.splitlines():
        pid, ppid = map(int, line.split())
        children.setdefault(ppid, []).append(pid)
    found, todo = [], [root_pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = Path(f"/proc/{pid}/stat")
    return not (status.exists() and status.read_text().split()[2] == "Z")


def test_workers_never_import_modules_from_the_current_directory(tmp_path: Path) -> None:
    """Under --nproc 2 the workers find a factory in the current directory (installed
    packages first, then the current directory: the modules shadowing yaml, numpy, ...
    beside it stay unimported)."""
    for name in ("yaml", "numpy", "typing_extensions", "psutil", "rich"):
        (tmp_path / f"{name}.py").write_text(HOSTILE)
    (tmp_path / "my_workload.py").write_text(FACTORY)
    done = trainscope(
        tmp_path, "run", "--workload", "my_workload:factory", *DDP2, *SHORT, "--out", "r"
    )
    assert not (tmp_path / "IMPORTED").exists(), (tmp_path / "IMPORTED").read_text()
    assert done.returncode == 0, done.stderr
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["world_size"] == 2


def test_overwrite_reaches_the_workers_from_the_command_line(
    isolated_cli: Path, forked_launch: list
) -> None:
    """A config file could not carry --overwrite: the workers get it on their command line."""
    assert main(["run", *DDP2, *SHORT, "--out", "r"]) == 0
    first = json.loads((isolated_cli / "r" / "summary.json").read_text())
    assert first["status"] == "completed"
    assert main(["run", *DDP2, *SHORT, "--out", "r", "--overwrite"]) == 0
    second = json.loads((isolated_cli / "r" / "summary.json").read_text())
    assert second["status"] == "completed" and second["started_at"] >= first["started_at"]
    assert [kind for kind, _ in forked_launch] == ["torchrun", "torchrun"]
    assert "--overwrite" in forked_launch[1][1] and "--overwrite" not in forked_launch[0][1]


def test_a_refused_launch_leaves_the_directory_it_named_alone(
    isolated_cli: Path, forked_launch: list, capfd: pytest.CaptureFixture[str]
) -> None:
    """Rank 0 is refused a directory in use: the launcher must not 'complete' its record."""
    from trainscope.records.ownership import claim_dir

    live = claim_dir(isolated_cli / "live", "run")  # another run writing there, alive
    live.record("summary.json")
    (isolated_cli / "live" / "summary.json").write_text('{"status": "running"}')
    try:
        code, _, err = run_main(capfd, "run", *DDP2, *SHORT, "--out", "live", "--overwrite")
    finally:
        live.release()
    assert code != 0
    assert "in use by another trainscope process" in err
    assert (isolated_cli / "live" / "summary.json").read_text() == '{"status": "running"}'
    assert [kind for kind, _ in forked_launch] == ["torchrun"]  # refused by a rank


def test_study_strategies_runs_each_configuration_in_a_process_of_its_own(
    isolated_cli: Path, forked_launch: list
) -> None:
    code = main([
        "study", "strategies", "--strategies", "single,ddp", "--nproc", "2",
        "--repeats", "1", "--no-warmup", "--epochs", "1", "--max-steps-per-epoch", "2",
        "--out", "s", "-q",
    ])  # fmt: skip
    assert code == 0
    study = json.loads((isolated_cli / "s" / "study.json").read_text())
    assert study["status"] == "completed", study.get("failures")
    for config in ("single", "ddp"):
        run = isolated_cli / "s" / "runs" / config / "r1"
        summary = json.loads((run / "summary.json").read_text())
        assert summary["status"] == "completed"
    # One launch per run: one process for single, torchrun's two ranks for ddp.
    assert sorted(kind for kind, _ in forked_launch) == ["process", "torchrun"]


def test_a_factory_in_the_current_directory_is_found_by_one_process(tmp_path: Path) -> None:
    """The rule of the launched workers (test_workers_never_import_...) holds for one
    process too: installed packages first, then the current directory (never ahead of
    them: the yaml.py beside it stays unimported)."""
    (tmp_path / "my_workload.py").write_text(FACTORY)
    (tmp_path / "yaml.py").write_text(HOSTILE)
    done = trainscope(
        tmp_path, "run", "--workload", "my_workload:factory", *SHORT, "-q", "--no-progress",
        "--out", "r",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert not (tmp_path / "IMPORTED").exists()
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["world_size"] == 1


def test_a_bad_input_found_in_the_workers_is_one_line(
    isolated_cli: Path, forked_launch: list, capfd: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run_main(capfd, "run", *DDP2, *SHORT, "--workload", "no_such_module:f")
    assert code != 0
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("trainscope: error: workload 'no_such_module:f'")
    assert "Traceback" not in err and "rank" not in lines[0]
    assert not (isolated_cli / "runs").exists()  # refused before any run directory was made
    assert [kind for kind, _ in forked_launch] == ["torchrun"]  # found by the ranks


STALLS_ON_RANK_1 = """
import os, time
from torch import nn
from trainscope.workloads.builtin import synthetic
class Sleepy(nn.Module):
    def __init__(self, inner):
        super().__init__()
        self.inner, self.calls = inner, 0
    def forward(self, x):
        self.calls += 1
        if self.training and os.environ.get("RANK") == "1" and self.calls == 3:
            time.sleep(600)  # alive, not progressing
        return self.inner(x)
def factory(cfg):
    wl = synthetic(cfg, None)
    wl.model = Sleepy(wl.model)
    return wl
"""


def test_a_stalled_rank_is_named_within_the_stall_timeout(
    isolated_cli: Path, forked_launch: list, capfd: pytest.CaptureFixture[str]
) -> None:
    tmp_path = isolated_cli
    (tmp_path / "stalls.py").write_text(STALLS_ON_RANK_1)
    t0 = time.monotonic()
    code, _, err = run_main(
        capfd, "run", "--workload", "stalls:factory", "--synthetic-samples", "256",
        *DDP2, "--epochs", "1", "--stall-timeout", "4", "--out", "r",
    )  # fmt: skip
    elapsed = time.monotonic() - t0
    assert elapsed < 120  # the sleep is 600 s and the collective timeout 300 s
    lines = err.strip().splitlines()
    assert code != 0 and len(lines) == 1, err
    assert lines[0].startswith("trainscope: error: stalled: rank 1 made no progress")
    assert "last: step 3" in lines[0] and "--stall-timeout" in lines[0]
    for path in ("r/summary.json", "r/ranks/rank1/summary.json"):
        summary = json.loads((tmp_path / path).read_text())
        assert summary["status"] == "failed"
        assert summary["error"].startswith("stalled: rank 1 made no progress"), path


def _start_long_launch(tmp_path: Path) -> subprocess.Popen:
    script = Path(sys.executable).parent / "trainscope"
    argv = [str(script)] if script.exists() else [sys.executable, "-m", "trainscope.cli"]
    (tmp_path / "tmp").mkdir(exist_ok=True)
    proc = subprocess.Popen(
        [*argv, "run", *DDP2, "--epochs", "1000", "--log-every", "1", "--out", "r"],
        cwd=tmp_path,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "TMPDIR": str(tmp_path / "tmp")},
    )
    metrics = tmp_path / "r" / "metrics.jsonl"
    deadline = time.monotonic() + 90
    while not (metrics.is_file() and '"step"' in metrics.read_text()):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"the launch did not start training: {proc.communicate()[1]}")
        time.sleep(0.2)
    return proc


def _wait_gone(pids: list[int], seconds: float) -> list[int]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.2)
    return [p for p in pids if alive(p)]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_killing_the_launcher_stops_every_process_it_started(tmp_path, sig):
    proc = _start_long_launch(tmp_path)
    started = launched_pids(proc.pid)
    assert len(started) >= 3  # torchrun and its two workers
    proc.send_signal(sig)
    proc.wait(timeout=90)
    assert _wait_gone(started, 60) == []
    assert list((tmp_path / "tmp").glob("trainscope-launch-*")) == []  # no folder left
    for path in ("r/summary.json", "r/ranks/rank1/summary.json"):
        summary = json.loads((tmp_path / path).read_text())
        assert summary["status"] == "failed"
        assert summary["error"].startswith("terminated by SIGTERM"), summary["error"]
    if sig == signal.SIGTERM:
        assert proc.returncode == 128 + signal.SIGTERM
        assert proc.stderr.read().strip().splitlines() == ["trainscope: terminated by SIGTERM"]


def test_a_rank_killed_from_outside_is_named(tmp_path: Path) -> None:
    proc = _start_long_launch(tmp_path)
    workers = [p for p in launched_pids(proc.pid) if launched_pids(p) == []]
    rank1 = json.loads((tmp_path / "r" / "ranks" / "rank1" / "summary.json").read_text())
    assert rank1["status"] == "running"
    victim = max(workers)  # torchrun starts rank 0 first
    os.kill(victim, signal.SIGKILL)
    proc.wait(timeout=120)
    err = proc.stderr.read().strip().splitlines()
    assert proc.returncode != 0 and len(err) == 1, err
    assert "was killed by SIGKILL without recording why" in err[0]
    for path in ("r/summary.json", "r/ranks/rank1/summary.json"):
        summary = json.loads((tmp_path / path).read_text())
        assert summary["status"] == "failed", path  # nothing left at "running"
        assert "rank 1 was killed by SIGKILL" in summary["error"], (path, summary["error"])
    # The main record names the cause first, not what rank 0 saw of it afterwards (a lost
    # connection, or the agent's SIGTERM).
    main_error = json.loads((tmp_path / "r" / "summary.json").read_text())["error"]
    assert main_error.startswith("rank 1 was killed by SIGKILL"), main_error


# ------------------------------------------------- the one line, from the launch folder


def _launch_dir(reports: dict[str, dict], agent: dict | None = None) -> Path:
    folder = Path(tempfile.mkdtemp())
    for rank, data in reports.items():
        (folder / f"rank{rank}.json").write_text(json.dumps(data))
    if agent is not None:
        (folder / "agent.json").write_text(json.dumps(agent))
    return folder


def test_conclude_prefers_the_cause_over_its_consequences() -> None:
    folder = _launch_dir(
        {
            "0": {"rank": 0, "error": "terminated by SIGTERM", "time": 1.0},
            "1": {"rank": 1, "error": "DataError: file missing", "time": 5.0},
        }
    )
    assert conclude(folder, 1).error == "rank 1: DataError: file missing"


def test_conclude_says_the_same_refusal_once() -> None:
    same = {"error": "unknown workload 'x'", "time": 1.0}
    folder = _launch_dir({"0": {"rank": 0, **same}, "1": {"rank": 1, **same}})
    assert conclude(folder, 1).error == "unknown workload 'x'"


def test_conclude_names_a_silent_rank_and_completes_its_record(tmp_path: Path) -> None:
    run = tmp_path / "run"
    (run / "ranks" / "rank1").mkdir(parents=True)
    (run / "summary.json").write_text(json.dumps({"status": "failed", "error": "x"}))
    (run / "ranks" / "rank1" / "summary.json").write_text(json.dumps({"status": "running"}))
    folder = _launch_dir(
        {"0": {"rank": 0, "error": "terminated by SIGTERM", "time": 2.0}},
        agent={"failures": {"1": {"exitcode": -9, "text": "was killed by SIGKILL", "time": 1}}},
    )
    (folder / "run_dir").write_text(str(run))  # rank 0 claimed it and said so
    result = conclude(folder, 1)
    assert result.error == "rank 1 was killed by SIGKILL without recording why"
    rank1 = json.loads((run / "ranks" / "rank1" / "summary.json").read_text())
    assert rank1["status"] == "failed" and "killed by SIGKILL" in rank1["error"]
    assert json.loads((run / "summary.json").read_text())["error"] == "x"  # kept


def test_the_readme_config_example_runs_under_nproc_2(
    isolated_cli: Path, forked_launch: list, capfd: pytest.CaptureFixture[str]
) -> None:
    """The YAML of the README's Config section, as printed there (ddp, 2 processes, bf16,
    4 workers, pin_memory), trains to completion on MNIST-format files, quietly."""
    import re

    import yaml

    from tests.conftest import REPO_ROOT, write_mnist_dir

    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    block = re.search(r"### Config\n.*?```yaml\n(.*?)```", readme, flags=re.S)
    assert block is not None, "the README's Config section lost its YAML example"
    config = yaml.safe_load(block.group(1))
    assert config["dist"]["nproc"] == 2
    tmp_path = isolated_cli
    write_mnist_dir(tmp_path / config["workload"]["data_dir"], n_train=300, n_test=60)
    (tmp_path / "cfg.yaml").write_text(yaml.safe_dump(config))
    code, out, err = run_main(capfd, "run", "--config", "cfg.yaml", *SHORT, "--out", "r", "-q")
    assert code == 0, err
    assert out == "" and err == ""  # -q: errors only, every rank
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["world_size"] == 2
