"""examples/profile: the scripts docs/profile.md measures run as plain scripts and under
``trainscope profile``, and each record says what the script did: completed, the
optimizer steps it took, every stage present, evaluation and saves where they happened.

plain_dataloader.py and grad_accum.py run in this process (``main(["profile", ...])``,
as tests/script does) for 5 steps: a second or two each. Started as a user starts them
(``python X.py``), each pays an interpreter and torch start-up: ``slow``. The Lightning
and Hugging Face scripts run only where their library is installed, in a process of
their own (each library sets global state: seeds, loggers, warnings), and are ``slow``.
Nothing asserts a timing: only which stages are non-zero.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO_ROOT, requires, scaled, shared_mnist_dir
from tests.script.helpers import profile, steps, summary

pytestmark = pytest.mark.timeout(180)

EXAMPLES = REPO_ROOT / "examples" / "profile"
STAGES = {"setup", "data_wait", "forward", "backward", "optimizer", "checkpoint",
          "evaluation", "other"}  # fmt: skip
SMALL_CNN_PARAMETERS = (1 * 16 * 9 + 16) + (16 * 32 * 9 + 32) + (32 * 4 * 4 * 10 + 10)


def trainscope_command() -> list[str]:
    """``trainscope`` as this interpreter runs it (the venv's, whatever PATH says)."""
    return [sys.executable, "-c", "import sys; from trainscope.cli import main; sys.exit(main())"]


def run(args: list[str], cwd: Path, timeout_s: float) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=scaled(timeout_s))  # fmt: skip


def assert_completed(s: dict[str, Any], n: int) -> None:
    """A completed record of ``n`` optimizer steps with every stage in its table."""
    assert s["status"] == "completed", s.get("error")
    assert s["steps"] == n and s["source"]["kind"] == "script"
    assert set(s["stages_s"]) == STAGES
    assert all(s["stages_s"][k] > 0 for k in ("setup", "forward", "backward", "optimizer"))
    assert sum(s["stages_s"].values()) == pytest.approx(s["wall_time_s"])


# --- in this process, 5 steps ----------------------------------------------------------


