"""BERT and RoBERTa split into pipeline stages and inside their layers (tensor parallelism).

In one process: the pieces a pipeline runs apart (embeddings, layers with the mask each
stage makes, head) give the whole model's logits, on a batch padded to ``max_length``
(padding is masked: no logit changes); LoRA layers expand into the linear layers tensor
parallelism splits. On 2 gloo processes: ``--strategy pipeline`` and ``--strategy tp``
train what one process trains, fully and with LoRA, on SST-2-like rows the test writes.
Dropout is off (``dropout=0``): a split model draws other masks than a whole one.

Measured (this machine): weights within 2e-7 and losses within 1e-7
of one process's.
The 2-process runs fork their ranks from the test process (tests/forked_launch.py): what
they train is tested, not how torchrun starts them.
The tolerances below leave margin for rounding; a missing gradient part, a wrong mask or
a wrong divisor moves weights by ~1e-3 (the lr) and fails by far.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.conftest import requires
from tests.data.test_glue import write_sst2
from tests.forked_launch import forked_launches
from tests.strategies.test_parity import step_lines, weights
from trainscope.cli import main
from trainscope.strategies.tensor_parallel import expand_adapters, model_heads
from trainscope.workloads.base import block_kwargs, pipeline_parts, stage_inputs
from trainscope.workloads.encoder_split import ENCODER_TP_PLAN
from trainscope.workloads.text_cls import (
    SequenceClassifier,
    TextClsOptions,
    add_lora,
    parse_options,
    scratch_model,
)

pytestmark = [
    pytest.mark.usefixtures("one_thread"),  # tests/conftest.py
    requires("transformers", "peft", "tokenizers"),
]

MAX_LENGTH = 24


def _model(kind: str, lora: bool = False) -> SequenceClassifier:
    torch.manual_seed(0)
    net = scratch_model(kind, "tiny", vocab_size=120, num_labels=2, pad_id=1, dropout=0.0)
    if lora:
        opts: TextClsOptions = parse_options(
            {"lora_r": 4, "lora_dropout": 0.0, "lora_targets": ["query", "value", "dense"]}
        )
        net, _ = add_lora(net, opts)
    return SequenceClassifier(net, 2, 2, pad_id=1, max_length=MAX_LENGTH).eval()


def _batch(with_types: bool) -> dict[str, torch.Tensor]:
    """Four rows of 3..11 tokens, padded to the longest (as PadCollate pads)."""
    g = torch.Generator().manual_seed(1)
    lengths = [11, 3, 7, 9]
    ids = torch.full((4, 11), 1, dtype=torch.long)
    mask = torch.zeros((4, 11), dtype=torch.long)
    for row, n in enumerate(lengths):
        ids[row, :n] = torch.randint(5, 120, (n,), generator=g)
        mask[row, :n] = 1
    out = {"input_ids": ids, "attention_mask": mask}
    if with_types:
        out["token_type_ids"] = (torch.arange(11) >= 5).long().expand(4, -1).clone()
    return out


@pytest.mark.parametrize(("kind", "lora"), [("bert", False), ("roberta", False), ("bert", True)])
def test_the_pieces_a_pipeline_runs_give_the_whole_models_logits(kind: str, lora: bool) -> None:
    model = _model(kind, lora)
    parts = pipeline_parts(model)
    assert parts is not None and len(parts.blocks) == 2
    inputs = _batch(with_types=kind == "bert")
    args, kwargs = stage_inputs(model, inputs)
    assert args[0].shape == (4, MAX_LENGTH) and kwargs["attention_mask"].shape == (4, MAX_LENGTH)
    with torch.no_grad():
        want = model(inputs)
        x = model.forward_in(*args)
        extra = block_kwargs(model, x, kwargs)
        for block in parts.blocks:
            x = block(x, **extra)
        got = model.forward_out(x)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-5)
    # Every parameter is used by one end or a block: a stage can keep exactly its own.
    ends = [model.get_submodule(n) for n in parts.in_modules + parts.out_modules]
    used = {id(p) for m in [*ends, *parts.blocks] for p in m.parameters()}
    assert used == {id(p) for p in model.parameters()}


def test_the_pipeline_needs_the_mask_the_pieces_are_given() -> None:
    """Without the padding mask the padded rows' logits change: the test above has teeth."""
    model = _model("bert")
    parts = pipeline_parts(model)
    inputs = _batch(with_types=True)
    args, _ = stage_inputs(model, inputs)
    with torch.no_grad():
        x = model.forward_in(*args)
        for block in parts.blocks:
            x = block(x)
        unmasked = model.forward_out(x)
    assert (unmasked - model(inputs)).abs().max() > 1e-3


def test_lora_layers_expand_into_the_linear_layers_that_split() -> None:
    model = _model("bert", lora=True)
    block = model.blocks[0]
    layers = expand_adapters(block, ENCODER_TP_PLAN)
    assert layers["attention.self.query.base_layer"] == "colwise"
    assert layers["attention.self.query.lora_B.default"] == "colwise"  # its output splits
    assert layers["attention.output.dense.lora_A.default"] == "rowwise"  # its input splits
    assert layers["attention.self.key"] == "colwise"  # not adapted: the layer itself
    assert "attention.self.query.lora_A.default" not in layers
    for name in layers:
        assert isinstance(block.get_submodule(name), torch.nn.Linear), name
    assert model_heads(model) == 2


