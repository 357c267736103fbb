"""Optional tracking sinks (W&B, TensorBoard) that mirror a run; off by default.

The run directory stays the source of truth. Importing this package imports neither torch
nor any tracker: ``make_sinks`` imports a sink's package only when that sink is asked for.
"""

from trainscope.tracking.base import INSTALL_HINTS, SINK_NAMES, Sinks, make_sinks
from trainscope.tracking.sink import (
    Sink,
    epoch_scalars,
    flat_summary,
    step_scalars,
    system_scalars,
)

__all__ = [
    "INSTALL_HINTS",
    "SINK_NAMES",
    "Sink",
    "Sinks",
    "epoch_scalars",
    "flat_summary",
    "make_sinks",
    "step_scalars",
    "system_scalars",
]