@pytest.mark.parametrize("data", ["mnist", "digits"])
def test_plain_dataloader_under_profile(
    data: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # digits: a folder without MNIST's files, so the script falls back to sklearn's digits
    folder = shared_mnist_dir() if data == "mnist" else tmp_path / "empty"
    monkeypatch.chdir(tmp_path)
    script = str(EXAMPLES / "plain_dataloader.py")
    assert profile("-q", "--steps", "5", "--out", "run", "--", script, "--data", str(folder)) == 0
    s = summary(tmp_path / "run")
    assert_completed(s, 5)
    assert s["stages_s"]["data_wait"] > 0  # its batches come from a DataLoader
    assert s["loader"] == "torch" and s["model"] == "SmallCNN"
    assert s["script"]["optimizer_steps"] == {"0: Adam": 5}
    assert s["memory"]["parameters_bytes"] == 4 * SMALL_CNN_PARAMETERS
    records = steps(tmp_path / "run")
    assert [r["step"] for r in records] == [1, 2, 3, 4, 5]
    assert all(r["micro_batches"] == 1 and r["batch_size"] == 64 for r in records)


def test_grad_accum_under_profile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    script = str(EXAMPLES / "grad_accum.py")
    args = ["--accum", "3", "--eval-every", "2", "--out", "ckpt"]
    assert profile("-q", "--steps", "5", "--out", "run", "--", script, *args) == 0
    s = summary(tmp_path / "run")
    assert_completed(s, 5)
    # Evaluations after steps 2 and 4, the first (at least) saved with torch.save.
    assert s["stages_s"]["evaluation"] > 0 and s["stages_s"]["checkpoint"] > 0
    assert (tmp_path / "ckpt" / "best.pt").is_file()
    assert s["script"]["optimizer_steps"] == {"0: AdamW": 5}
    records = steps(tmp_path / "run")
    # steps are optimizer steps: each sums --accum micro-batches of 16
    assert all(r["micro_batches"] == 3 and r["batch_size"] == 48 for r in records)
    assert any("evaluation" in r["between"] for r in records)
    assert [o["training"] for o in s["script"]["loaders"]] == [True, False]


# --- as a user runs them ---------------------------------------------------------------


@pytest.mark.slow  # starts an interpreter and torch
def test_plain_dataloader_runs_as_a_plain_script(tmp_path: Path) -> None:
    done = run([sys.executable, str(EXAMPLES / "plain_dataloader.py"), "--data", str(tmp_path)],
               tmp_path, 90)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "sklearn" in done.stdout or "digits" in done.stdout
    assert re.search(r"held-out accuracy 0\.\d+", done.stdout)


@pytest.mark.slow  # starts an interpreter and torch, twice
def test_grad_accum_runs_as_a_plain_script_and_profile_changes_nothing(tmp_path: Path) -> None:
    args = ["--steps", "20", "--eval-every", "10", "--out", "ckpt"]
    done = run([sys.executable, str(EXAMPLES / "grad_accum.py"), *args], tmp_path, 90)
    assert done.returncode == 0, done.stderr
    assert "step 10:" in done.stdout and "step 20:" in done.stdout
    assert {p.name for p in (tmp_path / "ckpt").iterdir()} == {"best.pt", "last.pt"}
    # The same script under trainscope profile computes the same losses, digit for digit.
    profiled = run([*trainscope_command(), "profile", "-q", "--out", "run", "--",
                    str(EXAMPLES / "grad_accum.py"), *args], tmp_path, 90)  # fmt: skip
    assert profiled.returncode == 0, profiled.stderr

    def losses(out: str) -> list[str]:
        return [ln for ln in out.splitlines() if ln.startswith("step ")]

    assert losses(profiled.stdout) == losses(done.stdout) and losses(done.stdout)


# --- the libraries' own loops (only where installed) -----------------------------------


def library_steps(stdout: str) -> int:
    """The optimizer steps the library says it took (the script's last line)."""
    found = re.search(r"optimizer steps \([\w.]+\): (\d+)", stdout)
    assert found, stdout[-2000:]
    return int(found.group(1))


@pytest.mark.slow  # starts Lightning in a process of its own
@requires("lightning")
def test_lightning_fit_under_profile(tmp_path: Path) -> None:
    script = str(EXAMPLES / "lightning_fit.py")
    done = run([*trainscope_command(), "profile", "-q", "--out", "run", "--", script,
                "--epochs", "2", "--out", "lightning"], tmp_path, 150)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    s = summary(tmp_path / "run")
    assert_completed(s, library_steps(done.stdout))  # trainer.global_step
    # forward and backward run inside optimizer.step(closure): timed apart from it
    assert s["stages_s"]["evaluation"] > 0  # the sanity check and each epoch's validation
    assert s["stages_s"]["checkpoint"] > 0  # ModelCheckpoint's torch.save, once per epoch
    assert s["stages_s"]["data_wait"] > 0
    assert s["script"]["models"] == ["DigitsClassifier"]


@pytest.mark.slow  # starts transformers in a process of its own
@requires("transformers", "accelerate")
def test_hf_trainer_under_profile(tmp_path: Path, shared_data: Path) -> None:
    if not (shared_data / "minilm-l6" / "model.safetensors").is_file():
        pytest.skip("shared minilm-l6 not present")
    script = str(EXAMPLES / "hf_trainer.py")
    args = ["--steps", "4", "--eval-every", "2", "--batch-size", "8", "--eval-rows", "16",
            "--model", str(shared_data / "minilm-l6"), "--data", str(shared_data / "sst2"),
            "--out", "hf"]  # fmt: skip
    done = run([*trainscope_command(), "profile", "-q", "--out", "run", "--", script, *args],
               tmp_path, 170)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    s = summary(tmp_path / "run")
    assert_completed(s, library_steps(done.stdout))  # trainer.state.global_step
    assert library_steps(done.stdout) == 4
    assert s["stages_s"]["evaluation"] > 0  # evaluate() every 2 steps
    assert s["stages_s"]["checkpoint"] > 0  # save_strategy="steps": safetensors, torch.save
    assert s["model"] == "BertForSequenceClassification"
    assert s["samples"] == 4 * 8  # its batches are BatchEncoding mappings
    # accelerate's loader holds its batch size in its batch sampler
    assert s["script"]["loaders"][0] == {"num_workers": 0, "batch_size": 8,
                                         "pin_memory": False, "training": True}  # fmt: skip
