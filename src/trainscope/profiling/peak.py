"""Peak FLOP/s of a device, and model FLOPs utilisation (MFU) against it.

MFU = achieved model FLOP/s / the device's peak FLOP/s for the precision used. The peak
comes from a small table of NVIDIA datasheet figures below, or from the
``TRAINSCOPE_PEAK_FLOPS`` environment variable (a number of FLOP/s, e.g. ``312e12``) for
any other device. An unknown device (and any CPU, unless the variable is set) has no peak:
MFU is then reported as not available, never guessed.

The figures are the **dense** tensor-core rates (NVIDIA datasheets quote bf16/fp16/tf32
with 2:4 structured sparsity, twice the dense rate; sparsity is never what a training run
gets). fp32 is the plain (non-tensor-core) FP32 rate, which is what matmuls run at when
TF32 is off. GeForce cards are listed at their fp16/bf16 rate *with fp32 accumulation*
(what PyTorch uses), half their advertised fp16-accumulate rate.
"""

from __future__ import annotations

import math
import os
import re
from typing import TYPE_CHECKING

from trainscope.errors import ConfigError

if TYPE_CHECKING:  # torch is imported only where a device is queried: reports can use mfu()
    import torch

ENV_VAR = "TRAINSCOPE_PEAK_FLOPS"

_T = 1e12


def _row(half: float, tf32: float, fp32: float, *, bf16: bool = True) -> dict[str, float]:
    """Table row in TFLOP/s -> FLOP/s per precision. ``half`` is the fp16 rate, also bf16's
    unless the chip has no bf16 tensor cores (``bf16=False``: Volta, Turing)."""
    row = {"fp16": half * _T, "tf32": tf32 * _T, "fp32": fp32 * _T}
    if bf16:
        row["bf16"] = half * _T
    return row


# (name pattern, row); first match wins, so the more specific patterns come first
# ("H100 NVL" before "H100", "A100" before "A10"). Patterns are matched case-insensitively
# against torch.cuda.get_device_name(), e.g. "NVIDIA H100 80GB HBM3",
# "NVIDIA A100-SXM4-80GB", "Tesla V100-SXM2-16GB". Figures in TFLOP/s: half (fp16/bf16)
# tensor, tf32 tensor, plain fp32.
PEAKS: tuple[tuple[str, dict[str, float]], ...] = (
    # Hopper. H200 has H100 SXM's compute (more and faster memory); NVL parts clock lower.
    (r"H200.*NVL", _row(835.5, 417.5, 60)),
    (r"H200", _row(989.4, 494.7, 66.9)),
    (r"H100.*NVL", _row(835.5, 417.5, 60)),
    (r"H100.*PCIE", _row(756.5, 378, 51.2)),
    (r"H100", _row(989.4, 494.7, 66.9)),  # SXM5 ("H100 80GB HBM3")
    # Ampere / Ada data-centre and workstation parts (A100: SXM4 and PCIe, 40 and 80 GB).
    (r"A100", _row(312, 156, 19.5)),
    (r"\bA10\b", _row(125, 62.5, 31.2)),  # not the A10G, whose figures NVIDIA does not publish
    (r"\bL40S\b", _row(362, 183, 91.6)),
    (r"\bL4\b", _row(121, 60, 30.3)),
    (r"RTX A6000", _row(154.8, 77.4, 38.7)),
    # Volta / Turing: fp16 tensor cores only; TF32 does not exist there, so "tf32" matmuls
    # run in plain fp32 and get the fp32 figure; bf16 has no tensor-core support (no peak).
    (r"V100S", _row(130, 16.4, 16.4, bf16=False)),
    (r"V100.*PCIE", _row(112, 14, 14, bf16=False)),
    (r"V100", _row(125, 15.7, 15.7, bf16=False)),  # SXM2
    (r"\bT4\b", _row(65, 8.1, 8.1, bf16=False)),
    # GeForce, half precision with fp32 accumulation (what PyTorch uses).
    (r"RTX 4090\b(?! D)", _row(165.2, 82.6, 82.6)),
    (r"RTX 3090\b(?! Ti)", _row(71, 35.6, 35.6)),
)

_PRECISIONS = {
    "bf16": "bf16",
    "bfloat16": "bf16",
    "fp16": "fp16",
    "float16": "fp16",
    "half": "fp16",
    "tf32": "tf32",
    "fp32": "fp32",
    "float32": "fp32",
}


def _precision(precision: str) -> str:
    try:
        return _PRECISIONS[precision.lower()]
    except KeyError:
        raise ValueError(
            f"unknown precision {precision!r}; expected one of {', '.join(_PRECISIONS)}"
        ) from None


def peak_flops_for_name(name: str, precision: str) -> float | None:
    """Dense peak FLOP/s of the GPU called ``name`` (as CUDA reports it) at ``precision``
    (bf16, fp16, tf32 or fp32); None when the table does not know the device or the
    device has no hardware support for the precision."""
    prec = _precision(precision)
    for pattern, peaks in PEAKS:
        if re.search(pattern, name, flags=re.IGNORECASE):
            return peaks.get(prec)
    return None


def _env_peak() -> float | None:
    raw = os.environ.get(ENV_VAR)
    if raw is None or not raw.strip():
        return None
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{ENV_VAR}={raw!r} is not a number of FLOP/s (e.g. 312e12)") from None
    if not math.isfinite(value) or value <= 0:
        raise ConfigError(f"{ENV_VAR}={raw!r} must be a positive number of FLOP/s")
    return value


def peak_flops(device: torch.device, precision: str) -> float | None:
    """Dense peak FLOP/s of ``device`` at ``precision``, or None when it is not known.

    ``TRAINSCOPE_PEAK_FLOPS`` (if set) wins for any device, CPUs included; otherwise CUDA
    devices are looked up by name in :data:`PEAKS`, and anything else gets None.
    """
    _precision(precision)  # a typo is an error even when the variable is set
    env = _env_peak()
    if env is not None:
        return env
    import torch

    device = torch.device(device)
    if device.type != "cuda":
        return None
    return peak_flops_for_name(torch.cuda.get_device_name(device), precision)


def mfu(
    flops_per_sample: float | None,
    samples_per_s: float | None,
    peak: float | None,
    *,
    n_devices: int = 1,
) -> float | None:
    """Model FLOPs utilisation: ``flops_per_sample * samples_per_s / (peak * n_devices)``.

    ``peak`` is one device's peak FLOP/s; ``samples_per_s`` the throughput of all
    ``n_devices`` together. None when any figure is missing (no analytic FLOPs, no known
    peak) or not positive.
    """
    if flops_per_sample is None or samples_per_s is None or peak is None:
        return None
    if flops_per_sample <= 0 or samples_per_s <= 0 or peak <= 0 or n_devices < 1:
        return None
    return flops_per_sample * samples_per_s / (peak * n_devices)
