"""Console output of a run: a progress bar per epoch, and a summary table at the end."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainscope.textsafe import rich_text, terminal_text

if TYPE_CHECKING:
    from rich.progress import Progress


def _fmt_loss(x: float | None) -> str:
    return "–" if x is None else f"{x:.4f}"  # data-only runs have no loss


class RunConsole:
    """Progress and summary printing; ``enabled=False`` prints nothing (tests, studies).

    rich is imported only when something is printed: it costs about 0.1 s of start-up,
    which a quiet run (a study, a benchmark) should not pay.
    """

    def __init__(self, enabled: bool = True, progress: bool = True) -> None:
        self.enabled = enabled
        self.show_progress = progress
        if enabled:
            from rich.console import Console

            self.console = Console(stderr=True)
            if not self.console.is_terminal:
                # Piped or redirected: lines whole (never wrapped at 80 columns), and no
                # progress bars (their redraws leave blank lines in a file).
                self.console.soft_wrap = True
                self.show_progress = False
        self._progress: Progress | None = None
        self._task: Any = None
        self._t0 = 0.0
        self._samples = 0

    def start(self, run_dir: Path, summary: dict[str, Any]) -> None:
        """Say what runs where."""
        if self.enabled:
            from rich.text import Text

            # Names and the run directory are text from the config and the machine: shown
            # literally (no markup, control characters as escapes), then highlighted.
            line = Text("trainscope", style="bold")
            line.append(
                terminal_text(
                    f" {summary['workload']} on {summary['device']} "
                    f"({summary['device_name']}), {summary['precision']}, "
                    f"batch {summary['batch_size']}, workers {summary['num_workers']} "
                    f"-> {run_dir}"
                )
            )
            self.console.print(self.console.highlighter(line))

    def note(self, text: str) -> None:
        """One informational line (e.g. what --num-workers auto measured), shown literally."""
        if self.enabled:
            self.console.print(rich_text(text, newlines=True))

    def epoch_start(self, epoch: int, epochs: int, steps: int) -> None:
        """Open the progress bar of one epoch."""
        self._t0, self._samples = time.perf_counter(), 0
        if not (self.enabled and self.show_progress):
            return
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        self._progress = Progress(
            TextColumn(f"epoch {epoch}/{epochs}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("loss {task.fields[loss]}"),
            TextColumn("{task.fields[rate]} samples/s"),
            TimeElapsedColumn(),
            console=self.console,
            transient=True,
        )
        self._task = self._progress.add_task("train", total=steps, loss="–", rate="–")
        self._progress.start()

    def steps(self, records: list[dict[str, Any]]) -> None:
        """Advance by resolved steps (called every log interval, not every step)."""
        self._samples += sum(r["batch_size"] for r in records)
        if self._progress is not None and records:
            rate = self._samples / max(time.perf_counter() - self._t0, 1e-9)
            self._progress.update(
                self._task,
                advance=len(records),
                loss=_fmt_loss(records[-1]["loss"]),
                rate=f"{rate:,.0f}",
            )

    def epoch_end(self, row: dict[str, Any]) -> None:
        """Close the bar and leave one line per epoch."""
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
        if self.enabled:
            val = row["val_accuracy"]
            val_s = f", val acc {val:.4f}" if val is not None else ""
            rate = row["samples_per_s"] or 0.0
            self.console.print(
                f"epoch {row['epoch']}: train loss {_fmt_loss(row['train_loss'])}{val_s}, "
                f"{row['duration_s']:.2f} s, {rate:,.0f} samples/s",
                markup=False,  # numbers only, but never markup
            )

    def finish(self, summary: dict[str, Any], run_dir: Path | None = None) -> None:
        """Print the summary tables (accuracy, per class, time by stage, memory), then
        where the record is and the command that turns it into a report."""
        if not self.enabled:
            return
        import shlex

        from trainscope.records.jsonio import try_json_object
        from trainscope.reports.console import print_line, print_summary

        # The versions (torch, Python, CUDA) are in env.json, not in the summary.
        env = try_json_object(run_dir / "env.json") if run_dir is not None else None
        print_summary(self.console, summary, env)
        if run_dir is not None:
            where = shlex.quote(str(run_dir))
            print_line(self.console, f"saved to {run_dir} - trainscope report {where}")
