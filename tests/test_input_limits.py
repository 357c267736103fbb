"""Absurd and malformed inputs at the command line: each is one line naming the problem.

Every case runs ``trainscope.cli.main`` in-process and checks the exit status and the one
line on stderr: never an internal error or a traceback, and nothing allocated or forked
from a size a user (or a file's header) merely claims.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import write_mnist_dir
from trainscope.cli import main

pytestmark = [pytest.mark.timeout(120), pytest.mark.usefixtures("isolated_cli")]

QUICK = ["--epochs", "1", "--max-steps-per-epoch", "1", "--no-download", "--no-progress", "--quiet"]


def _fails(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """Run the CLI, expect a non-zero exit, return its one line of stderr."""
    code = main(list(argv))
    err = capsys.readouterr().err.strip()
    assert code != 0, err
    assert "\n" not in err, err
    assert "internal error" not in err and "Traceback" not in err, err
    assert err.startswith("trainscope: error: "), err
    return err


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--lr", "nan"], "lr must be a finite number > 0, got nan"),
        (["--momentum", "nan"], "momentum must be a finite number >= 0, got nan"),
        (["--weight-decay", "inf"], "weight_decay must be a finite number >= 0, got inf"),
        (["--system-interval", "1e-9"], "system_interval_s must be >= 0.1 and <= 86400, got 1e-09"),
        (["--seed", "99999999999999999999999"], "seed must be an integer in 0..2**63 - 1"),
        (["--set", "train.seed=1" + "0" * 400], "got an integer of 401 digits"),
        (["--set", "dist.timeout_s=.inf"], "timeout_s must be >= 1 and <= 604800, got inf"),
        (["--batch-size", "100000", "--drop-last"], "batch size 100000 is larger than the"),
        (
            ["--workload", "synthetic", "--synthetic-shape", "1", "100000", "100000"],
            "synthetic data of 8192 samples of 1x100000x100000 would take",
        ),
        (
            ["--workload", "synthetic", "--synthetic-samples", str(10**12)],
            "synthetic data of 1000000000000 samples",
        ),
        (["--workload", "text-cls", "--lora-alpha", "inf"], "lora_alpha must be a number"),
        (["--workload", "text-cls", "--lora-r", str(10**9)], "lora_r must be at most 4096"),
        (
            ["--workload", "text-cls", "--set", f"workload.options.vocab_size={10**12}"],
            "vocab_size must be at most 1000000",
        ),
        (
            ["--workload", "gpt-char", "--set", "workload.options.x=[&a [1, 2], *a]"],
            "--set workload.options.x uses the YAML alias *a",
        ),
    ],
    ids=[
        "lr-nan",
        "momentum-nan",
        "weight-decay-inf",
        "system-interval-tiny",
        "seed-huge",
        "seed-400-digits",
        "timeout-inf",
        "batch-beyond-data-drop-last",
        "synthetic-shape-huge",
        "synthetic-samples-huge",
        "lora-alpha-inf",
        "lora-r-huge",
        "vocab-size-huge",
        "set-alias",
    ],
)
def test_run_refuses_in_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, argv: list[str], words: str
) -> None:
    err = _fails(capsys, "run", *argv, *QUICK, "--out", str(tmp_path / "run"))
    assert words in err


def test_config_paths_that_are_not_config_files(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    run = ["run", *QUICK, "--out", str(tmp_path / "run"), "--config"]
    assert "is a directory, not a YAML file" in _fails(capsys, *run, str(tmp_path))
    deep = tmp_path / "deep.yaml"
    deep.write_text("train: " + "[" * 3000 + "]" * 3000 + "\n")
    assert "deep.yaml nests deeper than 32 levels" in _fails(capsys, *run, str(deep))
    binary = tmp_path / "weights.bin"
    binary.write_bytes(bytes(range(256)) * 8)
    assert "weights.bin is not a text file" in _fails(capsys, *run, str(binary))
    assert not (tmp_path / "run").exists()  # refused before anything was written


def test_gpt_char_on_a_one_character_corpus(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "input.txt").write_text("a")
    err = _fails(
        capsys,
        "run",
        "--workload",
        "gpt-char",
        "--data-dir",
        str(tmp_path / "data"),
        *QUICK,
        "--out",
        str(tmp_path / "run"),
    )
    assert "input.txt holds 1 character; gpt-char with block_size 256 needs at least 2561" in err


def test_gpt_char_with_an_absurd_context(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    err = _fails(capsys, "run", "--workload", "gpt-char", "--block-size", str(10**9), *QUICK)
    assert "gpt model of 3.84e+11 parameters needs" in err


def test_mnist_format_files_with_8x8_images_train(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    data = write_mnist_dir(tmp_path / "mnist8", n_train=60, n_test=20, size=8)
    out = tmp_path / "run"
    argv = ["run", "--workload", "mnist", "--data-dir", str(data), "--out", str(out)]
    code = main([*argv, *QUICK, "--system-interval", "0.5"])
    assert code == 0, capsys.readouterr().err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "completed" and "MNIST 8x8" in summary["workload_description"]


@pytest.fixture
def gpt_run(tmp_path: Path) -> Path:
    """A saved gpt-char run directory (a tiny untrained model)."""
    import torch

    from tests.tools.test_sample import PATTERN, write_run
    from trainscope.data.text import CharVocab
    from trainscope.workloads.gpt import GPT, GPTConfig

    vocab = CharVocab.from_text(PATTERN)
    torch.manual_seed(0)
    model = GPT(GPTConfig(len(vocab), block_size=8, n_layer=1, n_head=1, n_embd=8, dropout=0.0))
    return write_run(tmp_path / "gpt", model, vocab)


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--temperature", "nan"], "--temperature must be a finite number >= 0"),
        (["--temperature", "-1"], "--temperature must be a finite number >= 0"),
        (["--top-k", "0"], "--top-k must be a positive integer, got 0"),
        (["--device", "meta"], "--device must be auto, cpu, cuda or cuda:N, got 'meta'"),
        (["--seed", str(10**23)], "--seed must be an integer in 0..2**63 - 1"),
        (["--tokens", str(10**11)], "--tokens must be an integer in 1..1000000"),
    ],
    ids=["temperature-nan", "temperature-negative", "top-k-0", "meta", "seed-huge", "tokens"],
)
def test_sample_refuses_in_one_line(
    capsys: pytest.CaptureFixture[str], gpt_run: Path, argv: list[str], words: str
) -> None:
    assert words in _fails(capsys, "sample", str(gpt_run), "--tokens", "5", *argv)


def test_sample_with_zero_temperature_is_greedy(
    capsys: pytest.CaptureFixture[str], gpt_run: Path
) -> None:
    # 0 is documented as greedy (not refused), and the default device list has auto too.
    argv = ["sample", str(gpt_run), "--prompt", "t", "--tokens", "6", "--temperature", "0"]
    assert main([*argv, "--device", "auto"]) == 0
    first = capsys.readouterr().out
    assert main([*argv, "--seed", "7"]) == 0
    assert capsys.readouterr().out == first and len(first) == len("t") + 6 + 1
