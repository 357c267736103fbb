"""Console output of a run: a progress bar per epoch, and a summary table at the end.

How long a run will take is said once its first steps are timed ("this run: N steps,
about T at the current rate") whenever that is a minute or more: an epoch of gpt-char's
default preset on a CPU is hours, and nothing else would say so. Piped or redirected (no
progress bar), a plain progress line follows every :data:`PROGRESS_INTERVAL_S` seconds.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainscope.analysis.cpu import load_change_note, oversubscribed_note
from trainscope.records.jsonio import try_json_object
from trainscope.render.console import print_line
from trainscope.reports.console import print_summary
from trainscope.util.numfmt import fmt_sig
from trainscope.util.textsafe import rich_text, terminal_text

if TYPE_CHECKING:
    from rich.progress import Progress


PROGRESS_INTERVAL_S = 30.0
"""Seconds between progress lines when output is not a terminal."""

ESTIMATE_FROM_S = 60.0
"""A run estimated to take at least this long is told how long, once its first steps are
timed; a shorter run is not (its progress bar or epoch lines say enough)."""


def _fmt_loss(x: float | None) -> str:
    return "–" if x is None else f"{x:.4f}"  # data-only runs have no loss


def fmt_duration(seconds: float) -> str:
    """A rough duration for people: '45 s', '12 min', '3 h 20 min', '2 d 5 h'."""
    s = max(0.0, seconds)
    if s < 60:
        return f"{s:.0f} s"
    if s < 3600:
        return f"{s / 60:.0f} min"
    if s < 86400:
        h, m = divmod(round(s / 60), 60)
        return f"{h} h {m} min" if m else f"{h} h"
    d, h = divmod(round(s / 3600), 24)
    return f"{d} d {h} h" if h else f"{d} d"


class RunConsole:
    """Progress and summary printing; ``enabled=False`` prints nothing (tests, studies).

    rich is imported only when something is printed: it costs about 0.1 s of start-up,
    which a quiet run (a study, a benchmark) should not pay.
    """

    def __init__(
        self,
        enabled: bool = True,
        progress: bool = True,
        progress_interval_s: float = PROGRESS_INTERVAL_S,
    ) -> None:
        self.enabled = enabled
        self.show_progress = progress
        self.progress_lines = False
        """Plain progress lines every ``progress_interval_s`` (output not a terminal)."""
        self.progress_interval_s = progress_interval_s
        if enabled:
            from rich.console import Console

            self.console = Console(stderr=True)
            if not self.console.is_terminal:
                # Piped or redirected: lines whole (never wrapped at 80 columns), and no
                # progress bars (their redraws leave blank lines in a file): a plain line
                # at a steady interval instead.
                self.console.soft_wrap = True
                self.progress_lines = progress
                self.show_progress = False
        self._progress: Progress | None = None
        self._task: Any = None
        self._t0 = 0.0
        self._samples = 0
        # Where the run is, for the estimate and the progress lines.
        self._epoch = self._epochs = self._epoch_steps = self._done = 0
        self._t_done = 0.0  # when the last steps were read
        self._loss: float | None = None
        self._estimated = False
        self._ticker: threading.Thread | None = None
        self._stop_ticker = threading.Event()

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
        """Open the progress bar of one epoch (or, piped, start its progress lines)."""
        self._t0, self._samples = time.perf_counter(), 0
        self._epoch, self._epochs, self._epoch_steps, self._done = epoch, epochs, steps, 0
        if self.enabled and self.progress_lines:
            self._start_ticker()
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
        self._done += len(records)
        if records:
            self._t_done = time.perf_counter()
            self._loss = records[-1]["loss"]
            self._say_estimate()
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
        self.stop()
        if self.enabled:
            val = row["val_accuracy"]
            val_s = f", val acc {val:.4f}" if val is not None else ""
            rate = row["samples_per_s"] or 0.0
            self.console.print(
                f"epoch {row['epoch']}: train loss {_fmt_loss(row['train_loss'])}{val_s}, "
                f"{row['duration_s']:.2f} s, {rate:,.0f} samples/s",
                markup=False,  # numbers only, but never markup
            )

    def stop(self) -> None:
        """Close the progress bar and stop the progress lines (an epoch ended, or the run
        did, however it ended)."""
        self._stop_ticker.set()
        ticker, self._ticker = self._ticker, None
        if ticker is not None and ticker is not threading.current_thread():
            ticker.join(timeout=5)
        if self._progress is not None:
            self._progress.stop()
            self._progress = None

    # --- how long, and how far ----------------------------------------------------------

    def _rate(self) -> float | None:
        """Seconds per step in this epoch up to the last steps read (its start-up and first
        steps included; steps under way, not yet read, are not counted as slow ones)."""
        if self._done <= 0:
            return None
        return (self._t_done - self._t0) / self._done

    def _steps_left(self) -> int:
        later = max(0, self._epochs - self._epoch) * self._epoch_steps
        return max(0, self._epoch_steps - self._done) + later

    def _say_estimate(self) -> None:
        """Once, with the first timed steps: the run's length, when it is a minute or more."""
        rate = self._rate()
        if self._estimated or not self.enabled or rate is None:
            return
        self._estimated = True
        total = self._done + self._steps_left()
        if rate * total < ESTIMATE_FROM_S:
            return
        epochs = "1 epoch" if self._epochs == 1 else f"{self._epochs} epochs"
        self.note(
            f"this run: {total:,} steps ({epochs} x {self._epoch_steps:,}), about "
            f"{fmt_duration(rate * total)} at the current rate ({fmt_sig(rate)} s/step over "
            f"its first {self._done} steps); --max-steps-per-epoch N or fewer --epochs "
            "shorten it"
        )

    def progress_line(self) -> str:
        """Where the run is, in one line: ``epoch 1/1: step 20/15,717, loss 3.1234, 16.0
        s/step, 5 min in, about 69 h 50 min left``."""
        head = f"epoch {self._epoch}/{self._epochs}: step {self._done:,}/{self._epoch_steps:,}"
        elapsed = fmt_duration(time.perf_counter() - self._t0)
        rate = self._rate()
        if rate is None:
            return f"{head}, {elapsed} in, no step timed yet (steps are read in groups)"
        loss = "" if self._loss is None else f", loss {_fmt_loss(self._loss)}"
        left = fmt_duration(rate * self._steps_left())
        return f"{head}{loss}, {fmt_sig(rate)} s/step, {elapsed} in, about {left} left"

    def _start_ticker(self) -> None:
        self.stop()
        self._stop_ticker = stop = threading.Event()

        def tick() -> None:
            while not stop.wait(self.progress_interval_s):
                self.note(self.progress_line())

        self._ticker = threading.Thread(target=tick, name="trainscope-progress", daemon=True)
        self._ticker.start()

    def finish(self, summary: dict[str, Any], run_dir: Path | None = None) -> None:
        """Print the summary tables (accuracy, per class, time by stage, memory), then
        where the record is and the command that turns it into a report."""
        self.stop()
        if not self.enabled:
            return
        import shlex

        # The versions (torch, Python, CUDA) are in env.json, not in the summary.
        env = try_json_object(run_dir / "env.json") if run_dir is not None else None
        print_summary(self.console, summary, env)
        for note in (oversubscribed_note(summary), load_change_note(summary)):
            if note:
                print_line(self.console, f"note: {note}")
        if run_dir is not None:
            where = shlex.quote(str(run_dir))
            print_line(self.console, f"saved to {run_dir} - trainscope report {where}")
