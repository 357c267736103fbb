"""``trainscope collectives --predict``: units, interconnects, fits from a study, a run's
gradients, and bad input as one line (no process starts, torch is not needed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainscope.cli import main
from trainscope.collectives import model
from trainscope.collectives.predict_cli import parse_bandwidth, parse_latency
from trainscope.errors import ConfigError


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    try:
        code = main(["collectives", "--predict", *args])
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize(
    ("text", "gbps"),
    [("900GB/s", 900.0), ("100Gb/s", 12.5), ("400 Gb/s", 50.0), ("1GiB/s", 1.073741824),
     ("500MB/s", 0.5), ("1.5e3GB/s", 1500.0)],
)  # fmt: skip
def test_bandwidth_units(text: str, gbps: float) -> None:
    assert parse_bandwidth(text) == pytest.approx(gbps)


@pytest.mark.parametrize(
    ("text", "s"), [("5us", 5e-6), ("5µs", 5e-6), ("0.1ms", 1e-4), ("2ns", 2e-9)]
)
def test_latency_units(text: str, s: float) -> None:
    assert parse_latency(text) == pytest.approx(s)


@pytest.mark.parametrize("text", ["900", "fast", "9GB", "-1GB/s", "0GB/s", "1e400GB/s"])
def test_bad_bandwidths_are_refused(text: str) -> None:
    with pytest.raises(ConfigError):
        parse_bandwidth(text)


def test_the_issue_command_predicts_bert_base_on_8_ranks(capsys) -> None:
    code, out, err = run(capsys, "--world", "8", "--bandwidth", "900GB/s", "--latency", "5us")
    assert code == 0, err
    assert "bert-base (109.5M parameters, 201 tensors, float32) on 8 ranks" in out
    for name in ("gather-scatter", "allreduce", "allreduce-bucketed", "ddp", "fsdp"):
        assert f"\n{name} " in out
    # per tensor: 201 all_reduces of 14 latencies each = 14.07 ms of latency alone
    code, out, _ = run(
        capsys, "--world", "8", "--bandwidth", "900GB/s", "--latency", "5us", "--json"
    )
    preds = {p["strategy"]: p for p in json.loads(out)["predictions"]}
    assert preds["allreduce"]["collectives"] == 201 and preds["allreduce"]["comm_s"] > 14.07e-3
    assert preds["allreduce-bucketed"]["comm_s"] < preds["allreduce"]["comm_s"] / 5


def test_an_interconnect_by_name_and_an_override(capsys) -> None:
    code, out, _ = run(capsys, "--world", "4", "--interconnect", "PCIe4-x16")
    assert code == 0 and "PCIe 4.0 x16" in out and "31.5 GB/s" in out
    code, out, _ = run(capsys, "--world", "4", "--interconnect", "ib-400g", "--latency", "1us")
    assert code == 0 and "α = 1 µs" in out and "1/β = 50 GB/s" in out


def _study(tmp_path: Path, n: int = 2) -> Path:
    results = []
    for op in ("all_reduce", "broadcast", "all_gather", "reduce_scatter"):
        lat, bw = model.terms(op, n)
        for m in (1024, 1 << 20, 1 << 24):
            t = 30e-6 * lat + bw * m / 2e9
            results.append({"op": op, "bytes": m, "time_s": t, "world_size": n, "wrong": 0})
    d = tmp_path / "sweep"
    d.mkdir()
    (d / "study.json").write_text(json.dumps({"kind": "collectives", "results": results}))
    return d


def test_fits_from_a_study_and_gradients_from_a_run(capsys, tmp_path: Path) -> None:
    study = _study(tmp_path)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    summary = {"model": "LeNet5", "gradients": {"tensor_bytes": [600, 24, 9600, 64],
               "unit_bytes": [0, 624, 9664]}}  # fmt: skip
    (run_dir / "summary.json").write_text(json.dumps(summary))
    code, out, err = run(capsys, "--fit", str(study), "--run", str(run_dir))
    assert code == 0, err
    assert "on 2 ranks" in out and "LeNet5 of run (4 tensors)" in out
    assert "all_reduce" in out and "ring" in out and "30" in out  # the fit table: α 30 µs
    code, out, _ = run(capsys, "--fit", str(study), "--run", str(run_dir), "--json")
    preds = {p["strategy"]: p for p in json.loads(out)["predictions"]}
    want = sum(
        model.given(30e-6, 2.0, 2)["all_reduce"].time("all_reduce", s, 2)
        for s in (600, 24, 9600, 64)
    )
    assert preds["allreduce"]["comm_s"] == pytest.approx(want, rel=1e-3)


@pytest.mark.parametrize(
    ("flags", "needle"),
    [
        ([], "needs a link"),
        (["--bandwidth", "1GB/s"], "needs a link"),
        (["--interconnect", "carrier-pigeon", "--latency", "1s"], "unknown interconnect"),
        (["--world", "1", "--interconnect", "nvlink4"], "--world must be in 2"),
        (["--interconnect", "nvlink4", "--model", "gpt5"], "unknown architecture"),
        (["--interconnect", "nvlink4", "--run", "/nonexistent"], "nonexistent"),
        (["--fit", "/nonexistent"], "nonexistent"),
        (["--interconnect", "nvlink4", "--backward-ms", "-3"], "--backward-ms"),
        (["--latency", "5 parsecs", "--bandwidth", "1GB/s"], "bad latency"),
    ],
)
def test_bad_input_is_one_line(capsys, flags: list[str], needle: str) -> None:
    code, _, err = run(capsys, *flags)
    lines = err.strip().splitlines()
    assert code in (1, 2) and len(lines) == 1 and needle in lines[0], err
    assert "Traceback" not in err and "internal" not in err
