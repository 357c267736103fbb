"""Users' own language models and ``transformers`` models named in plain parts: the
language-modelling task's metrics, a model by hub name or local folder, its layers as
blocks, and a bad name as one line."""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from tests.conftest import requires
from trainscope.config import WorkloadConfig, from_dict
from trainscope.errors import ConfigError
from trainscope.workloads import build_workload

pytestmark = requires("transformers")

MINILM = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "minilm-l6"

USER_MODULE = """
import torch
from torch import nn
from torch.utils.data import Dataset

VOCAB, T = 16, 12


class Windows(Dataset):
    # Windows of a repeating sequence 0, 1, ..., 15, 0, 1, ...: the next token is
    # predictable, so a language model's loss must fall well below log(16).
    def __init__(self, n, offset):
        self.n, self.offset = n, offset

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        start = (i * 5 + self.offset) % VOCAB
        seq = (torch.arange(T + 1) + start) % VOCAB
        return seq[:-1], seq[1:]


def lm_tiny(cfg):
    model = nn.Sequential(nn.Embedding(VOCAB, 32), nn.Linear(32, VOCAB))
    return {"model": model, "train_set": Windows(256, 0), "val_set": Windows(32, 3),
            "task": "language-modelling"}


def hf_lm(cfg):
    return {"model": cfg.options["path"], "train_set": Windows(128, 0),
            "val_set": Windows(32, 3), "task": "language-modelling"}


class Sentences(Dataset):
    def __len__(self):
        return 32

    def __getitem__(self, i):
        ids = torch.tensor([101, 2000 + i % 2, 2100 + i % 7, 102])
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}, i % 2


def hf_cls(cfg):
    return {"model": cfg.options["path"], "train_set": Sentences(), "val_set": Sentences(),
            "num_classes": 2}


def by_bad_name(cfg):
    return {"model": cfg.options["path"], "train_set": Sentences(), "num_classes": 2}
"""


@pytest.fixture
def user_lm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A module importable from tmp_path holding the factories above; yields its name."""
    name = f"ts_user_lm_{uuid.uuid4().hex[:10]}"
    (tmp_path / f"{name}.py").write_text(USER_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # nothing downloads at test time
    yield name
    sys.modules.pop(name, None)


def _run(spec: str, out: Path, options: dict | None = None, **train: object) -> dict:
    from trainscope.train.run import run

    cfg = from_dict(
        {
            "workload": {"name": spec, "options": options or {}},
            "train": {"epochs": 1, "optimizer": "adam", "lr": 0.01, **train},
            "data": {"batch_size": 16},
            "out": str(out),
            "runtime": {"progress": False},
        }
    )
    return run(cfg)


def test_a_language_model_gets_per_token_loss_perplexity_and_tokens(
    user_lm: str, tmp_path: Path
) -> None:
    summary = _run(f"{user_lm}:lm_tiny", tmp_path / "lm", epochs=3)
    assert summary["status"] == "completed"
    last = summary["epochs"][-1]
    # The repeating sequence is learnable: far below a uniform guess's log(16) = 2.77.
    assert last["val_loss"] < 1.0
    assert last["perplexity"] == pytest.approx(torch.tensor(last["val_loss"]).exp().item())
    assert last["val_accuracy"] > 0.5  # next-token accuracy
    assert summary["tokens_per_s"] > 0  # tokens per sample read off the first window (12)


@pytest.fixture
def tiny_gpt2(tmp_path: Path) -> Path:
    """A 2-layer GPT-2 of random weights saved as a local transformers folder."""
    import transformers

    config = transformers.GPT2Config(vocab_size=16, n_positions=16, n_embd=32, n_layer=2, n_head=2)
    path = tmp_path / "tiny-gpt2"
    transformers.GPT2LMHeadModel(config).save_pretrained(path)
    return path


def test_a_transformers_language_model_by_name_trains_with_its_layers_as_blocks(
    user_lm: str, tmp_path: Path, tiny_gpt2: Path
) -> None:
    spec = f"{user_lm}:hf_lm"
    wl = build_workload(WorkloadConfig(name=spec, options={"path": str(tiny_gpt2)}), tmp_path)
    assert wl.task == "language-modelling" and len(wl.model.blocks) == 2  # GPT-2's h
    assert wl.description.startswith("GPT2LMHeadModel")
    summary = _run(spec, tmp_path / "gpt2", {"path": str(tiny_gpt2)}, epochs=2)
    assert summary["status"] == "completed"
    assert summary["epochs"][-1]["val_loss"] < summary["epochs"][0]["val_loss"] < 2.8
    # Activation checkpointing wraps the layers it found: the same losses, bit for bit.
    ckpt = from_dict(
        {
            "workload": {"name": spec, "options": {"path": str(tiny_gpt2)}},
            "train": {"epochs": 2, "optimizer": "adam", "lr": 0.01},
            "data": {"batch_size": 16},
            "runtime": {"progress": False, "checkpointing": "full"},
            "out": str(tmp_path / "gpt2-ckpt"),
        }
    )
    from trainscope.train.run import run

    again = run(ckpt)
    assert [e["val_loss"] for e in again["epochs"]] == [e["val_loss"] for e in summary["epochs"]]


@pytest.mark.skipif(not MINILM.is_dir(), reason="needs ../shared/data/minilm-l6")
def test_a_pretrained_classifier_by_folder_gets_a_new_head_and_trains(
    user_lm: str, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """A BERT folder loads with its 6 layers as blocks and trains with a new 2-class head.
    transformers' load report (a table with "classifier MISSING") is expected for a new
    head: trainscope holds it back and says so in one line, which the run prints and keeps
    in the summary's notes. (One build and one run for both: each costs a pretrained load.)"""
    spec = f"{user_lm}:hf_cls"
    wl = build_workload(WorkloadConfig(name=spec, options={"path": str(MINILM)}), tmp_path)
    out, err = capfd.readouterr()
    assert wl.num_classes == 2 and len(wl.model.blocks) == 6  # BERT's encoder.layer
    assert "LOAD REPORT" not in out + err and "MISSING |" not in out + err
    (note,) = wl.notes
    assert note.startswith(
        f"pretrained {MINILM}: weights loaded into BertForSequenceClassification"
    )
    assert "classification head (classifier.bias, classifier.weight) is new" in note
    assert "expected for a new task" in note and "\n" not in note
    summary = _run(spec, tmp_path / "cls", {"path": str(MINILM)}, lr=1e-4)
    assert summary["status"] == "completed" and summary["test_accuracy"] is None
    assert summary["epochs"][-1]["val_accuracy"] is not None
    assert note in summary["notes"]


def test_a_model_name_that_cannot_load_is_one_clear_error(user_lm: str, tmp_path: Path) -> None:
    cfg = WorkloadConfig(name=f"{user_lm}:by_bad_name", options={"path": str(tmp_path / "none")})
    with pytest.raises(ConfigError, match="cannot load model") as e:
        build_workload(cfg, tmp_path)
    assert "\n" not in str(e.value)


def test_the_load_note_names_what_is_not_expected() -> None:
    from trainscope.workloads.hf import load_note

    info = {
        "missing_keys": ["score.weight", "encoder.layer.0.attention.self.query.weight"],
        "unexpected_keys": ["cls.predictions.bias"],
    }
    note = load_note("m", "BertForSequenceClassification", info)
    assert "head (score.weight) is new" in note
    assert "not in the checkpoint, so random too: 1 weight(s) (encoder.layer.0." in note
    assert "in the checkpoint but unused: 1 weight(s) (cls.predictions.bias)" in note
    assert load_note("m", "X", {}) == "pretrained m: weights loaded into X"
