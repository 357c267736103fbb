"""examples/dp_ddp: the single-process, DataParallel and DistributedDataParallel scripts run
as a user runs them (``python examples/dp_ddp/X.py``), write a strict JSON record, train
to the same weights, and stay so alike that their diffs show only the parallel changes.

Tiny runs (6 steps of 32 samples) on the CPU: ddp.py starts its 2 gloo ranks itself.
Every script run is a real process, started as a user starts it: each pays an
interpreter and torch start-up, so those tests are ``slow``. Each script runs once per
module for every test that reads its record (ddp.py once more, as torchrun starts a rank,
and once refusing its batch); the diffs are read from the files (quick tier).
"""

from __future__ import annotations

import ast
import difflib
import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from tests.conftest import REPO_ROOT, scaled

pytestmark = pytest.mark.timeout(120)

SCRIPTS = REPO_ROOT / "examples" / "dp_ddp"
TINY = ["--steps", "6", "--warmup", "1", "--batch-size", "32"]
# The environment of a launched rank: a test runner under torchrun must not leak into it.
LAUNCHER_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
KEYS = {"script", "world_size", "device", "torch", "threads_per_process", "global_batch",
        "steps", "warmup", "step_times_s", "loss_first", "loss_last", "weights_sha256",
        "weights_l2"}  # fmt: skip


def run_script(
    name: str, cwd: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k not in LAUNCHER_ENV}
    return subprocess.run(
        [sys.executable, str(SCRIPTS / f"{name}.py"), *args],
        cwd=cwd, env={**base, "OMP_NUM_THREADS": "1", **(env or {})},
        capture_output=True, text=True, timeout=scaled(90),
    )  # fmt: skip


def strict_json(path: Path) -> dict[str, Any]:
    def refuse(constant: str) -> None:
        raise ValueError(f"{path.name}: {constant} is not JSON")

    return json.loads(path.read_text(), parse_constant=refuse)


def train(name: str, out: Path, *args: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    """A tiny run of one script; its JSON record, with its final weights under "weights"."""
    out.mkdir(parents=True, exist_ok=True)
    done = run_script(name, out, *TINY, "--json", "run.json", "--dump-weights", "w.f32", *args,
                      env=env)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"{name}: ") and len(done.stdout.splitlines()) == 1
    assert sorted(p.name for p in out.iterdir()) == ["run.json", "w.f32"]  # no .tmp left
    record = strict_json(out / "run.json")
    record["weights"] = np.fromfile(out / "w.f32", dtype=np.float32)
    return record


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    root = tmp_path_factory.mktemp("dp_ddp")
    one = ["--threads", "1"]
    return {name: train(name, root / name, *one) for name in ("single", "dp", "ddp")}


@pytest.mark.slow  # starts the scripts
@pytest.mark.parametrize("name", ["single", "dp", "ddp"])
def test_each_script_writes_its_record(name: str, runs: dict[str, dict[str, Any]]) -> None:
    record = runs[name]
    assert set(record) - {"note", "weights"} == KEYS
    assert record["script"] == name and record["world_size"] == (2 if name == "ddp" else 1)
    assert record["device"] == ("cuda" if torch.cuda.is_available() else "cpu")
    assert record["torch"] == torch.__version__ and record["threads_per_process"] == 1
    assert (record["global_batch"], record["steps"], record["warmup"]) == (32, 6, 1)
    times = record["step_times_s"]
    assert len(times) == 5 and all(isinstance(t, float) and 0 < t < 60 for t in times)
    assert 0 < record["loss_last"] < record["loss_first"] < 3  # ln(10) = 2.30 at the start
    assert record["weights"].size == 64 * 256 + 256 + 256 * 256 + 256 + 256 * 10 + 10
    assert record["weights_l2"] == pytest.approx(float(np.linalg.norm(record["weights"])))


@pytest.mark.slow  # starts the scripts
def test_dataparallel_without_a_gpu_says_it_ran_the_module_unreplicated(
    runs: dict[str, dict[str, Any]],
) -> None:
    if torch.cuda.is_available():
        pytest.skip("a GPU is visible: DataParallel runs on it")
    assert "unreplicated" in runs["dp"]["note"] and "note" not in runs["single"]
    # nn.DataParallel without a GPU is a plain call of the module: the very same arithmetic.
    assert runs["dp"]["weights_sha256"] == runs["single"]["weights_sha256"]
    np.testing.assert_array_equal(runs["dp"]["weights"], runs["single"]["weights"])


def assert_same_training(a: dict[str, Any], b: dict[str, Any]) -> None:
    """Equal within float tolerance: the ranks' gradients are summed in another order."""
    wa, wb = a["weights"], b["weights"]
    assert np.linalg.norm(wa - wb) <= 1e-5 * np.linalg.norm(wb)
    np.testing.assert_allclose(wa, wb, rtol=1e-5, atol=1e-6)
    assert a["loss_first"] == pytest.approx(b["loss_first"], rel=1e-5)
    assert a["loss_last"] == pytest.approx(b["loss_last"], rel=1e-5)


@pytest.mark.slow  # starts the scripts
def test_ddp_on_two_ranks_trains_to_the_single_process_weights(
    runs: dict[str, dict[str, Any]],
) -> None:
    # Each rank's loss is the mean over its half and DDP averages the gradients: the mean
    # over the global batch, as single.py computes it, so the same SGD steps.
    assert_same_training(runs["ddp"], runs["single"])


@pytest.mark.slow  # starts the scripts
def test_ddp_under_torchrun_is_one_rank_and_spawns_nothing(
    tmp_path: Path, runs: dict[str, dict[str, Any]]
) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": str(port)}  # fmt: skip
    record = train("ddp", tmp_path, "--nproc", "2", env=env)  # --nproc: torchrun's call
    assert record["world_size"] == 1
    assert_same_training(record, runs["single"])


@pytest.mark.slow  # starts the scripts
def test_a_global_batch_the_ranks_cannot_split_is_refused_in_one_line(tmp_path: Path) -> None:
    done = run_script("ddp", tmp_path, "--batch-size", "33", "--nproc", "2")
    assert done.returncode != 0 and done.stdout == ""
    assert done.stderr.strip() == "ddp.py: error: --batch-size must split over 2 processes"
    assert list(tmp_path.iterdir()) == []


def functions(source: str) -> dict[str, str]:
    tree = ast.parse(source)
    return {n.name: ast.get_source_segment(source, n) for n in tree.body
            if isinstance(n, ast.FunctionDef)}  # fmt: skip


# Changed lines (+ and -) of each diff against single.py, as written: 16 for dp.py (10 of
# them its docstring) and 47 for ddp.py. A bound a little above: the scripts stay alike.
MAX_CHANGED = {"dp": 20, "ddp": 52}


@pytest.mark.parametrize("name", ["dp", "ddp"])
def test_the_diff_from_single_shows_only_the_parallel_change(name: str) -> None:
    single = (SCRIPTS / "single.py").read_text()
    other = (SCRIPTS / f"{name}.py").read_text()
    diff = list(difflib.unified_diff(single.splitlines(), other.splitlines(), lineterm=""))
    changed = [
        line for line in diff[2:] if line[:1] in "+-" and not line.startswith(("+++", "---"))
    ]
    assert 0 < len(changed) <= MAX_CHANGED[name], "\n".join(diff)
    # The shared parts are the same text: the data, the clock and the report.
    for fn in ("make_batch", "clock", "report"):
        assert functions(other)[fn] == functions(single)[fn], fn
    for script in (single, other):
        assert len(script.splitlines()) <= 125
        assert "trainscope" not in script and "pickle" not in script
