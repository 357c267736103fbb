"""The CUDA paths of the strategies and the GPT workload (skipped without a GPU).

On one GPU: DDP in a world of one over nccl (CUDA-event stage timing, no host comm hook),
DataParallel over the visible GPUs, and gpt-char's tiny preset in bf16 with its
tokens/s and MFU (the GPU's peak comes from the table in profiling/peak.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from trainscope.cli import main

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

RUN = ["run", "--workload", "synthetic", "--synthetic-samples", "512", "--epochs", "1"]
RUN += ["--batch-size", "64", "--device", "cuda", "-q", "--no-progress"]


def summary_of(out: Path) -> dict:
    return json.loads((out / "summary.json").read_text())


@pytest.mark.timeout(300)
@pytest.mark.parametrize("strategy", ["ddp", "dp"])
def test_one_process_strategies_on_cuda(strategy: str, tmp_path: Path) -> None:
    assert main([*RUN, "--strategy", strategy, "--out", str(tmp_path / strategy)]) == 0
    s = summary_of(tmp_path / strategy)
    assert s["status"] == "completed" and s["timing_mode"] == "cuda_events"
    assert s["peak_memory_kind"] == "cuda_max_allocated"
    if strategy == "ddp":
        assert s["parallel"]["backend"] == "nccl" and s["comm"] is None  # no host hook
    else:
        assert s["parallel"]["replicas"] == torch.cuda.device_count()


@pytest.mark.timeout(300)
def test_gpt_char_bf16_reports_tokens_and_mfu(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "input.txt").write_text("to be or not to be, that is the question\n" * 500)
    args = ["run", "--workload", "gpt-char", "--data-dir", str(tmp_path / "data")]
    args += ["--preset", "tiny", "--epochs", "1", "--max-steps-per-epoch", "20", "-q"]
    args += ["--device", "cuda", "--precision", "bf16", "--out", str(tmp_path / "gpt")]
    assert main(args) == 0
    s = summary_of(tmp_path / "gpt")
    assert s["tokens_per_s"] > 0
    if s["peak_flops_per_device"] is not None:  # a GPU in the peak table
        assert 0 < s["mfu"] < 1
