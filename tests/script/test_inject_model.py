"""``--inject``'s model, optimizer and process keys on scripts the tests write: each
applied (the script itself prints what it saw), recorded, put back after the run, and
refused in one line where it cannot apply."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.script.helpers import printed, profile, summary, write
from trainscope.cli import main
from trainscope.script.profile import profile as profile_block

# A model whose blocks sit in a ModuleList named `layers` (not `blocks`), each counting
# its forward calls; the loss is computed outside the model, as most scripts do; after
# training, one evaluation forward under no_grad.
BLOCKS = """
import torch
from torch import nn
CALLS = [0]
class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
    def forward(self, x):
        CALLS[0] += 1
        return torch.relu(self.fc(x)) + x
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(Block() for _ in range(3))
        self.head = nn.Linear(8, 2)
    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return self.head(x)
torch.manual_seed(0)
model = Net()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
for step in range(4):
    x, y = torch.randn(16, 8), torch.randint(0, 2, (16,))
    out = model(x)
    loss = nn.functional.cross_entropy(out, y)
    print("train", out.dtype, loss.dtype, torch.is_autocast_enabled("cpu"))
    loss.backward()
    opt.step()
    opt.zero_grad()
print("after", torch.is_autocast_enabled("cpu"))
model.eval()
with torch.no_grad():
    print("eval", model(torch.randn(4, 8)).dtype)
