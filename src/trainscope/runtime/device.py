"""Device choice, seeding and the environment record (env.json)."""

from __future__ import annotations

import os
import platform
import random
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch

from trainscope.errors import DeviceError
from trainscope.version import __version__


def resolve_device(name: str) -> torch.device:
    """Turn ``auto | cpu | cuda | cuda:N`` into a device that exists, or fail clearly."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dev = torch.device(name)
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise DeviceError(f"device {name!r} asked for, but CUDA is not available here")
        index = dev.index or 0
        if index >= torch.cuda.device_count():
            raise DeviceError(
                f"device {name!r} asked for, but only {torch.cuda.device_count()} GPU(s) exist"
            )
        return torch.device("cuda", index)
    return dev


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy and torch (all devices) from one number."""
    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)


def device_name(device: torch.device) -> str:
    """A human-readable name of the device."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return platform.processor() or platform.machine() or "cpu"


def _git_sha() -> str | None:
    # The sha of the checkout the user runs from, if any: provenance of the code used.
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            cwd=Path.cwd(),
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def host_memory_bytes() -> int | None:
    """The machine's physical memory (None where the OS does not say): the limit a CPU
    run's tensors share with everything else."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):  # no sysconf (Windows) or no such name
        return None


LOW_PRECISION_UNITS = {"bf16": ("avx512_bf16", "amx_bf16"), "fp16": ("avx512_fp16", "amx_fp16")}
"""CPU flags (Linux /proc/cpuinfo) of units that run bf16 / fp16 arithmetic natively."""


def cpu_low_precision() -> dict[str, bool] | None:
    """Whether this CPU has native bf16 / fp16 units, or None where the OS does not say
    (without them autocast on a CPU converts and runs slower than fp32)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            flags = next((ln.split(":", 1)[1].split() for ln in f if ln.startswith("flags")), None)
    except OSError:
        return None
    if flags is None:
        return None
    return {k: any(u in flags for u in units) for k, units in LOW_PRECISION_UNITS.items()}


def describe_environment(device: torch.device) -> dict[str, Any]:
    """Versions, devices and host: what env.json holds."""
    env: dict[str, Any] = {
        "trainscope_version": __version__,
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "platform": platform.platform(),
        "hostname": socket.gethostname(),
        "cpu_count": os.cpu_count(),
        "host_memory_bytes": host_memory_bytes(),
        "cpu_low_precision_units": cpu_low_precision(),
        "torch_num_threads": torch.get_num_threads(),
        "device": str(device),
        "device_name": device_name(device),
        "gpus": [],
        "git_sha": _git_sha(),
        "argv": sys.argv,
    }
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)
            env["gpus"].append(
                {
                    "index": i,
                    "name": p.name,
                    "total_memory_bytes": p.total_memory,
                    "capability": f"{p.major}.{p.minor}",
                }
            )
    return env
