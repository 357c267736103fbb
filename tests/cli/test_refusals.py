"""Inputs the command line must refuse in one line (issue 43's attack battery): a script
given to ``run``, a workload module that fails as it is imported, Muon's flags without
Muon or out of range, a ``--trainscope`` command the shell could not split. Each: one
line on stderr, a non-zero exit, no traceback, and nothing written."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainscope.cli import main
from trainscope.config import from_dict
from trainscope.errors import ConfigError

pytestmark = [pytest.mark.timeout(120), pytest.mark.usefixtures("isolated_cli")]

TINY = ["--epochs", "1", "--max-steps-per-epoch", "2", "-q", "--no-progress"]


def refused(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    """``trainscope ARGV`` in this process, which must refuse it: (exit code, its line)."""
    capsys.readouterr()
    try:
        code = main(list(argv))
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert code != 0, (out, err)
    assert len(lines) == 1, lines
    assert "Traceback" not in err and "internal error" not in lines[0], lines[0]
    return code, lines[0]


def test_a_script_given_to_run_says_how_scripts_are_measured(
    isolated_cli: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (isolated_cli / "train.py").write_text("print('training')\n")
    for argv in (["run", "train.py"], ["run", "--epochs", "2", "train.py", "--lr", "0.1"]):
        _, line = refused(capsys, *argv)
        assert "train.py" in line and "--workload module:factory" in line, line
        assert "trainscope profile -- train.py" in line, line
    assert not (isolated_cli / "runs").exists()
    # Anything else unrecognised is still argparse's own one line.
    _, line = refused(capsys, "run", "--no-such-flag")
    assert "unrecognized arguments: --no-such-flag" in line


@pytest.mark.parametrize(
    ("body", "said"),
    [
        ("raise RuntimeError('boom')\n", "RuntimeError: boom"),
        ("x = (\n", "SyntaxError"),
        ("import sys\nsys.exit(0)\n", "SystemExit"),
        ("import argparse\nargparse.ArgumentParser().parse_args(['--x'])\n", "SystemExit"),
    ],
)
def test_a_workload_module_that_fails_to_import_leaves_nothing(
    isolated_cli: Path, capsys: pytest.CaptureFixture[str], body: str, said: str
) -> None:
    name = f"broken_{abs(hash(body)) % 10**8}"
    (isolated_cli / f"{name}.py").write_text(body)
    out = isolated_cli / "out"
    for extra in ([], ["--out", str(out)]):
        code, line = refused(capsys, "run", "--workload", f"{name}:main", *TINY, *extra)
        assert code == 2 and f"workload '{name}:main'" in line and said in line, line
    assert not out.exists() and not (isolated_cli / "runs").exists()


@pytest.mark.parametrize("value", ["1e300", "inf", "nan", "-1", "1000"])
def test_muon_lr_out_of_range_is_one_line(capsys: pytest.CaptureFixture[str], value: str) -> None:
    _, line = refused(capsys, "run", "--optimizer", "muon", "--muon-lr", value, *TINY)
    assert "muon_lr" in line, line
    with pytest.raises(ConfigError, match="lr"):
        from_dict({"train": {"lr": 1e300}})


@pytest.mark.parametrize(
    ("flag", "value"),
    [("--muon-lr", "0.5"), ("--muon-ns-steps", "3"), ("--muon-ns-dtype", "fp32")],
)
def test_a_muon_flag_without_muon_is_refused(
    isolated_cli: Path, capsys: pytest.CaptureFixture[str], flag: str, value: str
) -> None:
    for optimizer in ([], ["--optimizer", "adamw"]):
        code, line = refused(capsys, "run", flag, value, *optimizer, *TINY)
        assert code == 2 and flag in line and "--optimizer muon" in line, line
    key = {"--muon-lr": "muon_lr", "--muon-ns-steps": "muon_ns_steps"}.get(flag, "muon_ns_dtype")
    code, line = refused(capsys, "run", "--set", f"train.{key}={value}", *TINY)
    assert "--optimizer muon" in line, line
    assert not (isolated_cli / "runs").exists()
    # The slurm-script of such a run is refused too: it would start the same run.
    job = ["--nodes", "1", "--tasks-per-node", "2", "--time", "01:00", "--strategy", "ddp"]
    _, line = refused(capsys, "slurm-script", flag, value, *job)
    assert "--optimizer muon" in line, line


def test_a_slurm_job_id_that_is_not_one_never_reaches_a_run(
    isolated_cli: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from trainscope import registry

    monkeypatch.setenv("SLURM_JOB_ID", "--help")  # a batch script's: no srun task
    for argv in (["run", *TINY], ["study", next(iter(registry.STUDIES)), "--dry-run"]):
        code, line = refused(capsys, *argv)
        assert code == 2 and "SLURM_JOB_ID='--help'" in line and "not a SLURM job id" in line
    assert not (isolated_cli / "runs").exists()


@pytest.mark.parametrize("command", ["trainscope a'b\"c; rm -rf /", "", "   "])
def test_a_trainscope_command_the_shell_cannot_split_is_one_line(
    capsys: pytest.CaptureFixture[str], command: str
) -> None:
    job = ["--nodes", "1", "--tasks-per-node", "2", "--time", "01:00", "--strategy", "ddp"]
    code, line = refused(capsys, "slurm-script", *job, "--trainscope", command)
    assert code == 2 and "--trainscope" in line, line
