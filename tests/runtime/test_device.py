"""The environment record: what the doctor needs of the machine (its memory, its CPU's
low-precision units) is in env.json."""

from __future__ import annotations

import builtins
import io

import pytest
import torch

from trainscope.runtime import device


def test_env_json_says_the_machines_memory_and_cpu_units() -> None:
    env = device.describe_environment(torch.device("cpu"))
    assert isinstance(env["host_memory_bytes"], int) and env["host_memory_bytes"] > 1 << 28
    units = env["cpu_low_precision_units"]
    assert units is None or set(units) == {"bf16", "fp16"}


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        ("fpu avx2 avx512f", {"bf16": False, "fp16": False}),
        ("avx512f avx512_bf16", {"bf16": True, "fp16": False}),
        ("amx_tile amx_bf16 amx_fp16", {"bf16": True, "fp16": True}),
    ],
)
def test_low_precision_units_come_from_the_cpu_flags(
    monkeypatch: pytest.MonkeyPatch, flags: str, expected: dict[str, bool]
) -> None:
    text = f"processor\t: 0\nflags\t\t: {flags}\n"
    real_open = builtins.open

    def fake_open(path, *args, **kwargs):  # noqa: ANN001, ANN202
        return io.StringIO(text) if path == "/proc/cpuinfo" else real_open(path, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", fake_open)
    assert device.cpu_low_precision() == expected


def test_no_cpuinfo_is_unknown(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_file(*_a, **_k):  # noqa: ANN002, ANN003, ANN202
        raise OSError("no such file")

    monkeypatch.setattr(builtins, "open", no_file)
    assert device.cpu_low_precision() is None
