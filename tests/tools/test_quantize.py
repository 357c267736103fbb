"""INT8 post-training quantization of a finished run (``trainscope quantize RUN_DIR``).

One small real digits run (LeNet5: three Linear layers in its head) is trained for the
module, then quantized with torchao; tests that need torchao skip without it.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest
import torch

from trainscope.config import from_dict
from trainscope.errors import ConfigError, DataError, TrainscopeError
from trainscope.records.ownership import MARKER, claim_dir, read_marker
from trainscope.reports import quantize_section
from trainscope.tools.quantize import (
    RESULT_FILE,
    TORCHAO_MISSING,
    format_quantize,
    model_bytes,
    quantize_run,
    tensor_bytes,
)
from trainscope.train.run import run

# A digits run that learns something in about a second: Adam, small batches, 4 epochs.
RUN = {
    "data": {"batch_size": 16},
    "train": {"epochs": 4, "optimizer": "adam", "lr": 0.005},
    "runtime": {"progress": False, "system_interval_s": 0.5},
}
DIGITS_TEST_SAMPLES = 269


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("quant") / "digits"
    summary = run(from_dict({**RUN, "out": str(out)}))
    assert summary["status"] == "completed"
    return out, summary


@pytest.fixture(scope="module")
def quantized(trained) -> dict:
    pytest.importorskip("torchao")
    out, _ = trained
    return quantize_run(out, repeats=1)


def _copy_run(src: Path, dst: Path, drop: tuple[str, ...] = ()) -> Path:
    """A copy of a run directory (marker included), without the files in ``drop``."""
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns(".trainscope.lock", *drop))
    marker = json.loads((dst / MARKER).read_text())
    marker["files"] = [f for f in marker["files"] if f not in drop]
    (dst / MARKER).write_text(json.dumps(marker))
    return dst


# --- the result ---------------------------------------------------------------------------


def test_writes_quantize_json_recorded_as_trainscopes_own(trained, quantized):
    out, _ = trained
    path = out / RESULT_FILE
    assert path.is_file()
    assert json.loads(path.read_text()) == json.loads(json.dumps(quantized))
    marker = read_marker(out)
    assert marker is not None and RESULT_FILE in marker["files"]
    claim_dir(out, "run", existing="keep").release()  # the lock was given back


def test_int8_linear_weights_are_smaller_and_counted_with_their_scales(quantized):
    size = quantized["bytes"]
    assert quantized["layers"]["linear"] == quantized["layers"]["quantized"] == 3
    assert quantized["layers"]["skipped"] == [] and quantized["layers"]["tied"] == []
    before, after = size["fp32"]["linear_weights"], size["int8"]["linear_weights"]
    # int8 data is a quarter of fp32; the per-channel scales come on top of it.
    assert before / 4 < after < before / 3
    assert size["int8"]["model"] < size["fp32"]["model"]
    # The convolutions stay fp32: the model shrinks by exactly what the Linear weights do.
    assert size["fp32"]["model"] - size["int8"]["model"] == before - after


def test_fp32_figures_are_the_runs_and_int8_stays_close(trained, quantized):
    _, summary = trained
    fp32, int8 = quantized["fp32"], quantized["int8"]
    assert quantized["split"] == "test" and quantized["samples"] == DIGITS_TEST_SAMPLES
    # The weights loaded back reproduce the run's own test figures.
    assert fp32["accuracy"] == pytest.approx(summary["test_accuracy"], abs=1e-9)
    assert fp32["loss"] == pytest.approx(summary["test_loss"], rel=1e-5)
    assert fp32["accuracy"] > 0.6
    assert abs(int8["accuracy"] - fp32["accuracy"]) <= 0.05
    assert quantized["difference"]["accuracy"] == pytest.approx(int8["accuracy"] - fp32["accuracy"])
    for figures in (fp32, int8):
        timing = figures["eval_s"]
        assert timing["n"] == 1 and len(timing["repeats"]) == 1 and timing["median"] > 0
    assert quantized["method"]["library"] == "torchao"
    assert quantized["method"]["config"] == "Int8DynamicActivationInt8WeightConfig"


def test_console_lines_and_a_second_quantize_replaces_its_own_file(trained, quantized):
    lines = format_quantize(quantized)
    assert all(isinstance(x, str) and "\n" not in x for x in lines)
    assert any("accuracy" in x for x in lines) and any("model bytes" in x for x in lines)
    out, _ = trained
    again = quantize_run(out, repeats=1, batch_size=64)
    assert again["batch_size"] == 64
    assert json.loads((out / RESULT_FILE).read_text())["batch_size"] == 64


def test_the_report_section_reads_the_real_result(trained, quantized):
    from trainscope.render.document import Document

    out, _ = trained
    doc = Document("run")
    section = quantize_section.quantize_section(out, doc)
    assert section is not None and "quantize" in section.tables
    assert quantize_section.RESULT_FILE == RESULT_FILE
    md = doc.to_markdown(out)
    assert "INT8 quantization" in md and "Linear weight bytes" in md


def test_tensor_bytes_count_the_int8_data_and_scales():
    pytest.importorskip("torchao")
    from trainscope.tools.quantize import _import_torchao, _make_config

    _, quantize_, config = _import_torchao()
    model = torch.nn.Sequential(torch.nn.Linear(64, 128))
    fp32 = model_bytes(model)
    assert fp32 == (64 * 128 + 128) * 4
    x = torch.randn(8, 64)
    expected = model(x)
    quantize_(model, _make_config(config))
    weight = tensor_bytes(model[0].weight)
    assert 64 * 128 + 128 * 4 <= weight <= 64 * 128 + 128 * 4 * 3  # data + scales (+ zeros)
    assert model_bytes(model) == weight + 128 * 4  # the bias stays fp32
    with torch.no_grad():
        assert torch.allclose(model(x), expected, atol=0.05)


# --- what the user can get wrong ----------------------------------------------------------


def test_not_a_run_directory(tmp_path):
    with pytest.raises(TrainscopeError, match="does not exist"):
        quantize_run(tmp_path / "nowhere")
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(TrainscopeError, match="not a run directory"):
        quantize_run(tmp_path)
    assert sorted(os.listdir(tmp_path)) == ["notes.txt"]  # nothing written there


def test_a_run_without_weights(trained, tmp_path):
    copy = _copy_run(trained[0], tmp_path / "run", drop=("model.safetensors", RESULT_FILE))
    with pytest.raises(TrainscopeError, match="has no model.safetensors"):
        quantize_run(copy)


def test_a_symlinked_run_directory_is_refused(trained, tmp_path):
    link = tmp_path / "link"
    link.symlink_to(trained[0], target_is_directory=True)
    with pytest.raises(TrainscopeError, match="symbolic link"):
        quantize_run(link)


def test_bad_settings_are_one_line_config_errors(trained):
    with pytest.raises(ConfigError, match="batch size"):
        quantize_run(trained[0], batch_size=0)
    with pytest.raises(ConfigError, match="repeats"):
        quantize_run(trained[0], repeats=True)
    with pytest.raises(ConfigError, match="device"):
        quantize_run(trained[0], device="tpu")


def test_without_torchao_one_line_says_how_to_get_it(trained, monkeypatch):
    # A None entry makes "import torchao" raise ImportError, installed or not.
    monkeypatch.setitem(sys.modules, "torchao", None)
    monkeypatch.setitem(sys.modules, "torchao.quantization", None)
    with pytest.raises(ConfigError) as info:
        quantize_run(trained[0])
    assert str(info.value) == TORCHAO_MISSING


def test_missing_workload_data_is_a_data_error_and_nothing_is_written(trained, tmp_path):
    pytest.importorskip("torchao")
    import yaml

    copy = _copy_run(trained[0], tmp_path / "run", drop=(RESULT_FILE,))
    config = yaml.safe_load((copy / "config.yaml").read_text())
    config["workload"].update(name="mnist", data_dir=str(tmp_path / "no-mnist-here"))
    (copy / "config.yaml").write_text(yaml.safe_dump(config))
    with pytest.raises(DataError):
        quantize_run(copy)
    assert not (copy / RESULT_FILE).exists()
    claim_dir(copy, "run", existing="keep").release()  # the lock was given back


def test_a_users_own_quantize_json_is_never_replaced(trained, tmp_path):
    pytest.importorskip("torchao")
    copy = _copy_run(trained[0], tmp_path / "run", drop=(RESULT_FILE,))
    (copy / RESULT_FILE).write_text("my notes")
    with pytest.raises(TrainscopeError, match="did not write it"):
        quantize_run(copy, repeats=1)
    assert (copy / RESULT_FILE).read_text() == "my notes"


def test_a_run_in_use_is_refused(trained, tmp_path):
    pytest.importorskip("torchao")
    copy = _copy_run(trained[0], tmp_path / "run", drop=(RESULT_FILE,))
    with claim_dir(copy, "run", existing="keep"), pytest.raises(TrainscopeError, match="in use"):
        quantize_run(copy, repeats=1)
    assert not (copy / RESULT_FILE).exists()


def test_cli_quantize_then_report_shows_the_int8_section(trained, tmp_path, capsys, monkeypatch):
    """`trainscope quantize RUN_DIR` prints its figures and the file it wrote; `trainscope
    report RUN_DIR` then has the section and its table in tables.tex."""
    pytest.importorskip("torchao")
    from tests.reports.cheap import unsaved_figures
    from trainscope.cli import main

    unsaved_figures(monkeypatch)  # the report's text is read here, not its figures

    run_dir = _copy_run(trained[0], tmp_path / "copy")
    assert main(["quantize", str(run_dir), "--repeats", "1"]) == 0
    out = capsys.readouterr().out
    assert "INT8" in out and f"wrote {run_dir / RESULT_FILE}" in out
    assert main(["report", str(run_dir), "-q"]) == 0
    md = (run_dir / "report" / "report.md").read_text()
    assert "## INT8 quantization" in md
    assert "tab:copy-quantize" in (run_dir / "report" / "tables.tex").read_text()


def test_cli_quantize_of_a_non_run_is_one_line(tmp_path, capsys):
    from trainscope.cli import main

    assert main(["quantize", str(tmp_path)]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "error" in err[0] and "internal" not in err[0]


def test_console_line_gives_the_spread_it_names() -> None:
    """The evaluation line named a spread and gave no value ("median of n=5, IQR; ..."):
    each model's median comes with its own IQR (or min-max) values."""

    def timing(median: float, low: float, high: float, n: int, kind: str) -> dict:
        return {"median": median, "low": low, "high": high, "n": n, "spread": kind}

    result = {
        "fp32": {"loss": 0.1, "eval_s": timing(0.120, 0.118, 0.125, 5, "IQR")},
        "int8": {"loss": 0.1, "eval_s": timing(0.080, 0.079, 0.083, 5, "IQR")},
    }
    line = format_quantize(result)[-1]
    assert line.startswith(
        "evaluation: 0.120 s (IQR 0.118–0.125) fp32, 0.080 s (IQR 0.079–0.083) int8"
    )
    assert "median of n=5" in line
    one = {k: {"loss": 0.1, "eval_s": timing(0.1, 0.1, 0.1, 1, "single")} for k in ("fp32", "int8")}
    assert format_quantize(one)[-1].startswith("evaluation: 0.100 s fp32, 0.100 s int8 (")
