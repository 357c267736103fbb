"""The report's INT8 quantization section, from hand-written quantize.json files (no torch)."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from trainscope.records.run_dir import RecordWarning
from trainscope.render.document import Document
from trainscope.reports.quantize_section import RESULT_FILE, quantize_section, quantize_table

EVIL = "<script>alert(1)</script> | `tick` **bold** [link](http://x) &amp;"

RESULT = {
    "schema_version": 1,
    "method": {
        "library": "torchao",
        "version": "0.18.0",
        "config": "Int8DynamicActivationInt8WeightConfig",
        "compiled": False,
    },
    "device": "cpu",
    "split": "test",
    "samples": 269,
    "layers": {"linear": 3, "quantized": 3, "names": ["a", "b", "c"], "skipped": [], "tied": []},
    "bytes": {
        "fp32": {"model": 79016, "linear_weights": 74400},
        "int8": {"model": 24286, "linear_weights": 19670},
        "how": "tensor bytes",
    },
    "fp32": {
        "loss": 0.24,
        "accuracy": 0.9182,
        "eval_s": {"median": 0.010, "n": 3, "repeats": [0.010, 0.011, 0.009]},
    },
    "int8": {
        "loss": 0.2403,
        "accuracy": 0.9145,
        "eval_s": {"median": 0.020, "n": 3, "repeats": [0.020, 0.021, 0.022]},
    },
    "difference": {"loss": 0.0003, "accuracy": -0.0037},
}


def _write(tmp_path: Path, data: object) -> Path:
    text = data if isinstance(data, str) else json.dumps(data)
    (tmp_path / RESULT_FILE).write_text(text, encoding="utf-8")
    return tmp_path


def _rows(table) -> dict[str, list[str]]:
    return {row[0]: row[1:] for row in table.cells()}


def test_no_file_no_section(tmp_path):
    doc = Document("run")
    assert quantize_section(tmp_path, doc) is None
    assert "quantization" not in doc.to_markdown(tmp_path).lower()


def test_table_of_fp32_against_int8(tmp_path):
    doc = Document("run")
    section = quantize_section(_write(tmp_path, RESULT), doc)
    assert section is not None
    rows = _rows(section.tables["quantize"])
    assert rows["model bytes"] == ["77.2 KiB", "23.7 KiB", "0.31x"]
    assert rows["Linear weight bytes"] == ["72.7 KiB", "19.2 KiB", "0.26x"]
    assert rows["accuracy"] == ["91.82%", "91.45%", "-0.37 pt"]
    assert rows["loss"] == ["0.2400", "0.2403", "+0.0003"]
    assert "perplexity" not in rows  # a classifier has none
    # The spreads (min-max of 3) do not overlap: the difference may be claimed.
    assert rows["evaluation time (median)"][2] == "2.10x"
    md = doc.to_markdown(tmp_path)
    assert "## INT8 quantization" in md and "`Int8DynamicActivationInt8WeightConfig`" in md
    assert "n=3" in md
    assert section.findings == [
        "INT8 (Linear layers): model bytes 0.31x of fp32, accuracy 91.82% -> 91.45% (-0.37 pt)"
    ]


def test_times_within_noise_and_perplexity_for_a_language_model():
    data = copy.deepcopy(RESULT)
    data["int8"]["eval_s"]["repeats"] = [0.008, 0.012, 0.010]
    for key, value in (("fp32", 12.087), ("int8", 12.1)):
        data[key]["perplexity"] = value
    data["difference"]["perplexity"] = 0.013
    rows = _rows(quantize_table(data))
    assert rows["evaluation time (median)"][2] == "within noise"
    assert rows["perplexity"] == ["12.087", "12.100", "+0.013"]


def test_everything_from_the_file_is_escaped(tmp_path):
    data = copy.deepcopy(RESULT)
    data["method"].update(config=EVIL, version=EVIL)
    data.update(split=EVIL, device=EVIL)
    data["bytes"]["how"] = EVIL
    data["layers"].update(skipped=[EVIL], tied=[EVIL])
    doc = Document("run")
    assert quantize_section(_write(tmp_path, data), doc) is not None
    html, md = doc.to_html(), doc.to_markdown(tmp_path)
    assert "<script>" not in html and "&lt;script&gt;" in html
    assert "<script>" not in md and "[link](http" not in md


@pytest.mark.parametrize(
    "text",
    ["{not json", "[1, 2]", "null", json.dumps({"fp32": {}}), json.dumps({"fp32": 1, "int8": 2})],
)
def test_a_malformed_file_is_one_warning_not_a_traceback(tmp_path, text):
    doc = Document("run")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert quantize_section(_write(tmp_path, text), doc) is None
    assert len(caught) == 1 and issubclass(caught[0].category, RecordWarning)
    assert "\n" not in str(caught[0].message) and RESULT_FILE in str(caught[0].message)
    assert "quantization" not in doc.to_markdown(tmp_path).lower()


def test_missing_and_wrongly_typed_fields_show_as_dashes(tmp_path):
    data = {
        "fp32": {"loss": "x", "eval_s": "fast"},
        "int8": {"loss": None, "accuracy": True},
        "bytes": [],
        "layers": {"skipped": "all", "tied": 3},
    }
    section = quantize_section(_write(tmp_path, data), Document("run"))
    assert section is not None
    rows = _rows(section.tables["quantize"])
    assert rows["model bytes"] == ["–", "–", "–"]
    assert rows["loss"] == ["–", "–", "–"]


def test_the_section_never_imports_torch():
    code = (
        "import sys\n"
        "import trainscope.reports.quantize_section\n"
        "assert 'torch' not in sys.modules, 'torch imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
