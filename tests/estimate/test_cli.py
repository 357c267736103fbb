"""``trainscope estimate-memory`` through its own parser: the ZeRO paper's worked example,
the table and the dominant component, --measure on a workload, one-line errors, and that
a named architecture is estimated without importing torch."""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from typing import Any

import pytest

from trainscope.errors import ConfigError
from trainscope.estimate.cli import add_parser, main


def _run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="trainscope")
    add_parser(parser.add_subparsers(dest="command"))
    return main(parser.parse_args(["estimate-memory", *argv]))


def _json(argv: list[str], capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    assert _run([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_the_zero_papers_worked_example(capsys: pytest.CaptureFixture[str]) -> None:
    """Rajbhandari et al. 2020: 7.5B parameters on 64 devices with mixed-precision Adam hold
    120 GB, 31.4 GB, 16.6 GB and 1.9 GB of model states per device."""
    out = _json(
        "--params 7.5e9 --world-size 64 --optimizer adam --precision amp --states-only".split(),
        capsys,
    )
    got = {k: round(v["model_states"] / 1e9, 1) for k, v in out["shardings"].items()}
    assert got == {"ddp": 120.0, "zero1": 31.4, "zero2": 16.6, "zero3": 1.9}
    assert all(v["total"] == v["model_states"] for v in out["shardings"].values())
    assert out["bytes_per_parameter"].startswith("2 + 2 + 12 = 16")


def test_gpt2_xl_table_names_the_dominant_component(capsys: pytest.CaptureFixture[str]) -> None:
    argv = "--arch gpt2-xl --world-size 8 --precision amp --batch-size 8 --seq-len 1024"
    assert _run(argv.split()) == 0
    text = capsys.readouterr().out
    for word in ("DDP", "ZeRO-1", "ZeRO-2", "ZeRO-3/FSDP", "fp32 master weights", "dominant"):
        assert word in text
    out = _json(argv.split(), capsys)
    ddp, zero3 = out["shardings"]["ddp"], out["shardings"]["zero3"]
    assert ddp["weights"] == 2 * 1_557_611_200 and ddp["master_weights"] == 4 * 1_557_611_200
    assert ddp["dominant"] == zero3["dominant"] == "activations"
    assert zero3["model_states"] < ddp["model_states"] / 7
    # Full checkpointing leaves each block its input: activations fall by more than 10x.
    ckpt = _json([*argv.split(), "--checkpointing", "full"], capsys)
    assert ckpt["activations"]["total_bytes"] < out["activations"]["total_bytes"] / 10
    assert any(a["what"] == "a checkpointed block recomputed" for a in ckpt["allowances"]["ddp"])


def test_params_with_a_shape_estimate_activations(capsys: pytest.CaptureFixture[str]) -> None:
    out = _json(
        "--params 124439808 --layers 12 --hidden 768 --heads 12 --seq-len 1024".split(), capsys
    )
    named = _json("--arch gpt2-small".split(), capsys)
    assert out["activations"] == named["activations"]  # the same shape, GPT-2 small
    assert out["model"]["exact_counts"] is False


def test_a_named_architecture_imports_no_torch() -> None:
    code = (
        "import sys, argparse\n"
        "from trainscope.estimate.cli import add_parser, main\n"
        "p = argparse.ArgumentParser(); add_parser(p.add_subparsers())\n"
        "main(p.parse_args(['estimate-memory', '--arch', 'gpt2-xl', '--json']))\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["model"]["parameters"] == 1_557_611_200


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ("--arch gpt2 --params 1e9", "give one model"),
        ("--world-size 2", "give one model"),
        ("--arch gpt5", "unknown architecture"),
        ("--params 1e9", "activations need the model's shape"),
        ("--params 1e9 --layers 2", "--layers and --hidden together"),
        ("--arch gpt2 --seq-len 4096", "longer than the model's 1024 positions"),
        ("--arch gpt2 --measure", "--measure trains a workload"),
        ("--arch gpt2 --preset tiny", "--preset is a workload option"),
        ("--arch gpt2 --checkpointing most", "unknown checkpointing policy"),
        ("--arch gpt2 --world-size 0", "--world-size must be at least 1"),
        ("--workload gpt-char --seq-len 32", "--block-size"),
        ("--workload digits --measure --states-only", "drop --states-only"),
        ("--workload digits --dropout 0.1", "--dropout applies to gpt-char"),
        ("--workload nope", "unknown workload"),
        # Bounded where they enter: 0 is not "the default length", NaN is no probability.
        ("--arch gpt2 --seq-len 0", "--seq-len must be at least 1, got 0"),
        ("--params 1e8 --states-only --seq-len 0", "--seq-len must be at least 1, got 0"),
        ("--params 1e8 --layers 2 --hidden 64 --seq-len 0", "--seq-len must be at least 1"),
        ("--arch gpt2 --dropout nan", r"--dropout must be a number in \[0, 1\), got nan"),
        ("--arch bert-base --dropout 1", r"--dropout must be a number in \[0, 1\), got 1.0"),
        ("--params 1e8 --layers 2 --hidden 64 --dropout -0.1", "--dropout must be a number"),
        ("--workload gpt-char --dropout nan", r"dropout must be in \[0, 1\), got nan"),
    ],
)
def test_user_errors_are_one_line(argv: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as err:
        _run(argv.split())
    assert "\n" not in str(err.value)


def test_measure_puts_the_meter_beside_the_estimate(
    capsys: pytest.CaptureFixture[str], tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TRAINSCOPE_CACHE", str(tmp_path / "cache"))
    argv = "--workload digits --optimizer adam --batch-size 16 --device cpu --measure".split()
    out = _json(argv, capsys)
    rows = {r["component"]: r for r in out["measured"]["rows"]}
    for name in ("weights (parameters)", "gradients", "optimizer states", "activations"):
        assert rows[name]["measured_bytes"] > 0
        assert rows[name]["error_pct"] == 0.0, rows[name]
    assert _run(argv) == 0  # and as tables
    text = capsys.readouterr().out
    assert "measured on cpu" in text and "error" in text


def test_measure_text_cls_at_the_padded_length_of_the_probed_batch(
    capsys: pytest.CaptureFixture[str], tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """text-cls pads each batch to its longest sequence: the comparison is made at the
    length the measured step had, read off the model's input during the run."""
    pytest.importorskip("transformers")
    pytest.importorskip("tokenizers")
    from tests.data.test_glue import write_sst2

    monkeypatch.chdir(tmp_path)
    data = write_sst2(tmp_path / "SST-2", n_train=200, n_dev=20)
    argv = (
        f"--workload text-cls --data-dir {data} --model-size tiny --max-length 24 --device cpu "
        "--optimizer adamw --checkpointing selective --batch-size 4 --measure"
    )
    out = _json(argv.split(), capsys)
    measured = out["measured"]
    assert 1 <= measured["seq_len"] <= 24
    rows = {r["component"]: r for r in measured["rows"]}
    for name in ("activations", "kept by selective checkpointing", "total (as the meter counts)"):
        assert rows[name]["measured_bytes"] > 0 and rows[name]["error_pct"] == 0.0, rows[name]


def test_one_device_shows_one_column_and_says_why(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """At world size 1 the ZeRO stages shard over one device: one column (DDP) and a note
    instead of four near-identical ones; --json keeps all four. Piped, the table is
    whole (no cell or header cut at 80 columns)."""
    for var in ("COLUMNS", "FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE"):
        monkeypatch.delenv(var, raising=False)
    assert _run("--arch gpt2-xl --precision amp --batch-size 1 --seq-len 1024".split()) == 0
    text = capsys.readouterr().out
    head = next(line for line in text.splitlines() if line.startswith("per device"))
    assert head.split() == ["per", "device", "DDP"]
    assert "ZeRO-1" not in head and "note: world size 1: ZeRO-1/2/3 shard" in text
    assert re.search(r"^fp32 master weights +6\.23 GB$", text, re.MULTILINE)
    assert "no communication allowance" in text and "allowance: communication" not in text
    assert "…" not in text
    out = _json("--arch gpt2-xl --precision amp --batch-size 1 --seq-len 1024".split(), capsys)
    assert list(out["shardings"]) == ["ddp", "zero1", "zero2", "zero3"]
    assert _run("--arch gpt2-xl --precision amp --world-size 8".split()) == 0
    text = capsys.readouterr().out
    head = next(line for line in text.splitlines() if line.startswith("per device"))
    assert head.split()[2:] == ["DDP", "ZeRO-1", "ZeRO-2", "ZeRO-3/FSDP"]
    assert "world size 1" not in text and "…" not in text
