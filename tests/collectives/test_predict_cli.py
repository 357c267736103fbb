"""``trainscope collectives --predict``: units, interconnects, fits from a study, a run's
gradients, and bad input as one line (no process starts, torch is not needed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainscope.cli import main
from trainscope.collectives.predict_cli import parse_bandwidth, parse_latency
from trainscope.comm import cost_model as model
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


@pytest.mark.parametrize(
    ("text", "needle"),
    [("900", "bad bandwidth"), ("fast", "bad bandwidth"), ("9GB", "bad bandwidth"),
     ("-1GB/s", "bad bandwidth"), ("0GB/s", "out of range"), ("1e400GB/s", "out of range"),
     ("1e-320GB/s", "out of range"), ("1Gib/s", "unit Gib/s is not one of"),
     ("1TiB/s", "unit TiB/s is not one of")],
)  # fmt: skip
def test_bad_bandwidths_are_refused(text: str, needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        parse_bandwidth(text)


def test_bits_per_second_up_to_terabits() -> None:
    assert parse_bandwidth("1Tb/s") == pytest.approx(125.0)


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
    for spelling in ("PCIe4-x16", "PCIe4 x16", "pcie4_x16"):  # the issue writes "PCIe4 x16"
        code, out, _ = run(capsys, "--world", "4", "--interconnect", spelling)
        assert code == 0 and "PCIe 4.0 x16" in out and "31.5 GB/s" in out
    code, out, _ = run(capsys, "--world", "4", "--interconnect", "ib-400g", "--latency", "1us")
    assert code == 0 and "α = 1 µs" in out and "1/β = 50 GB/s" in out
    assert "ib-400g's figures with --latency given" in out  # not "400 Gb/s ... NDR" alone
    code, out, _ = run(capsys, "--interconnect", "nvlink", "--bandwidth", "900GB/s", "--json")
    data = json.loads(out)
    assert "450 GB/s" not in data["link"] and "1/β = 900 GB/s" in data["link"]


def test_an_explicit_bucket_size_is_ddps_cap_too(capsys) -> None:
    code, out, _ = run(capsys, "--interconnect", "nvlink4", "--bucket-mb", "50", "--json")
    preds = {p["strategy"]: p for p in json.loads(out)["predictions"]}
    assert "<= 50 MiB" in preds["ddp"]["how"] and "<= 50 MiB" in preds["allreduce-bucketed"]["how"]
    code, out, _ = run(capsys, "--interconnect", "nvlink4", "--json")
    assert "1 MiB first, then 25 MiB" in out


def test_sweep_flags_are_refused_with_predict_and_predict_flags_without(capsys) -> None:
    from trainscope.cli import build_parser
    from trainscope.collectives.cli import SWEEP_DEFAULTS

    args = build_parser().parse_args(["collectives"])
    assert {k: getattr(args, k) for k in SWEEP_DEFAULTS} == SWEEP_DEFAULTS  # kept in step
    code, _, err = run(capsys, "--interconnect", "nvlink4", "--nproc", "5", "--sizes", "0")
    assert code in (1, 2) and "--nproc, --sizes belong to the sweep" in err
    for flag in (["--grad-dtype", "bfloat16"], ["--json"], ["--bucket-mb", "3"]):
        try:
            code = main(["collectives", *flag, "--sizes", "0"])
        except SystemExit as e:
            code = e.code
        err = capsys.readouterr().err
        assert code in (1, 2) and "only mean something with --predict" in err, flag


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
        (["--interconnect", "nvlink4", "--bucket-mb", "0"], "--bucket-mb"),
        (["--interconnect", "nvlink4", "--bucket-mb", "1e12"], "--bucket-mb"),
        (["--latency", "5 parsecs", "--bandwidth", "1GB/s"], "bad latency"),
    ],
)
def test_bad_input_is_one_line(capsys, flags: list[str], needle: str) -> None:
    code, _, err = run(capsys, *flags)
    lines = err.strip().splitlines()
    assert code in (1, 2) and len(lines) == 1 and needle in lines[0], err
    assert "Traceback" not in err and "internal" not in err


def test_a_damaged_run_record_is_one_line(capsys, tmp_path: Path) -> None:
    for bad in ([10**400], [-1], ["600"], [True], "600"):
        run_dir = tmp_path / "run"
        run_dir.mkdir(exist_ok=True)
        (run_dir / "summary.json").write_text(json.dumps({"gradients": {"tensor_bytes": bad}}))
        code, _, err = run(capsys, "--interconnect", "nvlink4", "--run", str(run_dir))
        assert code in (1, 2) and "no usable gradient sizes" in err and "internal" not in err
