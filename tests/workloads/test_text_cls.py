"""The text-cls workload: options, model sizes, blocks, LoRA counts, pretrained loading
(offline only), and that a tiny BERT learns SST-2-like data, fully and with LoRA.

Skips when the ``text`` extra (transformers, peft, tokenizers) is not installed. Training
uses a plain loop over the workload's own DataLoader, not trainscope's run code.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

from tests.conftest import requires
from tests.data.test_glue import sst2_rows, write_rte, write_sst2
from trainscope.config import WorkloadConfig
from trainscope.errors import ConfigError, DataError
from trainscope.workloads.base import Workload, model_blocks
from trainscope.workloads.text_cls import (
    DEFAULT_OPTIONS,
    SIZES,
    SequenceClassifier,
    parse_options,
    scratch_model,
    text_cls,
)

pytestmark = [
    pytest.mark.usefixtures("one_thread"),  # tests/conftest.py
    requires("transformers", "peft", "tokenizers"),
]


@pytest.fixture(scope="module", autouse=True)
def _imported_before_any_is_hidden() -> None:
    """transformers records at its first import which packages it found (tokenizers
    among them) and never looks again: imported here, before a test below hides one
    (``sys.modules[name] = None``), not first under that test. Not at module level, so
    that collecting the suite does not pay for it (``tests.conftest.requires``)."""
    import peft  # noqa: F401
    import tokenizers  # noqa: F401
    import transformers  # noqa: F401
    import transformers.models.auto.tokenization_auto  # noqa: F401  (its checks run here)


@pytest.fixture(scope="module")
def sst2_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """600 training and 200 dev SST-2-like rows (label = which sentiment word appears)."""
    return write_sst2(tmp_path_factory.mktemp("glue") / "SST-2", n_train=600, n_dev=200)


def build(data_dir: Path, seed: int = 0, **options: Any) -> Workload:
    """The text-cls workload on ``data_dir`` with ``options``, seeded like a run."""
    torch.manual_seed(seed)
    cfg = WorkloadConfig(name="text-cls", data_dir=str(data_dir), options=options)
    return text_cls(cfg, Path("unused-cache"))


def first_batch(wl: Workload, batch_size: int = 8) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    loader = DataLoader(wl.train_set, batch_size=batch_size, collate_fn=wl.collate_fn)
    return next(iter(loader))


# --------------------------------------------------------------------------- options


def test_options_default_and_are_checked() -> None:
    opts = parse_options({})
    assert (opts.task, opts.model, opts.size, opts.pretrained) == ("SST-2", "bert", "tiny", None)
    assert (opts.max_length, opts.lora_r, opts.vocab_size) == (128, 0, 8000)
    assert opts.lora_targets == ["query", "value"]
    assert parse_options({"task": "rte", "lora_targets": "query, key"}).task == "RTE"
    assert parse_options({"lora_targets": "query, key"}).lora_targets == ["query", "key"]
    assert parse_options({"lora_r": "8"}).lora_r == 8  # --set gives strings at times

    with pytest.raises(ConfigError, match="unknown text-cls option.*lora_rank.*allowed.*lora_r"):
        parse_options({"lora_rank": 8})


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"model": "gpt"}, "unknown model 'gpt'"),
        ({"size": "huge"}, "unknown size 'huge': choose one of tiny, mini, small, base"),
        ({"task": "nope"}, "unknown GLUE task"),
        ({"lora_r": -1}, "lora_r must be an integer >= 0"),
        ({"lora_r": True}, "lora_r must be an integer"),
        ({"lora_dropout": 1.0}, r"lora_dropout must be a number in \[0.0, 1.0\)"),
        ({"dropout": -0.1}, r"option dropout must be a number in \[0.0, 1.0\)"),
        ({"lora_alpha": "x"}, "lora_alpha must be a number"),
        ({"max_length": 1000}, "max_length must be <= 512"),
        ({"lora_targets": []}, "lora_targets must list module names"),
        ({"train_limit": 0}, "train_limit must be an integer >= 1"),
        ({"pretrained": "bert-base-cased", "size": "mini"}, "size apply to a model built from"),
    ],
)
def test_bad_options_are_config_errors(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_options(options)


@pytest.mark.parametrize(
    ("package", "options"),
    [("transformers", {}), ("tokenizers", {}), ("peft", {"lora_r": 8})],
)
def test_a_missing_package_says_how_to_install(
    sst2_dir: Path, monkeypatch: pytest.MonkeyPatch, package: str, options: dict[str, Any]
) -> None:
    monkeypatch.setitem(sys.modules, package, None)  # as if the extra were half installed
    message = rf"text-cls needs the '{package}' package: pip install 'trainscope\[text\]'"
    with pytest.raises(ConfigError, match=message):
        build(sst2_dir, **options)


def test_full_fine_tuning_does_not_need_peft(
    sst2_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "peft", None)
    assert build(sst2_dir, train_limit=20, eval_limit=10).info["lora"] is None


# --------------------------------------------------------------------------- models


@pytest.mark.parametrize("model", ["bert", "roberta"])
@pytest.mark.parametrize("size", list(SIZES))
def test_sizes_build_offline(model: str, size: str) -> None:
    layers, hidden, heads = SIZES[size]
    net = scratch_model(model, size, vocab_size=300, num_labels=3, pad_id=0)
    config = net.config
    assert (config.num_hidden_layers, config.hidden_size) == (layers, hidden)
    assert (config.num_attention_heads, config.intermediate_size) == (heads, 4 * hidden)
    classifier = SequenceClassifier(net, num_labels=3, num_layers=layers)
    assert len(classifier.blocks) == layers and len(model_blocks(classifier)) == layers
    ids = torch.randint(5, 300, (2, 9))
    logits = classifier({"input_ids": ids, "attention_mask": torch.ones_like(ids)})
    assert logits.shape == (2, 3)


def test_sst2_workload_fields(sst2_dir: Path) -> None:
    wl = build(sst2_dir)
    assert wl.name == "text-cls" and wl.num_classes == 2
    assert wl.class_names == ["negative", "positive"]
    assert wl.test_set is None and len(wl.train_set) == 600 and len(wl.val_set) == 200
    assert wl.tokens_per_sample is None and wl.collate_fn is not None

    inputs, targets = first_batch(wl)
    assert set(inputs) == {"input_ids", "attention_mask", "token_type_ids"}
    assert targets.dtype == torch.long and targets.shape == (8,)
    assert wl.model(inputs).shape == (8, 2)

    info = wl.info
    assert info["task"] == "SST-2" and info["model"] == "bert-tiny" and info["lora"] is None
    assert (info["num_layers"], info["hidden_size"]) == (2, 128)
    assert info["trainable_parameters"] == info["total_parameters"] > 0
    assert info["trainable_fraction"] == 1.0
    assert 5 < info["mean_tokens_per_sample"] < 20
    json.dumps(info)  # goes into summary.json as is

    # The saved tokenizer rebuilds the one that encoded the data.
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_str(json.dumps(wl.artifacts["tokenizer"]))
    assert tokenizer.encode(sst2_rows(600, 0)[0][0]).ids == wl.train_set[0][0]


def test_blocks_are_the_encoder_layers_not_copies(sst2_dir: Path) -> None:
    for lora_r in (0, 4):
        wl = build(sst2_dir, lora_r=lora_r, train_limit=50, eval_limit=10)
        model = wl.model
        assert isinstance(model, SequenceClassifier)
        layers = model.net.get_submodule(model._blocks_path)
        assert model.blocks is layers and len(model.blocks) == 2
        assert type(model.blocks[0]).__name__ == "BertLayer"
        # Not registered twice: state_dict holds each encoder weight once.
        keys = list(model.state_dict())
        assert not any(k.startswith("blocks.") for k in keys)
        assert len(keys) == len(set(keys))

    # Replacing a block replaces the layer the encoder runs (what checkpoint wrappers do).
    calls = []

    class Spy(torch.nn.Module):
        def __init__(self, inner: torch.nn.Module) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, *args: Any, **kwargs: Any) -> Any:
            calls.append(1)
            return self.inner(*args, **kwargs)

    model.blocks[1] = Spy(model.blocks[1])
    model(first_batch(wl)[0])
    assert calls == [1]


def test_rte_pairs_bert_and_roberta(tmp_path: Path) -> None:
    folder = write_rte(tmp_path / "RTE", n_train=80, n_dev=20)
    wl = build(folder, task="RTE")
    assert wl.class_names == ["entailment", "not_entailment"] and len(wl.val_set) == 20
    inputs, _ = first_batch(wl)
    types = inputs["token_type_ids"]
    assert (types == 1).any() and (types[inputs["attention_mask"] == 0] == 0).all()

    roberta = build(folder, task="RTE", model="roberta", size="mini")
    inputs, _ = first_batch(roberta)
    assert "token_type_ids" not in inputs  # RoBERTa has no segment embeddings
    assert roberta.model(inputs).shape == (8, 2) and len(roberta.model.blocks) == 4
    assert type(roberta.model.blocks[0]).__name__ == "RobertaLayer"


# --------------------------------------------------------------------------- LoRA


def test_lora_trains_far_fewer_parameters(sst2_dir: Path) -> None:
    full = build(sst2_dir, train_limit=100, eval_limit=10)
    lora = build(sst2_dir, lora_r=8, train_limit=100, eval_limit=10)
    info = lora.info
    assert info["lora"] == {
        "r": 8,
        "alpha": 16.0,
        "dropout": 0.1,
        "targets": ["query", "value"],
        "modules_to_save": ["classifier"],
    }
    layers, hidden = 2, 128
    adapters = layers * 2 * 8 * (hidden + hidden)  # A (r x h) and B (h x r), query and value
    head = hidden * 2 + 2
    assert info["trainable_parameters"] == adapters + head
    assert info["trainable_parameters"] < 0.05 * full.info["trainable_parameters"]
    assert info["trainable_fraction"] < 0.05

    trainable = {n for n, p in lora.model.named_parameters() if p.requires_grad}
    assert any("classifier" in n for n in trainable)  # the head learns
    assert any("lora_A" in n for n in trainable) and any("lora_B" in n for n in trainable)
    assert not any("word_embeddings" in n or "intermediate" in n for n in trainable)
    assert "LoRA r=8" in lora.description


def test_lora_unknown_target_is_a_config_error(sst2_dir: Path) -> None:
    with pytest.raises(ConfigError, match="lora_targets.*q_proj"):
        build(sst2_dir, lora_r=4, lora_targets=["q_proj"], train_limit=20, eval_limit=5)


# --------------------------------------------------------------------------- pretrained


@pytest.fixture
def hub_offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Forbid the Hugging Face hub: offline mode and an empty cache (read at import time,
    so the already-imported constants are patched as well as the environment)."""
    import huggingface_hub.constants as hf_constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", True)