# --------------------------------------------------------------------------- 2 processes

# A test runs at most two forked launches of a few seconds each (scaled by conftest).
LAUNCH_TIMEOUT = 120
STEPS = 4


def _common(data: Path) -> list[str]:
    return [
        "run", "--workload", "text-cls", "--data-dir", str(data),
        "--set", "workload.options.dropout=0", "--set", f"workload.options.max_length={MAX_LENGTH}",
        "--epochs", "1", "--max-steps-per-epoch", str(STEPS), "--batch-size", "8",
        "--optimizer", "adamw", "--lr", "0.001", "--grad-clip", "0.5",
        "--seed", "0", "--log-every", "1", "--device", "cpu", "--threads", "1",
        "--set", "dist.timeout_s=60", "-q", "--no-progress",
    ]  # fmt: skip


LORA = ("--set", "workload.options.lora_r=4", "--set", "workload.options.lora_dropout=0",
        "--set", "workload.options.lora_targets=query,value,dense")  # fmt: skip


@pytest.fixture(scope="module")
def encoder_run(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """``get(*flags)``: the run directory of text-cls with those flags, run once."""
    data = write_sst2(tmp_path_factory.mktemp("glue") / "SST-2", n_train=200, n_dev=48)
    root = tmp_path_factory.mktemp("encoder-runs")
    done: dict[tuple[str, ...], Path] = {}

    def get(*flags: str) -> Path:
        if flags not in done:
            out = root / f"run{len(done)}"
            with forked_launches():  # what the ranks train is tested, not how they start
                code = main([*_common(data), *flags, "--out", str(out)])
            summary = json.loads((out / "summary.json").read_text())
            assert code == 0 and summary["status"] == "completed", summary.get("error")
            done[flags] = out
        return done[flags]

    return get


SPLITS = {
    "pipeline-gpipe": ("--strategy", "pipeline", "--nproc", "2", "--pp-schedule", "gpipe",
                       "--microbatches", "2"),
    "tp": ("--strategy", "tp", "--nproc", "2"),
    "lora-pipeline-1f1b": (*LORA, "--strategy", "pipeline", "--nproc", "2", "--microbatches", "4"),
    "lora-tp": (*LORA, "--strategy", "tp", "--nproc", "2"),
}  # fmt: skip


@pytest.mark.slow
@pytest.mark.timeout(LAUNCH_TIMEOUT)
@pytest.mark.parametrize("split", SPLITS)
def test_a_split_encoder_trains_what_one_process_trains(split: str, encoder_run) -> None:
    single = encoder_run(*(LORA if split.startswith("lora") else ()))
    run = encoder_run(*SPLITS[split])
    got, want = weights(run), weights(single)
    assert sorted(got) == sorted(want)
    for name in want:
        torch.testing.assert_close(got[name], want[name], rtol=0.0, atol=2e-6, msg=name)
    first = json.loads((single / "summary.json").read_text())
    losses = [e["loss"] for e in step_lines(run / "metrics.jsonl")]
    base = [e["loss"] for e in step_lines(single / "metrics.jsonl")]
    assert len(losses) == len(base) == STEPS
    assert losses == pytest.approx(base, abs=1e-5)
    assert abs(base[-1] - base[0]) > 1e-3  # training moved: the comparison has teeth
    val = [e["val_loss"] for e in json.loads((run / "summary.json").read_text())["epochs"]]
    assert val == pytest.approx([e["val_loss"] for e in first["epochs"]], abs=1e-5)


@pytest.mark.slow
@pytest.mark.timeout(LAUNCH_TIMEOUT)
def test_a_split_encoder_all_reduces_once_per_split_layer(encoder_run) -> None:
    """BERT's separate query, key and value layers each all-reduce their input gradient:
    6 all-reduces per layer (2 forward, 4 backward), where a fused Q/K/V makes 4. Under
    LoRA on query, value and every dense layer, each split adapter adds one more; but the
    first layer's input comes from frozen embeddings and needs no gradient, so its frozen
    query, key and value layers send none back: 3 fewer than the plan's count."""
    cases = ((SPLITS["tp"], 2, 4, 0), (SPLITS["lora-tp"], 4, 7, 3))
    for flags, forward, backward, unneeded in cases:
        summary = json.loads((encoder_run(*flags) / "summary.json").read_text())
        tp = summary["parallel"]["tensor_parallel"]
        assert tp["all_reduces_per_block"] == {"forward": forward, "backward": backward}
        calls = summary["comm"]["collectives"]["ops"]["all_reduce"]["calls"]
        assert calls == 2 * (forward + backward) - unneeded  # 2 layers
        assert f"{forward + backward} all-reduces per block" in summary["parallel"]["comm_note"]
