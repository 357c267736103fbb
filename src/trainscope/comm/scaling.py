"""Data-parallel scaling projected by the α–β model (torch-free).

A data-parallel step on ``n`` devices is the compute of its share of the work plus the
all-reduce of every gradient (ring: ``2(n-1)`` messages of latency α, ``2(n-1)/n`` of the
gradient bytes through each link at 1/β). Under **strong** scaling the global batch stays
the same, so each device's compute is ``1/n`` of one device's; under **weak** scaling
each device keeps its batch, so its compute stays. The all-reduce either adds to the
compute (no overlap: the bound DDP approaches when backward is short) or hides behind it
(full overlap: the bound it approaches when backward is long); the truth lies between,
and the projection gives both. It assumes compute divides perfectly (a smaller batch per
device runs as efficiently) and leaves out what does not scale at all: start-up,
evaluation, the input pipeline's own limits (see the measured rows beside it).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from trainscope.comm.cost_model import Fit

MODES = ("strong", "weak")
DEVICES = (8, 16, 32, 64, 128, 256, 512, 1024)


@dataclass(frozen=True)
class Projected:
    """One device count's projected step."""

    devices: int
    compute_s: float
    """Each device's compute per step."""
    allreduce_s: float
    """The all-reduce of every gradient."""
    step_s_no_overlap: float
    step_s_overlap: float

    @property
    def efficiency(self) -> tuple[float, float]:
        """(no overlap, full overlap): ideal step over projected step."""
        return (self.compute_s / self.step_s_no_overlap, self.compute_s / self.step_s_overlap)

    def to_dict(self) -> dict[str, Any]:
        """Plain data, efficiencies included."""
        lo, hi = self.efficiency
        return {**asdict(self), "efficiency_no_overlap": lo, "efficiency_overlap": hi}


def project(
    compute_s: float, grad_bytes: float, fit: Fit, mode: str, devices: tuple[int, ...] = DEVICES
) -> list[Projected]:
    """The step on each device count of ``devices``, from one device's compute per step
    (``compute_s``) and the gradient bytes all-reduced per step."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
    out = []
    for n in devices:
        compute = compute_s / n if mode == "strong" else compute_s
        comm = fit.time("all_reduce", grad_bytes, n)
        out.append(Projected(n, compute, comm, compute + comm, max(compute, comm)))
    return out


__all__ = ["DEVICES", "MODES", "Projected", "project"]
