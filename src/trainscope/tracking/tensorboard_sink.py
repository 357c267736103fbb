"""TensorBoard sink: event files in ``<run_dir>/tensorboard/`` (``tensorboard --logdir``).

Uses ``torch.utils.tensorboard.SummaryWriter``, which needs the ``tensorboard`` package.
Tags match the W&B sink: ``train/loss`` and ``stages/<stage>_s`` per optimizer step,
``epoch/...`` per epoch, ``system/...`` per system sample.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from trainscope.tracking.sink import (
    Sink,
    epoch_scalars,
    flat_summary,
    step_scalars,
    system_scalars,
)

LOG_SUBDIR = "tensorboard"


def markdown_table(values: dict[str, Any]) -> str:
    """A two-column Markdown table (the TensorBoard text plugin renders Markdown)."""
    lines = ["| key | value |", "| --- | --- |"]
    for key, value in values.items():
        text = f"{value:.6g}" if isinstance(value, float) else str(value)
        lines.append(f"| {key} | {text.replace('|', '/')} |")
    return "\n".join(lines)


class TensorBoardSink(Sink):
    """Writes scalars and text summaries with a ``SummaryWriter``."""

    name = "tensorboard"
    folder = LOG_SUBDIR

    def __init__(self) -> None:
        # Import the package itself first: torch.utils.tensorboard's own error message
        # does not say which package to install.
        import tensorboard  # noqa: F401
        from torch.utils.tensorboard import SummaryWriter

        self._writer_cls = SummaryWriter
        self._writer: Any = None
        self._system_step = 0
        self.log_dir: Path | None = None

    def start(self, run_dir: Path, config: dict[str, Any], summary: dict[str, Any]) -> None:
        """Open the event file and record the config and the starting summary as text."""
        self.log_dir = Path(run_dir) / LOG_SUBDIR
        # The default queue of 10 events makes add_scalar wait for the writer thread
        # (about 90 us a call on a busy 2-core machine, 30 us with room to queue). Flushed
        # every 30 s so a live `tensorboard --logdir` keeps up; close() flushes the rest.
        self._writer = self._writer_cls(log_dir=str(self.log_dir), max_queue=1000, flush_secs=30)
        # Indented four spaces: a Markdown code block keeps the YAML's layout.
        text = yaml.safe_dump(config, sort_keys=False)
        self._writer.add_text("config", "\n".join("    " + ln for ln in text.splitlines()))
        self._writer.add_text("run", markdown_table(flat_summary(summary)))

    def log_steps(self, records: list[dict[str, Any]]) -> None:
        """Step scalars at ``global_step`` = the optimizer step."""
        for record in records:
            for tag, value in step_scalars(record).items():
                self._writer.add_scalar(tag, value, global_step=record["step"])

    def log_epoch(self, row: dict[str, Any]) -> None:
        """Epoch scalars at ``global_step`` = the epoch number."""
        for tag, value in epoch_scalars(row).items():
            self._writer.add_scalar(tag, value, global_step=row["epoch"])

    def log_system(self, sample: dict[str, Any]) -> None:
        """System scalars at the sample's own wall time, counted as steps 0, 1, 2, ..."""
        for tag, value in system_scalars(sample).items():
            self._writer.add_scalar(
                tag, value, global_step=self._system_step, walltime=sample.get("t")
            )
        self._system_step += 1

    def finish(self, summary: dict[str, Any]) -> None:
        """Record the final summary as a text table, then flush and close the event file."""
        writer, self._writer = self._writer, None
        if writer is None:
            return
        try:
            # Text, not add_hparams: torch's add_hparams writes a second run directory.
            writer.add_text("summary", markdown_table(flat_summary(summary)))
        finally:
            writer.close()  # flushes; closing even when the text failed keeps what was logged
