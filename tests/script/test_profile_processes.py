"""``trainscope profile`` in processes of its own: several ranks of a DDP script that makes
its own process group (gloo, 127.0.0.1), and a script stopped by a signal."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import scaled
from tests.script.helpers import summary, write

DDP = """
import os, sys
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
data = TensorDataset(torch.randn(128, 8), torch.randint(0, 2, (128,)))
model = DDP(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2)))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
sampler = DistributedSampler(data)
for x, y in DataLoader(data, batch_size=8, sampler=sampler):
    opt.zero_grad()
    nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
    if rank == 1 and os.environ.get("DIE") and opt.state_dict()["param_groups"]:
        os._exit(9)  # a rank that dies without a word, after its first step
dist.destroy_process_group()
"""
LOOP = """
import time
import torch
from torch import nn
model = nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(100000):
    model(torch.randn(2, 4)).sum().backward()
    opt.step(); opt.zero_grad()
    if step == 3:
        open("started", "w").close()
    time.sleep(0.01)
"""


def trainscope() -> list[str]:
    return [sys.executable, "-c", "import sys; from trainscope.cli import main; sys.exit(main())"]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["MASTER_ADDR"] = "127.0.0.1"  # loopback only, as every distributed test here
    return env


@pytest.mark.slow
def test_two_ranks_of_a_ddp_script_each_leave_a_record(tmp_path: Path) -> None:
    write(tmp_path, "ddp.py", DDP)
    done = subprocess.run(
        [*trainscope(), "profile", "--nproc", "2", "--out", "run", "--inject", "threads=1",
         "--", "ddp.py"],
        cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=scaled(180),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    s = summary(tmp_path / "run")
    assert s["source"]["injected"] == {"threads": 1}  # passed on to every rank
    assert s["status"] == "completed" and s["world_size"] == 2
    assert s["strategy"] == "ddp"
    assert s["steps"] == 8 and s["samples"] == 64  # this rank's share of the batches
    assert [r["rank"] for r in s["ranks"]] == [0, 1]
    assert all(r["steps"] == 8 for r in s["ranks"])
    assert set(s["stage_spread"]) >= {"forward", "backward", "optimizer"}
    other = json.loads((tmp_path / "run" / "ranks" / "rank1" / "summary.json").read_text())
    assert other["rank"] == 1 and other["status"] == "completed"
    assert other["source"]["injected"] == {"threads": 1}
    assert "Where the wall time went" in done.stderr  # rank 0's tables, shown once


@pytest.mark.slow
def test_a_dead_rank_leaves_records_that_say_what_ended_the_launch(tmp_path: Path) -> None:
    write(tmp_path, "ddp.py", DDP)
    done = subprocess.run(
        [*trainscope(), "profile", "--nproc", "2", "--out", "run", "--", "ddp.py"],
        cwd=tmp_path, env={**_env(), "DIE": "1"}, capture_output=True, text=True,
        timeout=scaled(240),
    )  # fmt: skip
    assert done.returncode != 0
    assert "rank 1 exited with code 9" in done.stderr.strip().splitlines()[-1]
    for path in (tmp_path / "run", tmp_path / "run" / "ranks" / "rank1"):
        s = summary(path)
        assert s["status"] == "failed" and "rank 1 exited with code 9" in s["error"]


@pytest.mark.slow
def test_torchrun_started_by_the_user_runs_the_profile_in_every_rank(tmp_path: Path) -> None:
    write(tmp_path, "ddp.py", DDP)
    exe = shutil.which("trainscope", path=str(Path(sys.executable).parent))
    assert exe is not None
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2",
                "--rdzv-backend=c10d", "--rdzv-endpoint=127.0.0.1:0", "--no-python"]  # fmt: skip
    done = subprocess.run(
        [*torchrun, exe, "profile", "-q", "--out", "run", "--", "ddp.py"],
        cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=scaled(180),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    s = summary(tmp_path / "run")
    assert s["status"] == "completed" and len(s["ranks"]) == 2


@pytest.mark.slow
@pytest.mark.parametrize("sig, code, said", [(signal.SIGTERM, 143, "terminated by SIGTERM"),
                                             (signal.SIGINT, 130, "interrupted")])  # fmt: skip
def test_a_signal_ends_the_script_with_a_record_that_says_so(
    tmp_path: Path, sig: int, code: int, said: str
) -> None:
    write(tmp_path, "loop.py", LOOP)
    proc = subprocess.Popen(
        [*trainscope(), "profile", "--out", "run", "--", "loop.py"],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + scaled(60)
    while not (tmp_path / "started").exists():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.05)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=scaled(60))
    assert proc.returncode == code, err
    lines = [line for line in err.splitlines() if line.startswith("trainscope:")]
    assert said in lines[-1], err
    s = summary(tmp_path / "run")
    assert s["status"] == "failed" and s["steps"] >= 4
    assert ("SIGTERM" if sig == signal.SIGTERM else "Ctrl-C") in s["error"]
