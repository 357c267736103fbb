"""``--optimizer muon``: which tensors Muon trains (the hidden 2-D matrices; embeddings,
the head, convolutions, biases and norms go to AdamW), one optimizer to the schedule and
the checkpoint, a resume bit-exact, the record and report saying so, and the refusals."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tests.train.fault_driver import trainscope
from trainscope.config import from_dict
from trainscope.errors import ConfigError
from trainscope.train.optimizers import MuonWithAdamW, build_muon, muon_split
from trainscope.train.schedule import make_scheduler
from trainscope.workloads.gpt import GPT, GPTConfig
from trainscope.workloads.lenet import LeNet5

pytestmark = pytest.mark.timeout(120)


def test_muon_trains_the_hidden_matrices_and_adamw_the_rest() -> None:
    muon, rest = muon_split(LeNet5())
    assert muon == ["blocks.2.1.weight", "blocks.2.3.weight"]  # fc1, fc2; fc3 is the head
    assert "blocks.2.5.weight" in rest and "blocks.0.0.weight" in rest  # head, a conv
    gpt = GPT(GPTConfig(vocab_size=65, block_size=16, n_layer=2, n_head=2, n_embd=32))
    muon, rest = muon_split(gpt)
    assert muon and all(n.startswith("blocks.") and n.endswith(".weight") for n in muon)
    assert {"tok_emb.weight", "pos_emb.weight", "ln_f.weight"} <= set(rest)
    assert "head.weight" not in muon + rest  # tied to tok_emb: listed once, as AdamW's
    assert all(gpt.get_parameter(n).dim() == 2 for n in muon)


def test_one_optimizer_to_the_schedule_and_the_checkpoint() -> None:
    torch.manual_seed(0)
    model = LeNet5()
    opt = build_muon(model, lr=1e-3, muon_lr=0.02, betas=(0.9, 0.95), weight_decay=0.1,
                     adamw_flags={})  # fmt: skip
    assert isinstance(opt, MuonWithAdamW) and isinstance(opt, torch.optim.Optimizer)
    cfg = from_dict({"train": {"schedule": "cosine", "warmup_steps": 2}}).train
    sched = make_scheduler(opt, cfg, total_steps=10)
    x, y = torch.randn(4, 1, 28, 28), torch.tensor([1, 2, 3, 4])

    def step() -> None:
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        sched.step()

    for _ in range(3):
        step()
    lrs = [g["lr"] for g in opt.param_groups]
    assert lrs[0] == opt.muon.param_groups[0]["lr"] and lrs[-1] == opt.adamw.param_groups[-1]["lr"]
    assert lrs[0] / 0.02 == pytest.approx(lrs[-1] / 1e-3)  # one schedule, each from its lr
    # Copies, as a checkpoint file is: a state_dict holds the live state tensors.
    saved, saved_sched = copy.deepcopy(opt.state_dict()), copy.deepcopy(sched.state_dict())
    weights = {k: v.clone() for k, v in model.state_dict().items()}
    rng = torch.get_rng_state()  # LeNet's dropout draws from it
    step()
    after = {k: v.clone() for k, v in model.state_dict().items()}
    # Restored as a resume restores them (optimizer, then schedule), the next step is the
    # same step, bit for bit.
    model.load_state_dict(weights)
    torch.set_rng_state(rng)
    opt = build_muon(model, lr=1e-3, muon_lr=0.02, betas=(0.9, 0.95), weight_decay=0.1,
                     adamw_flags={})  # fmt: skip
    sched = make_scheduler(opt, cfg, total_steps=10)
    opt.load_state_dict(saved)
    sched.load_state_dict(saved_sched)
    assert opt.muon.state is opt.state and opt.muon.param_groups[0] is opt.param_groups[0]
    step()
    assert all(torch.equal(model.state_dict()[k], after[k]) for k in after)


def test_refused_where_it_cannot_apply() -> None:
    with pytest.raises(ConfigError, match="no hidden 2-D weight matrix"):
        build_muon(torch.nn.Sequential(torch.nn.Linear(4, 2)), 1e-3, 0.02, (0.9, 0.999), 0.0, {})
    with pytest.raises(ConfigError, match="not with --strategy fsdp"):
        from_dict({"train": {"optimizer": "muon"}, "dist": {"strategy": "fsdp", "nproc": 2}})


def killed_and_resumed(args: list[str], tmp_path: Path, fault: str) -> tuple[Path, Path]:
    """``run *args`` uninterrupted (ref), and killed at ``fault`` then resumed (cut): each
    a process of its own, forked from this one (``fault_driver.py``)."""
    ref, cut = tmp_path / "ref", tmp_path / "cut"
    done = trainscope("run", *args, "--out", str(ref))
    assert done.returncode == 0, done.stderr
    killed = trainscope("run", *args, "--out", str(cut), fault=fault)
    assert killed.returncode != 0
    done = trainscope("run", "--resume", str(cut), "-q", "--no-progress")
    assert done.returncode == 0, done.stderr
    return ref, cut


@pytest.mark.slow
def test_a_muon_run_resumes_bit_exact_and_says_what_trained_what(tmp_path: Path) -> None:
    args = ["--optimizer", "muon", "--lr", "0.003", "--muon-lr", "0.02", "--epochs", "2",
            "--max-steps-per-epoch", "12", "--checkpoint-every", "5", "--schedule", "cosine",
            "--threads", "1", "-q", "--no-progress"]  # fmt: skip
    ref, run = killed_and_resumed(args, tmp_path, "step=13,stage=forward")
    a, b = load_file(str(run / "model.safetensors")), load_file(str(ref / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in b)
    summary = json.loads((run / "summary.json").read_text())
    muon = summary["optimizer"]["muon"]
    assert {k: muon[k] for k in ("tensors", "parameters", "lr")} == {
        "tensors": 2,
        "parameters": 17760,
        "lr": 0.02,
    }
    assert muon["newton_schulz"] in ("fp32", "bf16")  # auto: what this CPU runs faster
    assert summary["optimizer"]["adamw"]["lr"] == 0.003
    from trainscope.reports.tables import overview_table

    rows = {r[0]: r[1] for r in overview_table(summary).cells()}
    assert rows["Optimizer"].startswith("Muon on 2 tensors (17,760 parameters, lr 0.0200)")


def test_newton_schulz_in_bf16_is_torchs_own_and_in_fp32_the_same_update(monkeypatch) -> None:
    from torch.optim import _muon

    from trainscope.train import optimizers
    from trainscope.train.optimizers import MuonNS, ns_dtype, orthogonalize

    g = torch.randn(48, 24, generator=torch.Generator().manual_seed(1))
    coeffs = (3.4445, -4.7750, 2.0315)
    assert torch.equal(orthogonalize(g, coeffs, 5, 1e-7, torch.bfloat16),
                       _muon._zeropower_via_newtonschulz(g, coeffs, 5, 1e-7))  # fmt: skip

    def train(opt_of, steps: int = 3) -> list[torch.Tensor]:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(16, 32, bias=False),
                                    torch.nn.Linear(32, 8, bias=False))  # fmt: skip
        opt = opt_of(model.parameters())
        x = torch.randn(64, 16)
        for _ in range(steps):
            opt.zero_grad()
            model(x).square().mean().backward()
            opt.step()
        return [p.detach().clone() for p in model.parameters()]

    ours = train(lambda ps: MuonNS(ps, lr=0.02, weight_decay=0.1, ns_dtype=torch.float32))
    # torch's own step with its iterations in fp32: the rest of the update is the same.
    monkeypatch.setattr(_muon, "_zeropower_via_newtonschulz",
                        lambda u, c, n, e: orthogonalize(u, c, n, e, torch.float32))  # fmt: skip
    theirs = train(lambda ps: torch.optim.Muon(ps, lr=0.02, weight_decay=0.1))
    assert all(torch.equal(a, b) for a, b in zip(ours, theirs))
    cpu = torch.device("cpu")
    for units, want in (
        ({"bf16": False, "fp16": False}, torch.float32),
        ({"bf16": True, "fp16": False}, torch.bfloat16),
        (None, torch.bfloat16),
    ):
        monkeypatch.setattr(optimizers, "cpu_low_precision", lambda u=units: u)
        assert ns_dtype("auto", cpu) == want
    assert ns_dtype("auto", torch.device("cuda")) == torch.bfloat16
    assert ns_dtype("fp32", torch.device("cuda")) == torch.float32


def test_newton_schulz_steps_reach_the_optimizer_the_record_and_the_report() -> None:
    from trainscope.reports.tables import overview_table
    from trainscope.train.optimizers import orthogonalize
    from trainscope.train.schedule import build_optimizer

    cfg = from_dict({"train": {"optimizer": "muon", "muon_ns_steps": 3}}).train
    model = GPT(GPTConfig(vocab_size=11, n_layer=1, n_head=2, n_embd=16, block_size=8))
    opt = build_optimizer(cfg, model)
    assert [g["ns_steps"] for g in opt.muon.param_groups] == [3]
    described = opt.describe()
    assert described["muon"]["newton_schulz_steps"] == 3
    rows = {r[0]: r[1] for r in overview_table({"optimizer": described}).cells()}
    assert rows["Optimizer"].endswith(", 3 iterations")
    # Fewer iterations: a cheaper, less exactly orthogonal update (singular values further
    # from 1 than after 5).
    g = torch.randn(32, 64, generator=torch.Generator().manual_seed(2))
    coeffs = (3.4445, -4.7750, 2.0315)

    def spread(n: int) -> float:
        s = torch.linalg.svdvals(orthogonalize(g, coeffs, n, 1e-7, torch.float32))
        return float((s - 1).abs().max())

    assert spread(1) > spread(3) > spread(5)
    for bad in (0, 21, 2.5, True):
        with pytest.raises(ConfigError, match="muon_ns_steps"):
            from_dict({"train": {"optimizer": "muon", "muon_ns_steps": bad}})
