"""Tests for the ``trainscope`` command: bad input, run directories, config precedence.

Most cases call :func:`trainscope.cli.main` in-process (fast); a few run
``python -m trainscope`` in a subprocess, for what only a fresh interpreter shows: that
``--help`` does not import torch, that no traceback reaches the terminal, and that -q
silences what libraries log while they are first imported. Those that import torch
(seconds each) are marked ``slow``.

Every bad input must give one line naming the problem, a non-zero exit, no traceback,
and no run directory that looks complete.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from tests.conftest import scaled
from trainscope.cli import main
from trainscope.data.idx import write_idx

pytestmark = [pytest.mark.timeout(120), pytest.mark.usefixtures("isolated_cli")]

# A real training run, kept tiny.
TINY = ["--epochs", "1", "--max-steps-per-epoch", "3", "-q", "--no-progress"]


def run_main(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """Run the CLI in-process: (exit code, stdout, stderr). argparse errors exit via SystemExit."""
    try:
        code = main(list(argv))
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    out, err = capsys.readouterr()
    return code, out, err


def one_error_line(err: str, *needles: str) -> str:
    """Assert stderr is exactly one non-empty trainscope error line holding every needle."""
    assert "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got {lines!r}"
    line = lines[0]
    assert line.startswith("trainscope") and "error:" in line, line
    assert "internal error" not in line, line
    for needle in needles:
        assert needle in line, f"{needle!r} not in {line!r}"
    return line


def assert_failed_record(run_dir: Path, line: str) -> None:
    """A run that failed after its directory was made must not look complete."""
    if not run_dir.exists():
        return
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "failed"
    message = line.split("error: ", 1)[1]
    assert message in summary["error"]
    assert "wall_time_s" not in summary and "test_accuracy" not in summary


# -------------------------------------------------------------- bad input, before the run

# (arguments after `run`, words the error line must hold, exit code)
REFUSED_BEFORE_RUN: list[tuple[list[str], tuple[str, ...], int]] = [
    (["--workload", "nope"], ("unknown workload", "'nope'"), 2),
    (["--precision", "fp8"], ("unknown precision", "'fp8'"), 2),
    (["--optimizer", "lamb"], ("unknown optimizer", "'lamb'"), 2),
    (["--device", "tpu"], ("unknown device", "'tpu'"), 2),
    (["--timing", "fast"], ("unknown timing mode", "'fast'"), 2),
    (["--batch-size", "0"], ("batch_size", "positive", "0"), 2),
    (["--batch-size", "-3"], ("batch_size", "positive", "-3"), 2),
    (["--batch-size", "abc"], ("--batch-size", "invalid int value", "'abc'"), 2),
    (["--num-workers", "-1"], ("num_workers", ">= 0", "-1"), 2),
    (["--prefetch-factor", "2"], ("prefetch_factor", "num_workers > 0"), 2),
    (["--persistent-workers"], ("persistent_workers", "num_workers > 0"), 2),
    (["--epochs", "0"], ("epochs", "positive"), 2),
    (["--lr", "0"], ("lr must be a finite number > 0",), 2),
    (["--lr", "fast"], ("--lr", "invalid float value"), 2),
    (["--synthetic-shape", "1", "28"], ("--synthetic-shape", "expected 3 arguments"), 2),
    (["--set", "foo"], ("--set expects KEY=VALUE", "'foo'"), 2),
    (["--set", "=3"], ("--set expects KEY=VALUE", "'=3'"), 2),
    (["--set", "train.lr=[1"], ("--set train.lr", "cannot parse", "'[1'"), 2),
    (["--set", "train.nope=1"], ("unknown config key train.nope",), 2),
    (["--set", "nope=1"], ("unknown config key 'nope'",), 2),
    (["--set", "data=5"], ("section 'data' must be a mapping",), 2),
    (["--set", "train.epochs=true"], ("train.epochs must be an integer", "True"), 2),
    (["--set", "train.lr.x=1"], ("train.lr must be a number",), 2),
    (["--nope"], ("unrecognized arguments", "--nope"), 2),
    # Valid config, impossible here: refused before the run directory exists.
    (["--device", "cpu", "--precision", "tf32"], ("tf32", "CPU"), 1),
    (["--device", "cpu", "--precision", "fp16"], ("fp16", "CPU"), 1),
    # Workload options, checked by the workload before anything is written.
    (["--lora-r", "4"], ("workload digits takes no options", "lora_r"), 2),
    (["--workload", "gpt-char", "--preset", "huge"], ("unknown preset 'huge'",), 2),
    (["--workload", "gpt-char", "--n-head", "5"], ("divisible by n_head (5)",), 2),
    (["--workload", "gpt-char", "--set", "workload.options.x=1"], ("unknown option 'x'",), 2),
    (["--workload", "text-cls", "--model", "gpt9"], ("unknown model 'gpt9'",), 2),
    (["--workload", "gpt-char", "--dropout", "nan"], ("dropout must be in [0, 1)", "nan"), 2),
    (["--workload", "gpt-char", "--dropout", "1"], ("dropout must be in [0, 1)", "1.0"), 2),
    # A data folder lacking its files: before the run folder too (and before torch).
    (["--workload", "mnist", "--data-dir", "/nonexistent"], ("/nonexistent does not exist",), 1),
]


@pytest.mark.parametrize(
    ("args", "needles", "code"),
    REFUSED_BEFORE_RUN,
    ids=[" ".join(a) for a, _, _ in REFUSED_BEFORE_RUN],
)
def test_bad_input_refused_before_run(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    args: list[str],
    needles: tuple[str, ...],
    code: int,
) -> None:
    out_dir = tmp_path / "run"
    # The flags under test come last, so that they win over TINY's.
    got, out, err = run_main(capsys, "run", "--out", str(out_dir), *TINY, *args)
    assert got == code != 0
    one_error_line(err, *needles)
    assert out == ""
    assert not out_dir.exists()
    assert not (tmp_path / "runs").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_cuda_requested_without_cuda(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = run_main(capsys, "run", "--device", "cuda", "--out", str(tmp_path / "r"))
    assert code != 0
    one_error_line(err, "device 'cuda'", "CUDA is not available")
    assert not (tmp_path / "r").exists()


def test_synthetic_shape_not_a_list(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = run_main(
        capsys, "run", "--set", "workload.synthetic_shape=5", "--out", str(tmp_path / "r")
    )
    assert code == 2
    one_error_line(err, "synthetic_shape")
    assert not (tmp_path / "r").exists()


def test_no_command_prints_help(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_main(capsys)
    assert code == 2
    assert "usage: trainscope" in out and "run" in out and "report" in out


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    import trainscope

    code, out, _ = run_main(capsys, "--version")
    assert code == 0 and out.strip() == f"trainscope {trainscope.__version__}"


# -------------------------------------------------------------------------- config files


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("text", "needles"),
    [
        (None, ("config file", "does not exist")),
        ("data: [1\n", ("config file", "is not valid YAML")),
        ("- 1\n- 2\n", ("must hold a mapping at the top level",)),
        ("train: {nope: 1}\n", ("unknown config key train.nope",)),
        ('data: {batch_size: "x"}\n', ("data.batch_size must be an integer", "'x'")),
        ("data: {batch_size: 0}\n", ("batch_size must be a positive integer",)),
        ("workload: {name: resnet}\n", ("unknown workload 'resnet'",)),
    ],
    ids=["missing", "invalid-yaml", "not-a-mapping", "unknown-key", "wrong-type", "zero", "name"],
)
def test_bad_config_file(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, text: str | None, needles: tuple[str, ...]
) -> None:
    path = tmp_path / "cfg.yaml"
    if text is not None:
        path.write_text(text)
    out_dir = tmp_path / "run"
    code, _, err = run_main(capsys, "run", "--config", str(path), "--out", str(out_dir), *TINY)
    assert code == 2
    line = one_error_line(err, *needles)
    if text is None or "YAML" in needles[-1]:
        assert "cfg.yaml" in line  # names the file
    assert not out_dir.exists()


def test_config_error_from_flag_beats_valid_yaml(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # The YAML is fine; the flag that overrides it is not, and the flag is what is named.
    path = _write(tmp_path / "cfg.yaml", "data: {batch_size: 16}\n")
    code, _, err = run_main(
        capsys, "run", "--config", str(path), "--batch-size", "0", "--out", str(tmp_path / "r")
    )
    assert code == 2
    one_error_line(err, "batch_size", "got 0")


# ------------------------------------------------------------------------- output folder


def test_out_under_a_regular_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    blocker = _write(tmp_path / "file.txt", "keep me")
    code, _, err = run_main(capsys, "run", "--out", str(blocker / "run"), *TINY)
    assert code != 0
    one_error_line(err, "--out", "file.txt", "not writable")
    assert blocker.read_text() == "keep me"


def test_out_is_a_regular_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    blocker = _write(tmp_path / "file.txt", "keep me")
    code, _, err = run_main(capsys, "run", "--out", str(blocker), "--overwrite", *TINY)
    assert code != 0
    one_error_line(err, "file.txt", "not a directory")
    assert blocker.read_text() == "keep me"


@pytest.mark.skipif(
    not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root ignores file permissions"
)
def test_out_in_read_only_dir(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        code, _, err = run_main(capsys, "run", "--out", str(ro / "run"), *TINY)
        assert code != 0
        one_error_line(err, "--out", "not writable")
        assert not (ro / "run").exists()
    finally:
        ro.chmod(0o700)


def test_existing_out_refused_then_overwritten(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out_dir = tmp_path / "run"
    code, _, err = run_main(capsys, "run", "--out", str(out_dir), *TINY)
    assert code == 0, err
    notes = _write(out_dir / "notes.txt", "my notes")
    first = json.loads((out_dir / "summary.json").read_text())

    code, _, err = run_main(capsys, "run", "--out", str(out_dir), *TINY)
    assert code != 0
    one_error_line(err, "already exists", "--overwrite")
    assert json.loads((out_dir / "summary.json").read_text()) == first

    code, _, err = run_main(capsys, "run", "--out", str(out_dir), "--overwrite", *TINY)
    assert code == 0, err
    summary = json.loads((out_dir / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["steps"] == 3
    assert summary["started_at"] >= first["started_at"]
    assert notes.read_text() == "my notes"  # what the user put there is left alone


def test_existing_folder_of_the_user_is_never_overwritten(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out_dir = tmp_path / "run"
    out_dir.mkdir()
    stale = _write(out_dir / "summary.json", '{"status": "stale"}')
    for extra in ([], ["--overwrite"]):
        code, _, err = run_main(capsys, "run", "--out", str(out_dir), *extra, *TINY)
        assert code != 0
        one_error_line(err, "already exists", "no trainscope marker")
    assert stale.read_text() == '{"status": "stale"}'
    assert sorted(p.name for p in out_dir.iterdir()) == ["summary.json"]


# ------------------------------------------------------------------------ bad MNIST data


def _bad_magic(root: Path) -> str:
    (root / "train-images-idx3-ubyte.gz").write_bytes(
        gzip.compress(b"\xde\xad\xbe\xef" + bytes(64), mtime=0)
    )
    return "bad magic number"


def _truncated_gzip(root: Path) -> str:
    path = root / "t10k-images-idx3-ubyte.gz"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    return "truncated or corrupt gzip"


def _count_mismatch(root: Path) -> str:
    write_idx(root / "train-labels-idx1-ubyte.gz", np.zeros(199, dtype=np.uint8))
    return "the counts must match"


def _one_file_missing(root: Path) -> str:
    (root / "t10k-labels-idx1-ubyte.gz").unlink()
    return "is missing t10k-labels-idx1-ubyte.gz"


@pytest.mark.parametrize(
    "spoil",
    [_bad_magic, _truncated_gzip, _count_mismatch, _one_file_missing],
    ids=["bad-magic", "truncated-gzip", "count-mismatch", "file-missing"],
)
def test_corrupt_mnist_dir(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    mnist_dir: Path,
    spoil: Callable[[Path], str],
) -> None:
    problem = spoil(mnist_dir)
    out_dir = tmp_path / "run"
    code, _, err = run_main(
        capsys, "run", "--workload", "mnist", "--data-dir", str(mnist_dir), "--no-download",
        "--out", str(out_dir), *TINY,
    )  # fmt: skip
    assert code != 0
    line = one_error_line(err, problem, str(mnist_dir))
    assert_failed_record(out_dir, line)


@pytest.mark.parametrize("kind", ["missing", "empty"])
def test_mnist_dir_missing_or_empty(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, kind: str
) -> None:
    data_dir = tmp_path / "data"
    if kind == "empty":
        data_dir.mkdir()
    out_dir = tmp_path / "run"
    code, _, err = run_main(
        capsys, "run", "--workload", "mnist", "--data-dir", str(data_dir), "--no-download",
        "--out", str(out_dir), *TINY,
    )  # fmt: skip
    assert code != 0
    needle = "does not exist" if kind == "missing" else "no MNIST files"
    line = one_error_line(err, needle, str(data_dir))
    assert_failed_record(out_dir, line)


def test_mnist_offline_without_data_dir(capsys: pytest.CaptureFixture[str], tmp_path: Path):
    out_dir = tmp_path / "run"
    code, _, err = run_main(
        capsys, "run", "--workload", "mnist", "--no-download", "--out", str(out_dir), *TINY
    )
    assert code != 0
    line = one_error_line(err, "downloading is off", "--data-dir")
    assert_failed_record(out_dir, line)


def test_user_factory_that_cannot_be_imported(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out_dir = tmp_path / "run"
    code, _, err = run_main(
        capsys, "run", "--workload", "ts_no_such_module_xyz:make", "--out", str(out_dir), *TINY
    )
    assert code != 0
    line = one_error_line(err, "cannot import", "ts_no_such_module_xyz")
    assert_failed_record(out_dir, line)


def test_mnist_run_from_local_dir(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, mnist_dir: Path
) -> None:
    # The good path next to the bad ones: the same small folder, unspoilt, trains.
    out_dir = tmp_path / "run"
    code, _, err = run_main(
        capsys, "run", "--workload", "mnist", "--data-dir", str(mnist_dir), "--no-download",
        "--batch-size", "16", "--out", str(out_dir), *TINY,
    )  # fmt: skip
    assert code == 0, err
    summary = json.loads((out_dir / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["error"] is None
    assert summary["train_samples"] == 180 and summary["steps"] == 3
    assert not (tmp_path / "cache").exists()


# ------------------------------------------------------------------ config precedence


def test_yaml_cli_precedence_and_rerun_from_saved_config(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    cfg = _write(
        tmp_path / "my.yaml",
        "data: {batch_size: 16}\ntrain: {epochs: 1, max_steps_per_epoch: 3, lr: 0.02}\n",
    )
    first = tmp_path / "first"
    code, _, err = run_main(
        capsys, "run", "--config", str(cfg), "--batch-size", "8", "--out", str(first),
        "-q", "--no-progress",
    )  # fmt: skip
    assert code == 0, err
    saved = yaml.safe_load((first / "config.yaml").read_text())
    assert saved["data"]["batch_size"] == 8  # the flag beats the YAML
    assert saved["train"]["epochs"] == 1 and saved["train"]["max_steps_per_epoch"] == 3
    assert saved["train"]["lr"] == 0.02  # YAML beats the default
    assert saved["train"]["optimizer"] == "sgd"  # default
    assert saved["out"] is None and saved["overwrite"] is False  # a rerun makes a new dir
    summary = json.loads((first / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["batch_size"] == 8
    assert summary["steps"] == 3 and len(summary["epochs"]) == 1

    second = tmp_path / "second"
    code, _, err = run_main(
        capsys, "run", "--config", str(first / "config.yaml"), "--out", str(second),
        "-q", "--no-progress",
    )  # fmt: skip
    assert code == 0, err
    assert (second / "config.yaml").read_text() == (first / "config.yaml").read_text()
    again = json.loads((second / "summary.json").read_text())
    assert again["status"] == "completed" and again["steps"] == 3
    # Same config, same seeds: the same first losses.
    assert again["first_losses"] == pytest.approx(summary["first_losses"])


def test_set_reaches_any_key_and_beats_flags(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out_dir = tmp_path / "run"
    code, _, err = run_main(
        capsys, "run", "--batch-size", "4", "--set", "data.batch_size=12",
        "--set", "train.optimizer=adam", "--out", str(out_dir), *TINY,
    )  # fmt: skip
    assert code == 0, err
    saved = yaml.safe_load((out_dir / "config.yaml").read_text())
    assert saved["data"]["batch_size"] == 12 and saved["train"]["optimizer"] == "adam"


# --------------------------------------------------------------------------- subprocess


def _subprocess(args: list[str], cwd: Path, timeout: float = 60) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "TRAINSCOPE_DEBUG"}
    env["TRAINSCOPE_CACHE"] = str(cwd / "cache")
    return subprocess.run(
        [sys.executable, *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=scaled(timeout),
    )


def _imported_modules(importtime_stderr: str) -> set[str]:
    """Module names from ``python -X importtime`` output ('import time: a | b | name')."""
    names = set()
    for line in importtime_stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            names.add(line.rsplit("|", 1)[1].strip())
    return names


@pytest.mark.parametrize(
    "args",
    [["-m", "trainscope", "--help"], ["-m", "trainscope", "run", "--help"],
     ["-c", "import trainscope, trainscope.cli, trainscope.config"]],
    ids=["help", "run-help", "import"],
)  # fmt: skip
def test_help_and_import_do_not_import_torch(tmp_path: Path, args: list[str]) -> None:
    proc = _subprocess(["-X", "importtime", *args], tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    modules = _imported_modules(proc.stderr)
    assert "trainscope" in modules  # the importtime output was read correctly
    torch_like = sorted(m for m in modules if m.split(".")[0] == "torch")
    assert torch_like == [], f"imported eagerly: {torch_like[:5]}"
    if "--help" in args:
        assert "usage: trainscope" in proc.stdout


@pytest.mark.slow  # a real interpreter importing torch
def test_importtime_parsing_does_see_torch(tmp_path: Path) -> None:
    # The check above must be able to fail: a module that does import torch is caught.
    proc = _subprocess(
        ["-X", "importtime", "-c", "import trainscope.techniques.precision"], tmp_path
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "torch" in _imported_modules(proc.stderr)


def test_bad_input_in_a_real_process(tmp_path: Path) -> None:
    # Refused by validation: no torch import, no traceback, nothing on stdout, no run dir.
    proc = _subprocess(
        ["-X", "importtime", "-m", "trainscope", "run", "--batch-size", "0", "--out", "r"],
        tmp_path,
    )
    assert proc.returncode == 2
    assert proc.stdout == ""
    lines = [ln for ln in proc.stderr.splitlines() if not ln.startswith("import time:")]
    assert lines == ["trainscope: error: batch_size must be a positive integer, got 0"]
    assert not any(m.split(".")[0] == "torch" for m in _imported_modules(proc.stderr))
    assert not (tmp_path / "r").exists()


MNIST_OFFLINE = ["-m", "trainscope", "run", "--workload", "mnist", "--no-download", "--out", "r"]


def test_data_error_before_torch_in_a_real_process(tmp_path: Path) -> None:
    # A folder without the files is refused before the run directory and torch.
    (tmp_path / "empty").mkdir()
    proc = _subprocess([*MNIST_OFFLINE, "--data-dir", "empty", *TINY], tmp_path)
    assert proc.returncode == 1
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("trainscope: error: no MNIST files in empty")
    assert not (tmp_path / "r").exists()


@pytest.mark.slow  # a real interpreter importing torch
def test_data_error_after_torch_in_a_real_process(tmp_path: Path) -> None:
    # Files that are there but not IDX fail in setup, after the run directory and torch:
    # one line, no traceback.
    argv = MNIST_OFFLINE
    (tmp_path / "junk").mkdir()
    for stem in ("train-images-idx3", "train-labels-idx1", "t10k-images-idx3", "t10k-labels-idx1"):
        (tmp_path / "junk" / f"{stem}-ubyte").write_text("junk")
    proc = _subprocess([*argv, "--data-dir", "junk", *TINY], tmp_path)
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr + proc.stdout
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and "bad magic number" in lines[0], lines
    assert (tmp_path / "r").is_dir()
    assert_failed_record(tmp_path / "r", lines[0])


def test_run_help_lists_every_workload_and_groups_the_flags(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from trainscope.cli.flags import FLAG_GROUPS, RUN_FLAGS, flag_group
    from trainscope.config import BUILTIN_WORKLOADS

    monkeypatch.setenv("COLUMNS", "200")  # one line per flag's help
    code, out, _ = run_main(capsys, "run", "--help")
    assert code == 0
    workload_line = next(line for line in out.splitlines() if line.startswith("  --workload"))
    for name in BUILTIN_WORKLOADS:
        assert name in workload_line, name
    headings = [line[:-1] for line in out.splitlines() if line and not line.startswith(" ")]
    titles = [title for title, _ in FLAG_GROUPS]
    assert [h for h in headings if h in titles] == titles
    # Every flag lands in a named group, and under its heading in the help.
    assert all(flag_group(dest) in titles for dest, _ in RUN_FLAGS.values())
    body = out.split("precision and memory:")[1].split("training:")[0]
    assert "--precision" in body and "--checkpointing" in body and "--compile" in body
    # --pretrained takes a hub name or a local folder (a local folder works offline).
    pretrained = next(line for line in out.splitlines() if line.startswith("  --pretrained"))
    assert "hub model" in pretrained and "local folder" in pretrained


LOGS_ON_IMPORT = """
import logging
logging.getLogger("torchao").warning("Failed to load _C_mxfp8.so: Could not load this library")
logging.getLogger("torch.utils._pytree").warning("Enum subclasses is deprecated")
from trainscope.workloads.builtin import digits
def factory(cfg):
    return digits(cfg, None)
