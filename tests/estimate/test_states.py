"""Model states: the estimate equals the memory meter to the byte on every built-in
workload (SGD with momentum and Adam), the ZeRO accounting, and exact parameter counts of
the named architectures against the models themselves (built on the meta device)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

from tests.estimate.meter import meter_step
from tests.estimate.models import gpt_builder, hf_classifier
from trainscope.config import WorkloadConfig
from trainscope.estimate import archs
from trainscope.estimate.core import Setup, counts_of, estimate
from trainscope.estimate.states import (
    ModelCounts,
    k_factor,
    per_parameter,
    sharded,
    unsharded,
)
from trainscope.estimate.workload import describe_workload, model_counts
from trainscope.workloads import build_workload
from trainscope.workloads.gpt import GPT, GPTConfig, min_corpus_chars

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data"


def _corpus(tmp: Path) -> Path:
    """Tiny Shakespeare where the shared data has it, else a small corpus of our own."""
    real = SHARED / "tinyshakespeare"
    if (real / "input.txt").is_file():
        return real
    text = "".join(chr(97 + (i * 7) % 26) for i in range(min_corpus_chars(64) + 100))
    (tmp / "input.txt").write_text(text, encoding="utf-8")
    return tmp


def _workload_cfg(name: str, tmp: Path, make_mnist_dir: Any) -> WorkloadConfig:
    if name == "gpt-char":
        return WorkloadConfig(name=name, data_dir=str(_corpus(tmp)), options={"preset": "tiny"})
    if name.startswith("text-cls"):
        pytest.importorskip("transformers")
        pytest.importorskip("tokenizers")
        from tests.data.test_glue import write_sst2

        options: dict[str, Any] = {"size": "tiny", "max_length": 32}
        if name == "text-cls-lora":
            pytest.importorskip("peft")
            options["lora_r"] = 4
        data = write_sst2(tmp / "SST-2", n_train=300, n_dev=40)
        return WorkloadConfig(name="text-cls", data_dir=str(data), options=options)
    if name == "mnist":
        return WorkloadConfig(name=name, data_dir=str(make_mnist_dir(n_train=120, n_test=20)))
    if name == "synthetic":
        return WorkloadConfig(name=name, synthetic_samples=64, synthetic_shape=(3, 16, 16))
    return WorkloadConfig(name=name)


@pytest.mark.parametrize(
    "name", ["digits", "synthetic", "mnist", "gpt-char", "text-cls", "text-cls-lora"]
)
def test_model_states_equal_the_meter_to_the_byte(
    name: str, tmp_path: Path, make_mnist_dir: Any
) -> None:
    cfg = _workload_cfg(name, tmp_path, make_mnist_dir)
    torch.manual_seed(0)
    wl = build_workload(cfg, tmp_path / "cache")
    described = describe_workload(wl, cfg)
    batch = next(iter(DataLoader(wl.train_set, batch_size=4, collate_fn=wl.collate_fn)))
    for optimizer in ("sgd", "adam"):
        measured = meter_step(wl.model, wl.loss_fn, batch, optimizer)
        arch = described.arch or archs.Arch(name, "gpt", params=described.counts.parameters)
        est = estimate(
            Setup(arch, described.counts, precision="fp32", optimizer=optimizer, states_only=True)
        )
        states = est.columns["ddp"].states
        got = {
            "parameters_bytes": states.weights,
            "buffers_bytes": described.counts.buffers_bytes,
            "gradients_bytes": states.gradients,
            "optimizer_states_bytes": states.optimizer_states + states.master_weights,
            "model_states_bytes": est.columns["ddp"].model_states,
        }
        want = {k: measured[k] for k in got}
        assert got == want, (name, optimizer)
    if name == "text-cls-lora":  # only the adapters and the head have gradients and states
        assert described.counts.trainable < described.counts.parameters / 10


def test_the_arch_read_off_a_built_model_counts_its_parameters(tmp_path: Path) -> None:
    model = GPT(GPTConfig(vocab_size=65, block_size=32, n_layer=3, n_head=2, n_embd=48, bias=True))
    counts = model_counts(model)
    from trainscope.estimate.workload import model_arch

    arch = model_arch(model, "gpt-char")
    assert arch is not None
    pc = archs.param_counts(arch)
    assert (pc.total, pc.tensors) == (counts.parameters, counts.trainable_tensors)
    assert pc.largest_unit == counts.largest_unit


def _meta_count(build: Any) -> tuple[int, int, int]:
    with torch.device("meta"):
        model = build()
    params = list(model.parameters())
    buffers = sum(b.numel() * b.element_size() for b in model.buffers())
    return sum(p.numel() for p in params), len(params), buffers


@pytest.mark.parametrize("name", ["gpt2-small", "gpt2-medium", "gpt2-xl"])
def test_gpt2_counts_match_the_model(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    arch = archs.named(name)
    total, tensors, _ = _meta_count(gpt_builder(arch, monkeypatch))
    pc = archs.param_counts(arch)
    assert (pc.total, pc.tensors) == (total, tensors)
    assert name != "gpt2-xl" or pc.total == 1_557_611_200  # GPT-2's "1.5B"


@pytest.mark.parametrize("name", ["bert-base", "bert-large", "roberta-base", "roberta-large"])
def test_bert_and_roberta_counts_match_transformers(name: str) -> None:
    arch = archs.named(name)
    total, tensors, buffers = _meta_count(hf_classifier(arch))
    pc = archs.param_counts(arch)
    assert (pc.total, pc.tensors, archs.buffer_bytes(arch)) == (total, tensors, buffers)


def test_lenet5_counts_match_the_model() -> None:
    from trainscope.workloads.lenet import LeNet5

    for image in ((1, 28, 28), (1, 8, 8), (3, 32, 24)):
        arch = archs.Arch("lenet5", "lenet", layers=3, image=image)
        total, tensors, _ = _meta_count(lambda image=image: LeNet5(image[0], image[1:], 10))
        assert (archs.param_counts(arch).total, archs.param_counts(arch).tensors) == (
            total,
            tensors,
        )
    assert archs.param_counts(archs.named("lenet5")).total == 61_706


def test_zero_accounting_of_the_paper() -> None:
    """Rajbhandari et al. 2020, fig. 1: 7.5B parameters, 64 devices, mixed-precision Adam."""
    assert k_factor("amp", "adam") == 12 and k_factor("amp", "sgd") == 8
    full = unsharded(ModelCounts(7_500_000_000, 7_500_000_000), "amp", "adam")
    got = [round(sharded(full, s, 64).total / 1e9, 1) for s in ("ddp", "zero1", "zero2", "zero3")]
    assert got == [120.0, 31.4, 16.6, 1.9]
    assert per_parameter("amp", "adam").startswith("2 + 2 + 12 = 16")


def test_precisions_and_optimizers_per_parameter() -> None:
    counts = ModelCounts(1000, 1000, trainable_tensors=10)
    per = {
        (p, o): unsharded(counts, p, o).total
        for p in ("fp32", "amp", "bf16", "autocast")
        for o in ("sgd", "adam")
    }
    step = 4 * 10  # Adam's per-tensor step counters
    assert per[("fp32", "sgd")] == 12_000 and per[("fp32", "adam")] == 16_000 + step
    assert per[("amp", "sgd")] == 12_000 and per[("amp", "adam")] == 16_000 + step
    assert per[("bf16", "sgd")] == 6_000 and per[("bf16", "adam")] == 8_000 + step
    assert per[("autocast", "adam")] == per[("fp32", "adam")]
    # Frozen parameters (LoRA) have weights but no gradients or states.
    frozen = unsharded(ModelCounts(1000, 100, 2), "fp32", "adam")
    assert (frozen.weights, frozen.gradients, frozen.optimizer_states) == (4000, 400, 808)


def test_counts_of_a_named_arch_are_exact() -> None:
    c = counts_of(archs.named("bert-base"))
    assert (c.parameters, c.trainable, c.trainable_tensors) == (109_483_778, 109_483_778, 201)
    assert c.buffers_bytes == 2 * 8 * 512 and c.exact
