"""The same command works when the user starts it with torchrun, and --scale-lr.

``torchrun --nproc-per-node 2 -m trainscope.cli run ...`` starts two workers that each
parse the command line; without ``--out`` each would name its own timestamped run
directory, so rank 0 chooses and the others follow (tested here by leaving ``--out``
out and finding exactly one run directory).

A real launch, on purpose: the user's own ``torchrun`` and the two ``trainscope`` workers
it starts are fresh processes, with the variables torchrun gives them; this is the test of
that start (tests/forked_launch.py stands in only for trainscope's own launcher). ``slow``:
three interpreters import torch, about 10 s.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import scaled
from tests.strategies.test_parity import COMMON, assert_weights_close, run_cli, weights
from trainscope.runtime.dist import free_port


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_torchrun_started_by_the_user_with_scaled_lr(tmp_path: Path) -> None:
    single = tmp_path / "single"
    run_cli(single, "--lr", "0.2")  # what lr 0.1 x 2 ranks must amount to
    argv = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2"]
    argv += ["--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{free_port()}"]
    argv += ["-m", "trainscope.cli", *COMMON, "--strategy", "allreduce", "--scale-lr"]
    work = tmp_path / "work"
    work.mkdir()
    proc = subprocess.run(argv, cwd=work, capture_output=True, text=True, timeout=scaled(240))
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = list((work / "runs").iterdir())
    assert len(runs) == 1, runs  # rank 0's directory, shared by rank 1
    summary = json.loads((runs[0] / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["world_size"] == 2
    assert (runs[0] / "ranks" / "rank1" / "metrics.jsonl").is_file()
    # --scale-lr: lr x world size (the linear scaling rule): one process at lr 0.2.
    assert summary["lr"] == pytest.approx(0.2)
    assert_weights_close(weights(runs[0]), weights(single))