"""


LOGS_ON_IMPORT_RUN = ["run", "--workload", "logs_on_import:factory", "--epochs", "1",
                      "--max-steps-per-epoch", "2", "--no-progress"]  # fmt: skip


# One fresh interpreter: the -q run first (what it prints is all that is on stdout and
# stderr before the marker), then, as the control, the same run without -q with the
# workload imported again (so that it logs again).
QUIET_THEN_LOUD = """
import sys
from trainscope.cli import main
quiet = main(sys.argv[1:] + ["--out", "q", "-q"])
sys.stdout.write("@@loud@@\\n"); sys.stdout.flush(); sys.stderr.write("@@loud@@\\n")
del sys.modules["logs_on_import"]
main(sys.argv[1:] + ["--out", "loud"])
raise SystemExit(quiet)
"""


@pytest.mark.slow  # a real interpreter importing torch
def test_quiet_run_prints_no_library_log_lines(tmp_path: Path) -> None:
    """text-cls under -q printed four lines that torchao and torch log when transformers
    imports them: -q is errors only, log records included (in a process of its own, as
    pytest captures log records itself); the same run without -q prints them."""
    (tmp_path / "logs_on_import.py").write_text(LOGS_ON_IMPORT)
    argv = [sys.executable, "-c", QUIET_THEN_LOUD, *LOGS_ON_IMPORT_RUN]
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    proc = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=scaled(120))  # fmt: skip
    out, _, _ = proc.stdout.partition("@@loud@@\n")
    err, marker, loud = proc.stderr.partition("@@loud@@\n")
    assert marker, proc.stderr[-2000:]
    assert proc.returncode == 0 and out == "" and err == "", err
    assert (tmp_path / "q" / "summary.json").is_file()
    assert "Failed to load _C_mxfp8.so" in loud


def test_quiet_run_leaves_logging_as_it_was(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In-process, a -q run whose workload logs on import gives logging back as main()
    found it (the real processes' output: the test above)."""
    import logging

    (tmp_path / "logs_on_import.py").write_text(LOGS_ON_IMPORT)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "logs_on_import", raising=False)
    code, _, _ = run_main(capsys, *LOGS_ON_IMPORT_RUN, "--out", str(tmp_path / "r"), "-q")
    assert code == 0 and logging.root.manager.disable == logging.NOTSET


