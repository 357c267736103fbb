"""Optional tracking sinks: the fan-out and the factory (the interface is in ``sink``).

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
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from trainscope.config import SINK_NAMES
from trainscope.errors import ConfigError, TrainscopeError
from trainscope.tracking.sink import Sink
from trainscope.util.textsafe import one_line

# What `pip install` gives each sink its package; shown when the package is missing.
INSTALL_HINTS = {
    "wandb": 'pip install "trainscope[wandb]"',
    "tensorboard": 'pip install "trainscope[tensorboard]"',
}


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


def make_sinks(names: Sequence[str], quiet: bool = False) -> Sinks:
    """Build the named sinks (duplicates ignored); ``[]`` gives an empty :class:`Sinks`.
    ``quiet`` (``-q``): the sinks print nothing either (W&B's own output included).

    Each sink imports its package here, so a missing or broken install is refused before
    the run directory is created. Raises :class:`ConfigError` for an unknown name and
    :class:`TrainscopeError` (with the pip command) for a missing package.
    """
    from trainscope.tracking.tensorboard_sink import TensorBoardSink
    from trainscope.tracking.wandb_sink import WandbSink

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
                sinks.append(WandbSink(quiet=quiet))
            else:
                sinks.append(TensorBoardSink())
        except TrainscopeError:
            raise
        except Exception as e:  # ImportError, or a broken install failing at import time
            raise _missing(name, e) from e
    return Sinks(sinks)
