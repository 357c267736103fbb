"""Tests for trainscope.tools.sample: text from a gpt-char run directory (weights via
safetensors)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file, save_model

from trainscope.data.text import CharVocab, CharWindows
from trainscope.errors import TrainscopeError
from trainscope.tools.sample import sample_from_run
from trainscope.workloads.gpt import GPT, GPTConfig, generate, lm_loss

PATTERN = "to be or not\n"


def write_run(run_dir: Path, model: GPT, vocab: CharVocab) -> Path:
    """What a gpt-char run leaves: its two artifacts and the weights."""
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "gpt_config.json").write_text(json.dumps(dataclasses.asdict(model.config)))
    (run_dir / "vocab.json").write_text(json.dumps(vocab.to_dict()))
    save_model(model, str(run_dir / "model.safetensors"))
    return run_dir


@pytest.fixture
def vocab() -> CharVocab:
    return CharVocab.from_text(PATTERN)


@pytest.fixture
def model(vocab: CharVocab) -> GPT:
    torch.manual_seed(0)
    return GPT(GPTConfig(len(vocab), block_size=16, n_layer=1, n_head=2, n_embd=32, dropout=0.0))


@pytest.fixture
def run_dir(tmp_path: Path, model: GPT, vocab: CharVocab) -> Path:
    return write_run(tmp_path / "run", model, vocab)


def test_sample_is_prompt_plus_new_text_and_reproducible(run_dir: Path, vocab: CharVocab) -> None:
    text = sample_from_run(run_dir, prompt="to ", max_new_tokens=40, seed=1)
    assert text.startswith("to ") and len(text) == 43
    assert set(text) <= set(vocab.chars)
    assert sample_from_run(run_dir, prompt="to ", max_new_tokens=40, seed=1) == text
    assert sample_from_run(run_dir, prompt="to ", max_new_tokens=40, seed=2) != text


def test_weights_round_trip_exactly(run_dir: Path, model: GPT, vocab: CharVocab) -> None:
    # Greedy decoding is a function of the weights alone: the reloaded model (tied head
    # included) must pick the same characters as the one that was saved.
    start = torch.tensor([vocab.encode("or")])
    expected = vocab.decode(generate(model, start, 30, temperature=0.0)[0].tolist())
    assert sample_from_run(run_dir, prompt="or", max_new_tokens=30, temperature=0.0) == expected


def test_tied_weight_stored_under_either_name(run_dir: Path, model: GPT, vocab: CharVocab) -> None:
    # save_model keeps the tie as "head.weight"; the run writer keeps the first name
    # ("tok_emb.weight", dropping the duplicate). Both must load into the tied model.
    expected = sample_from_run(run_dir, prompt="to", max_new_tokens=20, temperature=0.0)
    state = {k: v.contiguous() for k, v in model.state_dict().items() if k != "head.weight"}
    save_file(state, str(run_dir / "model.safetensors"))
    assert sample_from_run(run_dir, prompt="to", max_new_tokens=20, temperature=0.0) == expected


def test_a_trained_model_continues_its_pattern(tmp_path: Path, vocab: CharVocab) -> None:
    torch.manual_seed(0)
    cfg = GPTConfig(len(vocab), block_size=16, n_layer=1, n_head=2, n_embd=32, dropout=0.0)
    model = GPT(cfg)
    data = torch.tensor(vocab.encode(PATTERN * 50))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    loader = CharWindows(data, 16).fast_loader(16, torch.device("cpu"), shuffle=True)
    batches = (batch for _ in range(10) for batch in loader)  # epochs of 39 batches
    for _ in range(100):
        x, y = next(batches)
        loss = lm_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    run = write_run(tmp_path / "trained", model, vocab)
    text = sample_from_run(run, prompt="to be", max_new_tokens=3 * len(PATTERN), temperature=0)
    assert text == (PATTERN * 4)[: len(text)]  # "to be" + " or not\nto be or not\n..."


def test_not_a_gpt_char_run(tmp_path: Path) -> None:
    with pytest.raises(TrainscopeError, match="does not exist"):
        sample_from_run(tmp_path / "absent")
    (tmp_path / "digits-run").mkdir()
    (tmp_path / "digits-run" / "summary.json").write_text("{}")
    with pytest.raises(TrainscopeError, match="not a gpt-char run"):
        sample_from_run(tmp_path / "digits-run")


@pytest.mark.parametrize("missing", ["vocab.json", "model.safetensors"])
def test_missing_files_are_named(run_dir: Path, missing: str) -> None:
    (run_dir / missing).unlink()
    with pytest.raises(TrainscopeError, match=missing):
        sample_from_run(run_dir)


def test_corrupt_or_mismatched_files(run_dir: Path, tmp_path: Path, vocab: CharVocab) -> None:
    (run_dir / "vocab.json").write_text("{not json")
    with pytest.raises(TrainscopeError, match="vocab.json"):
        sample_from_run(run_dir)
    (run_dir / "vocab.json").write_text(json.dumps(CharVocab.from_text("ab").to_dict()))
    with pytest.raises(TrainscopeError, match="expects"):
        sample_from_run(run_dir)
    (run_dir / "vocab.json").write_text(json.dumps(vocab.to_dict()))
    (run_dir / "model.safetensors").write_bytes(b"garbage")
    with pytest.raises(TrainscopeError, match="cannot load"):
        sample_from_run(run_dir)

    # Weights of another shape than the config says.
    other = GPT(GPTConfig(len(vocab), block_size=16, n_layer=2, n_head=2, n_embd=32))
    save_model(other, str(run_dir / "model.safetensors"))
    with pytest.raises(TrainscopeError, match="cannot load"):
        sample_from_run(run_dir)

    (run_dir / "gpt_config.json").write_text(json.dumps({"n_layer": 2, "width": 3}))
    with pytest.raises(TrainscopeError, match="not a GPT config"):
        sample_from_run(run_dir)


def test_bad_prompt_and_settings(run_dir: Path) -> None:
    with pytest.raises(TrainscopeError, match="not in the vocabulary"):
        sample_from_run(run_dir, prompt="XYZ")
    with pytest.raises(TrainscopeError, match="at least one character"):
        sample_from_run(run_dir, prompt="")
    with pytest.raises(TrainscopeError, match="temperature"):
        sample_from_run(run_dir, temperature=-0.5)
    with pytest.raises(TrainscopeError, match="top_k"):
        sample_from_run(run_dir, top_k=0)
    assert sample_from_run(run_dir, prompt="t", max_new_tokens=0) == "t"


@pytest.mark.parametrize(
    ("settings", "words"),
    [
        ({"temperature": float("nan")}, r"temperature must be a finite number >= 0 .* got nan"),
        ({"temperature": float("inf")}, r"temperature must be a finite number >= 0 .* got inf"),
        ({"device": "meta"}, r"device must be auto, cpu, cuda or cuda:N, got 'meta'"),
        ({"device": "xla"}, r"device must be auto, cpu, cuda or cuda:N, got 'xla'"),
        ({"seed": 10**23}, r"seed must be an integer in 0\.\.2\*\*63 - 1, got an integer of 24"),
        ({"seed": -1}, r"seed must be an integer in 0\.\.2\*\*63 - 1, got -1"),
    ],
    ids=["temp-nan", "temp-inf", "meta", "xla", "seed-huge", "seed-negative"],
)
def test_settings_that_cannot_work_are_one_line_config_errors(
    run_dir: Path, settings: dict, words: str
) -> None:
    from trainscope.errors import ConfigError

    with pytest.raises(ConfigError, match=words) as exc:
        sample_from_run(run_dir, **settings)
    assert "\n" not in str(exc.value)


def test_auto_device_zero_temperature_and_the_token_bound(run_dir: Path) -> None:
    from trainscope.errors import ConfigError
    from trainscope.tools.sample import MAX_NEW_TOKENS, check_settings

    with pytest.raises(ConfigError, match=r"max_new_tokens must be an integer in 0\.\.1000000"):
        check_settings(MAX_NEW_TOKENS + 1, 0.8, None, 0, "cpu")
    with pytest.raises(ConfigError, match=r"--tokens must be an integer in 1\.\.1000000, got 0"):
        check_settings(0, 0.8, None, 0, "cpu", cli=True)

    greedy = sample_from_run(run_dir, prompt="t", max_new_tokens=8, temperature=0.0)
    assert sample_from_run(run_dir, prompt="t", max_new_tokens=8, temperature=0, device="auto")
    assert len(greedy) == 9
    check_settings(1, 0.8, None, 2**63 - 1, "cuda:3")  # the form is right; existence is later


@pytest.mark.parametrize("tty", [True, False])
def test_generated_control_characters_are_shown_not_obeyed_on_a_terminal(
    run_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tty: bool
) -> None:
    """A shared run's vocabulary may hold escape sequences; a terminal shows them."""
    import sys

    from trainscope import cli

    hostile = "to be\x1b]0;pwned\x07 or \x1b[2J not\r"
    monkeypatch.setattr("trainscope.tools.sample.sample_from_run", lambda *a, **k: hostile)
    monkeypatch.setattr(sys.stdout, "isatty", lambda: tty)
    assert cli.main(["sample", str(run_dir)]) == 0
    out = capsys.readouterr().out
    if tty:
        assert "\x1b" not in out and "\x07" not in out and "\r" not in out
        assert "\\x1b]0;pwned\\x07" in out
    else:  # piped to a file: the text as generated
        assert out == hostile + "\n"


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_weights_that_are_not_finite_are_one_line(
    tmp_path: Path, model: GPT, vocab: CharVocab, value: float, capsys: pytest.CaptureFixture[str]
) -> None:
    from trainscope.cli import main

    with torch.no_grad():
        model.blocks[0].attn.qkv.weight.fill_(value)  # what a diverged run may save
    run_dir = write_run(tmp_path / "run", model, vocab)
    with pytest.raises(TrainscopeError, match=r"model.safetensors: tensor .* NaN or infinite"):
        sample_from_run(run_dir, max_new_tokens=5)
    assert main(["sample", str(run_dir), "--tokens", "5"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "NaN or infinite" in err[0] and "internal" not in err[0]