print("calls", CALLS[0])
print("fused", opt.defaults["fused"], opt.defaults["foreach"])
print("matmul", torch.get_float32_matmul_precision())
print("cudnn", torch.backends.cudnn.benchmark)
"""


def test_bf16_autocasts_the_training_forward_and_the_loss_not_the_evaluation(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = write(here, "blocks.py", BLOCKS)
    assert profile("-q", "--out", "run", "--inject", "precision=bf16", "--", str(script)) == 0
    out = capsys.readouterr().out
    # the model's output in bf16; the loss computed outside the model under autocast too
    # (cross_entropy autocasts to fp32, as in a script's own `with torch.autocast`)
    assert printed(out, "train") == [["torch.bfloat16", "torch.float32", "True"]] * 4
    assert printed(out, "after") == [["False"]]  # left before backward, not leaked
    assert printed(out, "eval") == [["torch.float32"]]
    s = summary(here / "run")
    assert s["status"] == "completed" and s["steps"] == 4
    assert s["precision"] == "fp32 + autocast bf16"
    assert s["source"]["injected_numerics"] == ["precision"]
    assert s["script"]["injected_model"]["autocast_forwards"] == 4
    assert not torch.is_autocast_enabled("cpu")
    assert main(["report", "-q", str(here / "run")]) == 0
    md = (here / "run" / "report" / "report.md").read_text()
    assert "precision=bf16 (changes numerics)" in md


def test_a_script_that_autocasts_already_is_left_as_it_is(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    own = "    with torch.autocast('cpu', dtype=torch.bfloat16):\n        out = model(x)\n"
    body = BLOCKS.replace("    out = model(x)\n", own)
    script = write(here, "own_amp.py", body)
    assert profile("-q", "--out", "run", "--inject", "precision=bf16", "--", str(script)) == 0
    out = capsys.readouterr().out
    assert printed(out, "train")[0][0] == "torch.bfloat16"
    s = summary(here / "run")
    assert s["script"]["injected_model"]["script_autocast"] == "bfloat16"
    assert any("already runs its forward under autocast" in n for n in s["notes"])


def test_fp16_is_refused_with_the_reason_before_anything_runs(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = write(here, "blocks.py", BLOCKS)
    assert profile("--out", "run", "--inject", "precision=fp16", "--", str(script)) == 2
    err = capsys.readouterr().err
    assert "fp16 needs a GradScaler" in err and len(err.strip().splitlines()) == 1
    assert not (here / "run").exists()


def test_optimizer_impl_builds_each_torch_optimizer_with_it_and_says_which_cannot(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    body = BLOCKS + (
        "class Mine(torch.optim.SGD):\n"
        "    def __init__(self, params):\n"
        "        super().__init__(params, lr=0.1, foreach=False)\n"
        "mine = Mine(model.parameters())\n"
        "print('mine', mine.defaults['fused'], mine.defaults['foreach'])\n"
        "torch.optim.LBFGS(model.parameters())\n"
    )
    script = write(here, "opt.py", body)
    assert profile("-q", "--out", "run", "--inject", "optimizer_impl=fused", "--", str(script)) == 0
    out = capsys.readouterr().out
    assert printed(out, "fused") == [["True", "None"]]
    assert printed(out, "mine") == [["True", "None"]]  # its own foreach=False overridden
    s = summary(here / "run")
    rows = s["script"]["injected_optimizers"]
    assert [r["class"] for r in rows] == ["AdamW", "Mine"]
    assert rows[1]["had"] == {"foreach": False, "fused": None}
    assert rows[1]["now"] == {"foreach": False, "fused": True}
    assert any("left off LBFGS" in n for n in s["notes"])
    assert s["source"]["injected_numerics"] == []
    # put back: an optimizer built after the run is torch's own again
    assert torch.optim.AdamW([torch.zeros(1, requires_grad=True)]).defaults["fused"] is None


def test_process_keys_are_set_for_the_run_and_put_back(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = torch.get_float32_matmul_precision(), torch.backends.cudnn.benchmark
    script = write(here, "blocks.py", BLOCKS)
    args = ["--inject", "matmul_precision=medium", "--inject", "cudnn_benchmark=true"]
    assert profile("-q", "--out", "run", *args, "--", str(script)) == 0
    out = capsys.readouterr().out
    assert printed(out, "matmul") == [["medium"]] and printed(out, "cudnn") == [["True"]]
    assert (torch.get_float32_matmul_precision(), torch.backends.cudnn.benchmark) == before
    s = summary(here / "run")
    assert s["source"]["injected_numerics"] == ["matmul_precision"]
    assert any("cudnn_benchmark: no effect" in n for n in s["notes"])


def test_checkpointing_finds_a_models_blocks_and_recomputes_them(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = write(here, "blocks.py", BLOCKS)
    assert profile("-q", "--out", "plain", "--", str(script)) == 0
    plain = int(printed(capsys.readouterr().out, "calls")[0][0])
    assert plain == 4 * 3 + 3  # 4 steps of 3 blocks, and the evaluation's 3
    args = ["--inject", "activation_checkpointing=full"]
    assert profile("-q", "--out", "run", *args, "--", str(script)) == 0
    calls = int(printed(capsys.readouterr().out, "calls")[0][0])
    assert calls == 2 * 4 * 3 + 3  # backward ran each block's forward again
    s = summary(here / "run")
    assert s["script"]["injected_model"]["checkpointed_blocks"] == 3
    assert s["script"]["injected_model"]["blocks_at"] == "layers"


def test_checkpointing_a_model_without_blocks_ends_the_run_refused(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    body = BLOCKS.replace("range(3)", "range(1)")  # one block: nothing repeated
    script = write(here, "one.py", body)
    args = ["--inject", "activation_checkpointing=full"]
    assert profile("--out", "run", *args, "--", str(script)) == 2
    err = capsys.readouterr().err
    assert "Net has no repeated blocks to checkpoint" in err
    s = summary(here / "run")
    assert s["status"] == "failed" and "no repeated blocks" in s["error"]


def test_compile_compiles_the_model_in_place_and_puts_it_back(here: Path) -> None:
    class Net(torch.nn.Module):  # a script's own model (dynamo skips torch's containers)
        def __init__(self) -> None:
            super().__init__()
            self.fc = torch.nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc(x).relu()

    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    seen = []
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    with profile_block(str(here / "run"), inject={"compile": "aot_eager"}) as session:
        for _ in range(3):
            loss = model(torch.randn(8, 4)).sum()
            seen.append(model._compiled_call_impl is not None)
            loss.backward()
            opt.step()
            opt.zero_grad()
    assert seen == [True, True, True]  # compiled at the first forward, used from the second
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] >= 1  # dynamo traced it
    assert model._compiled_call_impl is None  # put back
    s = session.summary  # type: ignore[attr-defined]
    assert s["script"]["injected_model"]["compiled"] == "aot_eager"
    assert s["steps"] == 3


def test_an_unknown_compile_backend_is_refused_in_one_line(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = write(here, "blocks.py", BLOCKS)
    assert profile("--out", "run", "--inject", "compile=nonesuch", "--", str(script)) == 2
    err = capsys.readouterr().err
    assert "compile=nonesuch: no such backend" in err and len(err.strip().splitlines()) == 1
    assert not (here / "run").exists()
