"""What every tracking sink shares: the :class:`Sink` interface and the scalar flatteners.

A module of its own so imports flow one way: the sinks (``wandb_sink``,
``tensorboard_sink``) and the factory in ``base`` import it, and it imports neither.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

MIB = 1024 * 1024


class Sink:
    """One tracker. Every method is a no-op here, so a sink overrides only what it uses.

    Methods are called in order ``start``, any number of ``log_*``, then ``finish``.
    :class:`Sinks` serialises the calls, so a sink needs no lock of its own even though
    ``log_system`` comes from the system sampler's thread.
    """

    name: str = "sink"
    folder: str | None = None
    """The folder of the run directory the sink writes into (recorded as trainscope's)."""

    def start(self, run_dir: Path, config: dict[str, Any], summary: dict[str, Any]) -> None:
        """The run directory exists and holds config.yaml; ``summary`` is the initial one."""

    def log_steps(self, records: list[dict[str, Any]]) -> None:
        """Step records ``{"step", "epoch", "loss", "batch_size", "stages": {stage: s}}``."""

    def log_epoch(self, row: dict[str, Any]) -> None:
        """An epoch row ``{"epoch", "train_loss", "val_loss", "val_accuracy", ...}``."""

    def log_system(self, sample: dict[str, Any]) -> None:
        """One system sample (as written to system.jsonl)."""

    def finish(self, summary: dict[str, Any]) -> None:
        """The final summary (``status`` is ``completed`` or ``failed``); release resources."""


# --- what the sinks log, shared so every tracker shows the same names --------------------


def _number(value: Any) -> float | None:
    """``value`` as a float when it is a real number (bools and None are not)."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if hasattr(value, "item"):  # numpy / torch scalars
        try:
            item = value.item()
        except (TypeError, ValueError, RuntimeError):
            return None
        return _number(item)
    return None


def step_scalars(record: Mapping[str, Any]) -> dict[str, float]:
    """``train/loss`` and ``stages/<stage>_s`` of one step record."""
    out: dict[str, float] = {}
    loss = _number(record.get("loss"))
    if loss is not None:
        out["train/loss"] = loss
    for stage, seconds in (record.get("stages") or {}).items():
        value = _number(seconds)
        if value is not None:
            out[f"stages/{stage}_s"] = value
    return out


EPOCH_KEYS = ("train_loss", "val_loss", "val_accuracy", "duration_s", "samples_per_s")


def epoch_scalars(row: Mapping[str, Any]) -> dict[str, float]:
    """``epoch/<key>`` for the keys of an epoch row that have a value (val_* may be None)."""
    out: dict[str, float] = {}
    for key in EPOCH_KEYS:
        value = _number(row.get(key))
        if value is not None:
            out[f"epoch/{key}"] = value
    return out


# (key in the sample, scalar name, scale) of the machine's scalars and of each GPU's.
SYSTEM_FIELDS = (
    ("cpu_percent", "cpu_percent", 1.0),
    ("rss_bytes", "rss_mib", 1.0 / MIB),
    ("system_memory_percent", "memory_percent", 1.0),
)
GPU_FIELDS = (
    ("util_percent", "util_percent", 1.0),
    ("memory_used_bytes", "memory_used_mib", 1.0 / MIB),
    ("power_w", "power_w", 1.0),
)


def _scaled(
    source: Mapping[str, Any], fields: tuple[tuple[str, str, float], ...], prefix: str
) -> dict[str, float]:
    """``prefix + name``: the scaled value of each field ``source`` has a number for."""
    out: dict[str, float] = {}
    for key, name, scale in fields:
        value = _number(source.get(key))
        if value is not None:
            out[f"{prefix}{name}"] = value * scale
    return out


def system_scalars(sample: Mapping[str, Any]) -> dict[str, float]:
    """``system/...`` scalars of one sample; memory in MiB, one group per GPU."""
    out = _scaled(sample, SYSTEM_FIELDS, "system/")
    for gpu in sample.get("gpus") or []:
        # A GPU whose query failed carries only {"index", "error"}: nothing to plot.
        out.update(_scaled(gpu, GPU_FIELDS, f"system/gpu{gpu.get('index')}_"))
    return out


def flat_summary(summary: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Scalars (numbers, strings, bools) of a summary, nested keys joined with ``/``.

    Lists (epochs, first losses) are left out: trackers show them as plots already.
    """
    out: dict[str, Any] = {}
    for key, value in summary.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flat_summary(value, prefix=f"{name}/"))
        elif isinstance(value, (str, bool)):
            out[name] = value
        elif (number := _number(value)) is not None:
            out[name] = int(value) if isinstance(value, int) else number
    return out
