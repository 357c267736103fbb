"""The Python API: trainscope.run(...) and trainscope.report(...), as the CLI does them."""

from __future__ import annotations

import subprocess
import sys

import pytest

import trainscope
from trainscope.errors import ConfigError

SHORT = {"epochs": 1, "max_steps_per_epoch": 3}


def test_run_then_report_from_python(tmp_path) -> None:
    result = trainscope.run(out=str(tmp_path / "r"), batch_size=16, quiet=True, **SHORT)
    assert result.status == "completed" and result.run_dir == tmp_path / "r"
    assert result.summary["batch_size"] == 16 and result.summary["steps"] == 3
    assert (result.run_dir / "summary.json").is_file()
    report = trainscope.report(result.run_dir)
    assert report.markdown_path.is_file() and report.html_path.is_file()


def test_settings_dotted_keys_and_a_config_dict(tmp_path) -> None:
    result = trainscope.run(
        {"train": {"optimizer": "adam", "lr": 0.002}},
        set={"train.seed": 3},
        out=str(tmp_path / "r"),
        quiet=True,
        **SHORT,
    )
    assert result.status == "completed"
    saved = (tmp_path / "r" / "config.yaml").read_text()
    assert "optimizer: adam" in saved and "seed: 3" in saved and "lr: 0.002" in saved


def test_bad_settings_raise_one_clear_error_before_anything_runs(tmp_path) -> None:
    with pytest.raises(ConfigError, match="unknown setting 'batchsize'"):
        trainscope.run(batchsize=3, out=str(tmp_path / "a"))
    with pytest.raises(ConfigError, match="lr"):
        trainscope.run(lr=-1.0, out=str(tmp_path / "b"))
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_a_config_cannot_switch_deletion_on(tmp_path) -> None:
    """As on the command line: an existing directory is replaced only when this call says
    overwrite=True, never because the config given says so."""
    target = tmp_path / "r"
    trainscope.run(out=str(target), quiet=True, **SHORT)
    with pytest.raises(Exception, match="exists|not empty|overwrite"):
        trainscope.run({"out": str(target), "overwrite": True}, out=str(target), quiet=True)
    again = trainscope.run(out=str(target), overwrite=True, quiet=True, **SHORT)
    assert again.status == "completed"


def test_importing_trainscope_imports_no_torch() -> None:
    code = "import sys, trainscope; trainscope.run; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_a_bad_setting_raises_before_anything_is_submitted(tmp_path) -> None:
    """``executor=``: the settings are checked here, before anything is submitted."""
    submitit = pytest.importorskip("submitit")
    executor = submitit.LocalExecutor(folder=str(tmp_path / "jobs"))
    executor.update_parameters(timeout_min=5)
    with pytest.raises(ConfigError):
        trainscope.run(epochs=0, executor=executor)
    assert not (tmp_path / "jobs").exists() or not any((tmp_path / "jobs").iterdir())


@pytest.mark.slow  # submitit starts a real process: the run's interpreter and torch
@pytest.mark.timeout(240)
def test_a_run_submitted_through_a_submitit_executor(tmp_path) -> None:
    """``executor=``: trained where the executor runs it (submitit's LocalExecutor: a
    process of its own), its directory fixed before submission."""
    submitit = pytest.importorskip("submitit")
    executor = submitit.LocalExecutor(folder=str(tmp_path / "jobs"))
    executor.update_parameters(timeout_min=5)
    job = trainscope.run(workload="digits", epochs=1, max_steps_per_epoch=3, threads=1,
                         out=str(tmp_path / "run"), quiet=True, executor=executor)  # fmt: skip
    result = job.result()
    assert result.status == "completed" and result.run_dir == tmp_path / "run"
    assert (tmp_path / "run" / "summary.json").is_file()
