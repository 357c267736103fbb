"""trainscope's Lightning profiler + callback and Hugging Face TrainerCallback: each
example run once under ``trainscope profile`` and once with the integration, and the two
records hold the same exact figures (steps, samples, every logged loss, the counted
tensor bytes) and the same stages. Timings are compared in docs/profile.md (a benchmark
with its spread), never here.

Each library runs in a process of its own (it sets global state: seeds, loggers), so
these are ``slow``; a small in-process Lightning fit checks the rest (no global hook
left behind, a failed fit recorded as failed, the callback alone does nothing).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import requires
from tests.examples.test_profile_examples import EXAMPLES, library_steps, run, trainscope_command
from tests.script.helpers import summary

pytestmark = pytest.mark.timeout(300)


def losses(run_dir: Path) -> list[float]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [r["loss"] for r in map(json.loads, lines) if r.get("event") == "step"]


def assert_same_figures(integration: dict[str, Any], profiled: dict[str, Any]) -> None:
    """Exact figures both ways of measuring must agree on (timings aside)."""
    for key in ("steps", "samples", "model", "num_parameters", "precision", "device"):
        assert integration[key] == profiled[key], key
    assert integration["memory"]["total_bytes"] == profiled["memory"]["total_bytes"]
    assert integration["status"] == "completed"
    assert set(integration["stages_s"]) == set(profiled["stages_s"])


def both_ways(
    example: str, args: list[str], cwd: Path, timeout_s: float
) -> tuple[dict[str, Any], str]:
    """``example`` run once with its integration (the record in ``integration``) and once
    under ``trainscope profile`` (in ``profiled``), both completed and agreeing on the
    exact figures and every logged loss: the integration's record, and what the
    integration run printed."""
    script = str(EXAMPLES / example)
    done = run([sys.executable, script, *args, "--trainscope-out", "integration"], cwd, timeout_s)
    assert done.returncode == 0, done.stderr[-3000:]
    profiled = run([*trainscope_command(), "profile", "-q", "--out", "profiled", "--", script,
                    *args], cwd, timeout_s)  # fmt: skip
    assert profiled.returncode == 0, profiled.stderr[-3000:]
    a, b = summary(cwd / "integration"), summary(cwd / "profiled")
    assert_same_figures(a, b)
    assert losses(cwd / "integration") == losses(cwd / "profiled")
    return a, done.stdout


@pytest.mark.slow
@requires("lightning")
def test_the_lightning_profiler_and_callback_write_the_record_profile_writes(
    tmp_path: Path,
) -> None:
    args = ["--epochs", "2", "--out", "lightning"]
    a, printed = both_ways("lightning_fit.py", args, tmp_path, 150)
    assert a["steps"] == library_steps(printed)  # trainer.global_step
    assert a["source"]["kind"] == "lightning"
    for stage in ("data_wait", "forward", "backward", "optimizer", "evaluation", "checkpoint"):
        assert a["stages_s"][stage] > 0, stage  # each from Lightning's actions or the callback
    # read as any record is
    from trainscope.cli import main

    assert main(["report", "-q", str(tmp_path / "integration")]) == 0
    assert main(["doctor", "--json", str(tmp_path / "integration")]) == 0


@pytest.mark.slow
@requires("transformers", "accelerate")
def test_the_hf_callback_writes_the_record_profile_writes(
    tmp_path: Path, shared_data: Path
) -> None:
    if not (shared_data / "minilm-l6" / "model.safetensors").is_file():
        pytest.skip("shared minilm-l6 not present")
    args = ["--steps", "4", "--eval-every", "2", "--batch-size", "8", "--eval-rows", "16",
            "--model", str(shared_data / "minilm-l6"), "--data", str(shared_data / "sst2"),
            "--out", "hf"]  # fmt: skip
    a, printed = both_ways("hf_trainer.py", args, tmp_path, 170)
    assert a["steps"] == library_steps(printed) == 4
    assert a["source"]["kind"] == "hf" and a["samples"] == 4 * 8
    for stage in ("forward", "backward", "optimizer", "evaluation", "checkpoint"):
        assert a["stages_s"][stage] > 0, stage
    assert a["stages_s"]["data_wait"] == 0  # not told: said in the record
    assert any("data wait is in other" in n for n in a["notes"])
