"""Both transformer workloads under every strategy that applies and under fp32 and bf16.

The issue's "Must show": gpt-char and text-cls run under ``single`` and, with 2 CPU
processes on gloo, under ``ddp`` and ``fsdp``; and under fp32 and bf16. Short runs of the
tiny sizes on data the test writes (nothing downloaded). gpt-char's tiny preset has no
dropout, so its distributed runs must also reproduce the one-process losses; BERT's
dropout draws different masks on each rank, so text-cls is checked for completing with
finite losses and the LoRA parameter counts, not for equal numbers.

The 2-process runs fork their ranks from the test process (tests/forked_launch.py): what
they train is tested, not how torchrun starts them.
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from typing import Any

import pytest

from tests.forked_launch import forked_launches
from trainscope.cli import main

# One forked launch of a few seconds per test (scaled by conftest).
LAUNCH_TIMEOUT = 120
COMMON = ["--epochs", "1", "--max-steps-per-epoch", "3", "--batch-size", "8", "--log-every", "1"]
COMMON += ["--device", "cpu", "--optimizer", "adamw", "--lr", "0.001", "--seed", "0"]
COMMON += ["--set", "dist.timeout_s=60", "-q", "--no-progress"]
# Losses of a 2-rank run vs one process: the same 8 windows, means summed in another order.
LOSS_ATOL = 1e-5


def run(out: Path, *args: str) -> dict[str, Any]:
    """``trainscope run`` in-process (for --nproc 2 its ranks forked from this process:
    tests/forked_launch.py); the summary."""
    with forked_launches():
        code = main(["run", *args, *COMMON, "--out", str(out)])
    summary = json.loads((out / "summary.json").read_text())
    assert code == 0 and summary["status"] == "completed", summary.get("error")
    return summary


def losses(out: Path) -> list[float]:
    """The global per-step losses of a run."""
    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [e["loss"] for e in lines if e.get("event") == "step"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small text corpus in gpt-char's layout (``input.txt``)."""
    rng = random.Random(0)
    words = ["to", "be", "or", "not", "the", "king", "queen", "my", "lord", "and", "thou"]
    lines = [" ".join(rng.choices(words, k=8)).capitalize() + "." for _ in range(2000)]
    folder = tmp_path_factory.mktemp("corpus")
    (folder / "input.txt").write_text("\n".join(lines) + "\n")
    return folder


def gpt_args(corpus: Path) -> list[str]:
    return ["--workload", "gpt-char", "--data-dir", str(corpus), "--preset", "tiny"]


@pytest.fixture(scope="module")
def gpt_single(corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("gpt") / "single"
    run(out, *gpt_args(corpus))
    return out


@pytest.mark.slow
@pytest.mark.timeout(LAUNCH_TIMEOUT)
@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_gpt_char_under_ddp_and_fsdp_matches_one_process(
    strategy: str, corpus: Path, gpt_single: Path, tmp_path: Path
) -> None:
    summary = run(tmp_path / strategy, *gpt_args(corpus), "--strategy", strategy, "--nproc", "2")
    assert summary["world_size"] == 2 and summary["strategy"] == strategy
    assert summary["tokens_per_s"] > 0 and summary["mfu"] is None  # no peak for a CPU
    assert losses(tmp_path / strategy) == pytest.approx(losses(gpt_single), abs=LOSS_ATOL)
    assert (tmp_path / strategy / "model.safetensors").is_file()


@pytest.mark.slow
@pytest.mark.timeout(LAUNCH_TIMEOUT)
@pytest.mark.parametrize("nproc", ["1", "2"])
def test_gpt_char_bf16(nproc: str, corpus: Path, gpt_single: Path, tmp_path: Path) -> None:
    strategy = "single" if nproc == "1" else "ddp"
    args = [*gpt_args(corpus), "--precision", "bf16", "--strategy", strategy, "--nproc", nproc]
    summary = run(tmp_path / "bf16", *args)
    assert summary["precision"] == "bf16"
    got, ref = losses(tmp_path / "bf16"), losses(gpt_single)
    assert all(math.isfinite(x) for x in got)
    # bf16 keeps 8 bits of mantissa: close to fp32, not equal to it.
    assert got == pytest.approx(ref, rel=0.05) and got != ref


@pytest.fixture(scope="module")
def sst2(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("transformers")
    pytest.importorskip("peft")
    from tests.data.test_glue import write_sst2

    return write_sst2(tmp_path_factory.mktemp("sst2"), n_train=96, n_dev=32)


TEXT = [
    "--workload",
    "text-cls",
    "--model-size",
    "tiny",
    "--set",
    "workload.options.vocab_size=300",
]


@pytest.mark.slow
@pytest.mark.timeout(LAUNCH_TIMEOUT)
@pytest.mark.parametrize(
    ("strategy", "nproc", "precision", "lora"),
    [
        ("single", "1", "fp32", "0"),
        ("single", "1", "bf16", "4"),
        ("ddp", "2", "fp32", "4"),
        ("fsdp", "2", "bf16", "0"),
    ],
)
def test_text_cls_under_strategies_and_precisions(
    strategy: str, nproc: str, precision: str, lora: str, sst2: Path, tmp_path: Path
) -> None:
    args = [*TEXT, "--data-dir", str(sst2), "--strategy", strategy, "--nproc", nproc]
    summary = run(tmp_path / "run", *args, "--precision", precision, "--lora-r", lora)
    assert summary["world_size"] == int(nproc) and summary["precision"] == precision
    assert len(summary["first_losses"]) == 3
    assert all(math.isfinite(x) for x in losses(tmp_path / "run"))
    assert 0.0 <= summary["epochs"][-1]["val_accuracy"] <= 1.0
    info = summary["workload_info"]
    if lora != "0":
        assert info["trainable_parameters"] < info["total_parameters"] / 10
    else:
        assert info["trainable_parameters"] == info["total_parameters"]