@pytest.mark.parametrize("download", [True, False])
def test_pretrained_offline_is_one_clear_line(
    sst2_dir: Path, hub_offline: None, download: bool
) -> None:
    name = "trainscope-tests/no-such-model"
    cfg = WorkloadConfig(
        name="text-cls", data_dir=str(sst2_dir), download=download, options={"pretrained": name}
    )
    with pytest.raises(DataError, match=f"cannot download pretrained {name}: offline") as e:
        text_cls(cfg, Path("unused-cache"))
    assert "\n" not in str(e.value)


def test_pretrained_from_a_local_folder(sst2_dir: Path, tmp_path: Path, hub_offline: None) -> None:
    """A model saved with save_pretrained loads through the same path as a hub name."""
    import transformers

    from trainscope.data.glue import train_wordpiece

    folder = tmp_path / "tiny-bert"
    tok = train_wordpiece(["the good film", "a bad plot"] * 20, vocab_size=200)
    hf_tok = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token="[PAD]",
        unk_token="[UNK]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
    )
    hf_tok.save_pretrained(folder)
    scratch_model("bert", "tiny", vocab_size=len(hf_tok), num_labels=2, pad_id=0).save_pretrained(
        folder
    )

    wl = build(sst2_dir, pretrained=str(folder), lora_r=4, train_limit=30, eval_limit=10)
    assert wl.info["pretrained"] is True and wl.info["model"] == str(folder)
    assert wl.info["tokenizer"] == "pretrained" and wl.artifacts == {}
    inputs, _ = first_batch(wl)
    assert inputs["input_ids"][0, 0].item() == hf_tok.cls_token_id
    assert wl.model(inputs).shape == (8, 2) and len(wl.model.blocks) == 2


