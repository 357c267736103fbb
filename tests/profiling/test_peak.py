"""Tests for trainscope.profiling.peak: the peak FLOP/s table, its override, and MFU."""

from __future__ import annotations

import pytest
import torch

from trainscope.errors import ConfigError
from trainscope.profiling.peak import ENV_VAR, PEAKS, mfu, peak_flops, peak_flops_for_name

T = 1e12


@pytest.fixture(autouse=True)
def no_env_override(monkeypatch) -> None:
    monkeypatch.delenv(ENV_VAR, raising=False)


@pytest.mark.parametrize(
    ("name", "bf16", "tf32", "fp32"),
    [
        ("NVIDIA H100 80GB HBM3", 989.4, 494.7, 66.9),  # SXM
        ("NVIDIA H100 PCIe", 756.5, 378, 51.2),
        ("NVIDIA H100 NVL", 835.5, 417.5, 60),
        ("NVIDIA H200", 989.4, 494.7, 66.9),
        ("NVIDIA H200 NVL", 835.5, 417.5, 60),
        ("NVIDIA A100-SXM4-80GB", 312, 156, 19.5),
        ("NVIDIA A100-PCIE-40GB", 312, 156, 19.5),
        ("NVIDIA A10", 125, 62.5, 31.2),
        ("NVIDIA L4", 121, 60, 30.3),
        ("NVIDIA L40S", 362, 183, 91.6),
        ("NVIDIA GeForce RTX 4090", 165.2, 82.6, 82.6),
    ],
)
def test_known_gpus(name: str, bf16: float, tf32: float, fp32: float) -> None:
    assert peak_flops_for_name(name, "bf16") == pytest.approx(bf16 * T)
    assert peak_flops_for_name(name, "fp16") == pytest.approx(bf16 * T)
    assert peak_flops_for_name(name, "tf32") == pytest.approx(tf32 * T)
    assert peak_flops_for_name(name, "fp32") == pytest.approx(fp32 * T)
    assert peak_flops_for_name(name.lower(), "bfloat16") == pytest.approx(bf16 * T)


def test_similar_names_do_not_collide() -> None:
    assert peak_flops_for_name("NVIDIA A10G", "bf16") is None  # not the A10
    assert peak_flops_for_name("NVIDIA L40", "bf16") is None  # not the L4 or L40S
    assert peak_flops_for_name("NVIDIA GeForce RTX 3090 Ti", "bf16") is None
    assert peak_flops_for_name("AMD Instinct MI300X", "bf16") is None


def test_volta_and_turing_have_no_bf16_and_fp32_for_tf32() -> None:
    for name in (
        "Tesla V100-SXM2-16GB",
        "Tesla V100-PCIE-32GB",
        "Tesla V100S-PCIE-32GB",
        "Tesla T4",
    ):
        assert peak_flops_for_name(name, "bf16") is None
        assert peak_flops_for_name(name, "tf32") == peak_flops_for_name(name, "fp32")
    assert peak_flops_for_name("Tesla V100-SXM2-16GB", "fp16") == 125 * T
    assert peak_flops_for_name("Tesla V100-PCIE-32GB", "fp16") == 112 * T


def test_table_holds_dense_figures() -> None:
    # Sparse datasheet figures are exactly twice the dense ones; a dense table has half
    # precision at most 2x tf32 and nothing above 1 PFLOP/s.
    for pattern, row in PEAKS:
        assert {"fp16", "tf32", "fp32"} <= row.keys(), pattern
        assert all(0 < v < 1000 * T for v in row.values()), pattern
        assert row["fp16"] <= 2 * row["tf32"] * 1.01 or row["tf32"] == row["fp32"], pattern
        assert row["tf32"] >= row["fp32"], pattern


def test_unknown_precision_is_an_error() -> None:
    with pytest.raises(ValueError, match="fp8"):
        peak_flops_for_name("NVIDIA H100 PCIe", "fp8")
    with pytest.raises(ValueError):
        peak_flops(torch.device("cpu"), "int4")


def test_cpu_has_no_peak_unless_overridden(monkeypatch) -> None:
    assert peak_flops(torch.device("cpu"), "fp32") is None
    monkeypatch.setenv(ENV_VAR, "1.5e12")
    assert peak_flops(torch.device("cpu"), "fp32") == 1.5e12


@pytest.mark.parametrize("raw", ["lots", "-1", "0", "nan", "inf"])
def test_bad_override_is_a_config_error(monkeypatch, raw: str) -> None:
    monkeypatch.setenv(ENV_VAR, raw)
    with pytest.raises(ConfigError, match=ENV_VAR):
        peak_flops(torch.device("cpu"), "bf16")


def test_cuda_devices_are_looked_up_by_name(monkeypatch) -> None:
    # No GPU needed: the device name is all the lookup reads.
    names: list[object] = []

    def fake_name(device: object) -> str:
        names.append(device)
        return "NVIDIA A100-SXM4-40GB"

    monkeypatch.setattr(torch.cuda, "get_device_name", fake_name)
    assert peak_flops(torch.device("cuda", 1), "bf16") == 312 * T
    assert names == [torch.device("cuda", 1)]
    monkeypatch.setenv(ENV_VAR, "100e12")
    assert peak_flops(torch.device("cuda", 1), "bf16") == 100e12  # the override wins


def test_mfu() -> None:
    # 1e9 FLOPs per sample at 1,000 samples/s on a 10 TFLOP/s device: 10%.
    assert mfu(1e9, 1000.0, 10 * T) == pytest.approx(0.1)
    assert mfu(1e9, 1000.0, 10 * T, n_devices=2) == pytest.approx(0.05)
    assert mfu(None, 1000.0, 10 * T) is None
    assert mfu(1e9, None, 10 * T) is None
    assert mfu(1e9, 1000.0, None) is None
    assert mfu(1e9, 0.0, 10 * T) is None


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_real_gpu_lookup() -> None:
    name = torch.cuda.get_device_name(0)
    value = peak_flops(torch.device("cuda", 0), "bf16")
    assert value is None or 10 * T < value < 1000 * T, (name, value)
    if any(k in name for k in ("H100", "H200", "A100")):
        assert value is not None, name
