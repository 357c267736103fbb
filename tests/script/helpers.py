"""Scripts the tests write, and a way to profile one in this process."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

from trainscope.cli import main

# A script whose every stage sleeps a known time: the sleeps are floors the measured
# stages must reach, and instrumentation may only add to them.
PLANTED = """
import time
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

DATA, FORWARD, BACKWARD = {data}, {forward}, {backward}
OPTIMIZER, OTHER, EVAL = {optimizer}, {other}, {eval}
STEPS = {steps}

class Slow(Dataset):
    def __len__(self):
        return 4 * STEPS
    def __getitem__(self, i):
        time.sleep(DATA / 4)  # a batch of 4: DATA per batch
        return torch.randn(6), torch.tensor(i % 2)

class SlowBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.clone()
    @staticmethod
    def backward(ctx, g):
        time.sleep(BACKWARD)
        return g

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 2)
    def forward(self, x):
        time.sleep(EVAL if not self.training else FORWARD)
        return SlowBackward.apply(self.fc(x))

class SlowSGD(torch.optim.SGD):
    def step(self, closure=None):
        time.sleep(OPTIMIZER)
        return super().step(closure)

# An SGD built first: torch then wraps SGD.step in its hooks too, so SlowSGD's
# super().step() is a step inside a step, whatever ran in this process before (in the
# suite's workers it had, and steps were counted twice, other went into optimizer).
torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)

model = Net()
opt = SlowSGD(model.parameters(), lr=0.1)
loader = DataLoader(Slow(), batch_size=4)
for i, (x, y) in enumerate(loader):
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad()
    time.sleep(OTHER)  # the script's own code between steps
    if (i + 1) % 4 == 0:
        model.eval()
        with torch.no_grad():
            model(torch.randn(3, 6))
        model.train()
torch.save(model.state_dict(), "weights.pt")
"""
PLANTED_S = {"data": 0.02, "forward": 0.01, "backward": 0.015, "optimizer": 0.008,
             "other": 0.012, "eval": 0.01, "steps": 8}  # fmt: skip


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(text).lstrip(), encoding="utf-8")
    return path


# A script whose loading waits (``sleep`` s an item, 8 items a batch, in the main process)
# while the model's step is tiny: input-bound until a loader setting changes. Seeded by
# its first argument, 0 without one.
SLOW_DATA = """
import sys, time, torch
from torch.utils.data import DataLoader, Dataset
class Slow(Dataset):
    def __len__(self): return 8 * {batches}
    def __getitem__(self, i):
        time.sleep({sleep})
        return torch.randn(8), torch.tensor(i % 2)
torch.manual_seed(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
model = torch.nn.Linear(8, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in DataLoader(Slow(), batch_size=8):
    torch.nn.functional.cross_entropy(model(x), y).backward()
    opt.step(); opt.zero_grad()
"""


def write_slow_data(folder: Path, name: str, *, batches: int, sleep: float) -> Path:
    """:data:`SLOW_DATA` written as ``folder/name``: ``batches`` batches of 8, each item
    ``sleep`` seconds to load."""
    return write(folder, name, SLOW_DATA.format(batches=batches, sleep=sleep))


def printed(out: str, word: str) -> list[list[str]]:
    """The words after ``word`` on each line of ``out`` that starts with it (what a
    script the tests wrote printed about itself)."""
    return [line.split()[1:] for line in out.splitlines() if line.startswith(word + " ")]


def profile(*argv: str, cwd: Path | None = None, monkeypatch: Any = None) -> int:
    """``trainscope profile ARGV`` in this process (``cwd``: the folder it runs in)."""
    if cwd is not None and monkeypatch is not None:
        monkeypatch.chdir(cwd)
    return main(["profile", *argv])


def summary(run_dir: Path) -> dict[str, Any]:
    return json.loads((run_dir / "summary.json").read_text())


def steps(run_dir: Path) -> list[dict[str, Any]]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [e for e in map(json.loads, lines) if e.get("event") == "step"]
