"""System metrics over time beside each other, one line per configuration of a study: the
process's CPU use and resident memory as each run's sampler recorded them
(``system.jsonl``), from the first measured repeat of each configuration."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trainscope.records.run_dir import RunRecord
from trainscope.records.study_dir import StudyRecord
from trainscope.render.document import Document, escape_inline
from trainscope.render.plots import new_figure
from trainscope.render.study_plots import write_figure
from trainscope.reports.section import each_config

# (key in system.jsonl, axis label, scale): the process's figures, on every machine.
PANELS = (("cpu_percent", "CPU (% of one core)", 1.0), ("rss_bytes", "resident memory (MiB)",
          1 / 2**20))  # fmt: skip


MIN_SAMPLES = 5
"""Fewest samples a configuration's line is drawn from: two or three points show no
course over time, and a line through them would read as one. The sampler takes one a
second by default, so a run shorter than about five seconds is said, not drawn."""


def _timed(run: RunRecord) -> list[dict[str, Any]]:
    """A run's system samples that carry a monotonic time."""
    return [s for s in run.system if isinstance(s.get("mono"), (int, float))]


def system_series(study: StudyRecord, label: str) -> dict[str, dict[str, list[float]]]:
    """Per configuration (named by ``label``): seconds since its first sample, and each
    panel's values, from its first measured repeat with at least :data:`MIN_SAMPLES`."""
    out: dict[str, dict[str, list[float]]] = {}
    for c in each_config(study, label):
        rows = next((r for run in c.runs if len(r := _timed(run)) >= MIN_SAMPLES), None)
        if rows is None:
            continue
        t0 = float(rows[0]["mono"])
        series = {"t": [float(s["mono"]) - t0 for s in rows]}
        for key, _, scale in PANELS:
            series[key] = [float(s[key]) * scale if isinstance(s.get(key), (int, float))
                           else float("nan") for s in rows]  # fmt: skip
        out[c.name] = series
    return out


def too_few_samples(study: StudyRecord, label: str) -> dict[str, int]:
    """Configurations with measured runs none of which has :data:`MIN_SAMPLES` samples,
    each with the most any of its runs has (a study without any sample: none listed,
    as it has no system figure to miss them from)."""
    counts = {c.name: max(len(_timed(run)) for run in c.runs)
              for c in each_config(study, label) if c.runs}  # fmt: skip
    if not any(counts.values()):
        return {}
    return {name: n for name, n in counts.items() if n < MIN_SAMPLES}


def _too_few_note(doc: Document, few: dict[str, int]) -> None:
    """Say which configurations the system figure leaves out, and why."""
    names = ", ".join(f"{name} ({n} sample{'s' * (n != 1)})" for name, n in few.items())
    doc.note(
        f"System metrics over time: {escape_inline(names)}: too few to draw (at least "
        f"{MIN_SAMPLES} needed; the sampler records about one a second, so these runs were "
        "too short to show a course over time)."
    )


def system_figure(study: StudyRecord, doc: Document, png: Path, label: str) -> None:
    """Add the figure of CPU use and resident memory over time per configuration; one
    with fewer than :data:`MIN_SAMPLES` samples is named in a note instead of drawn."""
    series = system_series(study, label)
    if series:
        _draw(series, doc, png)
    few = too_few_samples(study, label)
    if few:
        _too_few_note(doc, few)


def _draw(series: dict[str, dict[str, list[float]]], doc: Document, png: Path) -> None:
    """The figure itself, one line per configuration in ``series``."""
    fig = new_figure(10, 3.4)
    axes = fig.subplots(1, len(PANELS))
    for ax, (key, ylabel, _) in zip(axes, PANELS):
        for name, s in series.items():
            ax.plot(s["t"], s[key], marker=".", label=name)
        ax.set_xlabel("seconds since the run's first sample")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle("System metrics over time (first repeat of each)")
    files = write_figure(fig, png)
    if files:
        doc.figure(files[0], "The process's CPU use and resident memory over time, one line "
                   "per configuration (its first repeat)", None)  # fmt: skip


__all__ = ["MIN_SAMPLES", "system_figure", "system_series", "too_few_samples"]