# --------------------------------------------------------------------------- training


def train_and_evaluate(wl: Workload, *, epochs: int, lr: float, batch_size: int = 32) -> float:
    """A plain AdamW loop over the workload's DataLoader; returns dev accuracy."""
    params = [p for p in wl.model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=lr)
    generator = torch.Generator().manual_seed(0)
    train = DataLoader(
        wl.train_set, batch_size, shuffle=True, generator=generator, collate_fn=wl.collate_fn
    )
    for _ in range(epochs):
        wl.model.train()
        for inputs, targets in train:
            loss = wl.loss_fn(wl.model(inputs), targets)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
    wl.model.eval()
    metrics = wl.new_metrics(torch.device("cpu"))
    with torch.no_grad():
        for inputs, targets in DataLoader(wl.val_set, 100, collate_fn=wl.collate_fn):
            outputs = wl.model(inputs)
            metrics.update(outputs.float(), targets, wl.loss_fn(outputs, targets))
    return metrics.compute()["accuracy"]


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_tiny_bert_learns_sst2_like_data(sst2_dir: Path) -> None:
    t0 = time.perf_counter()
    wl = build(sst2_dir)
    accuracy = train_and_evaluate(wl, epochs=3, lr=1e-3)
    print(f"full fine-tuning: dev accuracy {accuracy:.3f} in {time.perf_counter() - t0:.1f} s")
    assert accuracy > 0.75


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_tiny_bert_with_lora_learns_sst2_like_data(sst2_dir: Path) -> None:
    t0 = time.perf_counter()
    wl = build(sst2_dir, lora_r=8)
    accuracy = train_and_evaluate(wl, epochs=5, lr=3e-3)
    print(f"LoRA r=8: dev accuracy {accuracy:.3f} in {time.perf_counter() - t0:.1f} s")
    assert accuracy > 0.75


def test_default_options_are_documented() -> None:
    """Every option the workload accepts has a default (and so a place in the docs)."""
    assert set(DEFAULT_OPTIONS) == set(parse_options({}).__dict__)


def test_dropout_sets_every_dropout_of_the_model() -> None:
    net = scratch_model("bert", "tiny", vocab_size=100, num_labels=2, pad_id=0, dropout=0.0)
    rates = {m.p for m in net.modules() if isinstance(m, torch.nn.Dropout)}
    assert rates == {0.0} and net.config.attention_probs_dropout_prob == 0.0
    default = scratch_model("bert", "tiny", vocab_size=100, num_labels=2, pad_id=0)
    assert {m.p for m in default.modules() if isinstance(m, torch.nn.Dropout)} == {0.1}