def test_quiet_run_prints_no_warnings(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """-q prints errors only: torch's warning about more DataLoader workers than CPUs (or
    any other) is not printed."""
    argv = ["run", "--num-workers", "4", "--epochs", "1", "--max-steps-per-epoch", "2"]
    code, out, err = run_main(capsys, *argv, "--out", str(tmp_path / "q"), "-q")
    assert code == 0 and out == "" and err == "", err
    code, _, err = run_main(capsys, *argv, "--out", str(tmp_path / "loud"), "--no-progress")
    assert code == 0
    if len(os.sched_getaffinity(0)) < 4:  # torch warns only where 4 workers exceed the CPUs
        assert "worker" in err  # the same run, not quiet, says it


def test_each_flags_default_in_its_help_comes_from_the_config_field() -> None:
    """Help never restates a default by hand (it would drift from the config): the
    rendered help of a flag whose field has a plain default ends with it, read from the
    field, and the flag's own text does not say it again."""
    import dataclasses

    from trainscope.cli.flags import field_default, flag_help, run_flags
    from trainscope.config import RunConfig

    checked = 0
    for flag, (dest, kwargs) in run_flags().items():
        value = field_default(dest)
        if (
            value is None
            or isinstance(value, (list, tuple, dict))
            or not isinstance(value, (str, int, float, bool))
        ):
            continue
        shown = ("on" if value else "off") if isinstance(value, bool) else str(value)
        text = kwargs.get("help")
        text = text() if callable(text) else (text or "")
        assert f"default {shown}" not in text, flag
        assert flag_help(dest, kwargs).endswith(f"default {shown}" + (")" if text else "")), flag
        checked += 1
    assert checked >= 30
    # the value shown is the one a run without the flag gets
    assert dataclasses.asdict(RunConfig())["data"]["batch_size"] == field_default("data.batch_size")


def test_a_study_flags_default_in_its_help_comes_from_its_registry_entry(
    capsys, monkeypatch
) -> None:
    """A study's own flags say their default once, from the entry's ``default``: the
    help text the entry gives never restates it, and ``study NAME --help`` shows it."""
    from trainscope import registry

    monkeypatch.setenv("COLUMNS", "300")  # help wrapped at a hyphen would split "0-10"
    checked = 0
    for name, entry in registry.STUDIES.items():
        for flag in entry.flags:
            default = flag.kwargs.get("default")
            if default is None:
                continue
            text = flag.kwargs.get("help") or ""
            assert f"default {default}" not in text and f"({default})" not in text, flag.names
            checked += 1
        if any(f.kwargs.get("default") is not None for f in entry.flags):
            with pytest.raises(SystemExit):
                main(["study", name, "--help"])
            shown = " ".join(capsys.readouterr().out.split())
            first = next(f for f in entry.flags if f.kwargs.get("default") is not None)
            assert f"(default {first.kwargs['default']})" in shown or (
                f"default {first.kwargs['default']}" in shown
            ), (name, first.names)
    assert checked >= 12
