"""Optional tracking sinks: the interface, the fan-out, and the factory.

A sink mirrors what a run records (steps, epochs, system samples, the summary) to an
outside tracker such as Weights & Biases or TensorBoard. Sinks are off by default and the
run directory stays the source of truth: a sink may fail, lag or be switched off, and the
run record is complete all the same. That is why :class:`Sinks` swallows a sink's errors
(after one warning) instead of letting a tracking service end a training run.

This module imports neither torch nor any tracker; a sink's package is imported only when
:func:`make_sinks` builds that sink.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from trainscope.errors import ConfigError, TrainscopeError

SINK_NAMES = ("wandb", "tensorboard")

# What `pip install` gives each sink its package; shown when the package is missing.
INSTALL_HINTS = {
    "wandb": 'pip install "trainscope[wandb]"',
    "tensorboard": 'pip install "trainscope[tensorboard]"',
}

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


def system_scalars(sample: Mapping[str, Any]) -> dict[str, float]:
    """``system/...`` scalars of one sample; memory in MiB, one group per GPU."""
    out: dict[str, float] = {}
    for key, name, scale in (
        ("cpu_percent", "cpu_percent", 1.0),
        ("rss_bytes", "rss_mib", 1.0 / MIB),
        ("system_memory_percent", "memory_percent", 1.0),
    ):
        value = _number(sample.get(key))
        if value is not None:
            out[f"system/{name}"] = value * scale
    for gpu in sample.get("gpus") or []:
        # A GPU whose query failed carries only {"index", "error"}: nothing to plot.
        i = gpu.get("index")
        for key, name, scale in (
            ("util_percent", "util_percent", 1.0),
            ("memory_used_bytes", "memory_used_mib", 1.0 / MIB),
            ("power_w", "power_w", 1.0),
        ):
            value = _number(gpu.get(key))
            if value is not None:
                out[f"system/gpu{i}_{name}"] = value * scale
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


# --- fan-out -----------------------------------------------------------------------------


class Sinks:
    """Several sinks behind the :class:`Sink` methods; an empty one does nothing.

    A sink whose method raises is disabled for the rest of the run after one warning line
    on stderr; the message is kept in :attr:`warnings_list` for the run summary. Only
    ``Exception`` is caught: Ctrl-C (KeyboardInterrupt) still stops the run. Calls after
    :meth:`finish` are ignored (a last system sample may race with the end of the run).
    """

    def __init__(self, sinks: Sequence[Sink] = ()) -> None:
        self.sinks: list[Sink] = list(sinks)
        self.disabled: list[str] = []
        self._disabled_ids: set[int] = set()
        self.warnings_list: list[str] = []
        self._finished = False
        # The system sampler calls log_system from its own thread while the training
        # thread logs steps: one lock keeps each sink's calls strictly one at a time.
        self._lock = threading.Lock()

    @property
    def names(self) -> list[str]:
        """Names of all sinks, enabled or not."""
        return [s.name for s in self.sinks]

    def __len__(self) -> int:
        return len(self.sinks)

    def __iter__(self) -> Iterator[Sink]:
        return iter(self.sinks)

    def folders(self) -> tuple[str, ...]:
        """The run-directory folders the sinks write (the run records their files)."""
        return tuple(s.folder for s in self.sinks if s.folder)

    def describe(self) -> dict[str, Any]:
        """What the run summary records: sink names, the disabled ones, their warnings."""
        with self._lock:
            return {
                "sinks": self.names,
                "disabled": list(self.disabled),
                "warnings": list(self.warnings_list),
            }

    def _each(self, method: str, call: Callable[[Sink], None]) -> None:
        with self._lock:
            if self._finished:
                return
            if method == "finish":
                self._finished = True
            for sink in self.sinks:
                if id(sink) in self._disabled_ids:
                    continue
                try:
                    call(sink)
                except Exception as e:  # a tracker's failure must never end the run
                    self._disable(sink, method, e)

    def _disable(self, sink: Sink, method: str, error: Exception) -> None:
        self._disabled_ids.add(id(sink))
        self.disabled.append(sink.name)
        detail = " ".join(str(error).split())  # one line: W&B errors span several
        message = (
            f"tracking sink {sink.name!r} failed in {method}() and is disabled for the rest "
            f"of this run (the run directory is unaffected): {type(error).__name__}: {detail}"
        )
        self.warnings_list.append(message)
        # print, not warnings.warn: a warnings filter set to "error" would turn this back
        # into the exception we are keeping away from the training loop.
        try:
            from trainscope.textsafe import one_line

            print(f"warning: {one_line(message)}", file=sys.stderr, flush=True)
        except Exception:  # a closed stderr must not matter either
            pass

    def start(self, run_dir: Path, config: dict[str, Any], summary: dict[str, Any]) -> None:
        """Start every sink."""
        self._each("start", lambda s: s.start(Path(run_dir), config, summary))

    def log_steps(self, records: list[dict[str, Any]]) -> None:
        """Hand step records to every enabled sink."""
        if records:
            self._each("log_steps", lambda s: s.log_steps(records))

    def log_epoch(self, row: dict[str, Any]) -> None:
        """Hand an epoch row to every enabled sink."""
        self._each("log_epoch", lambda s: s.log_epoch(row))

    def log_system(self, sample: dict[str, Any]) -> None:
        """Hand a system sample to every enabled sink (safe to call from any thread)."""
        self._each("log_system", lambda s: s.log_system(sample))

    def finish(self, summary: dict[str, Any]) -> None:
        """Finish every enabled sink with the final summary."""
        self._each("finish", lambda s: s.finish(summary))


# --- factory -----------------------------------------------------------------------------


def _missing(name: str, error: BaseException) -> TrainscopeError:
    return TrainscopeError(
        f"tracking sink {name!r} needs a package that is not installed or does not import "
        f"({type(error).__name__}: {error}); install it with: {INSTALL_HINTS[name]}"
    )


def make_sinks(names: Sequence[str]) -> Sinks:
    """Build the named sinks (duplicates ignored); ``[]`` gives an empty :class:`Sinks`.

    Each sink imports its package here, so a missing or broken install is refused before
    the run directory is created. Raises :class:`ConfigError` for an unknown name and
    :class:`TrainscopeError` (with the pip command) for a missing package.
    """
    if isinstance(names, str):  # "wandb" would otherwise read as five one-letter names
        names = [names]
    wanted: list[str] = []
    for name in names:
        if name not in SINK_NAMES:
            raise ConfigError(
                f"unknown tracking sink {name!r}; choose from: {', '.join(SINK_NAMES)}"
            )
        if name not in wanted:
            wanted.append(name)
    sinks: list[Sink] = []
    for name in wanted:
        try:
            if name == "wandb":
                from trainscope.tracking.wandb_sink import WandbSink

                sinks.append(WandbSink())
            else:
                from trainscope.tracking.tensorboard_sink import TensorBoardSink

                sinks.append(TensorBoardSink())
        except TrainscopeError:
            raise
        except Exception as e:  # ImportError, or a broken install failing at import time
            raise _missing(name, e) from e
    return Sinks(sinks)
