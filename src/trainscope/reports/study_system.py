"""System metrics over time beside each other, one line per configuration of a study: the
process's CPU use and resident memory as each run's sampler recorded them
(``system.jsonl``), from the first measured repeat of each configuration."""

from __future__ import annotations

from pathlib import Path

from trainscope.records.study_dir import StudyRecord
from trainscope.reports.document import Document
from trainscope.reports.plots import new_figure
from trainscope.reports.section import each_config
from trainscope.reports.study_plots import write_figure

# (key in system.jsonl, axis label, scale): the process's figures, on every machine.
PANELS = (("cpu_percent", "CPU (% of one core)", 1.0), ("rss_bytes", "resident memory (MiB)",
          1 / 2**20))  # fmt: skip


def system_series(study: StudyRecord, label: str) -> dict[str, dict[str, list[float]]]:
    """Per configuration (named by ``label``): seconds since its first sample, and each
    panel's values, from its first measured repeat that has samples."""
    out: dict[str, dict[str, list[float]]] = {}
    for c in each_config(study, label):
        run = next((r for r in c.runs if len(r.system) >= 2), None)
        if run is None:
            continue
        rows = [s for s in run.system if isinstance(s.get("mono"), (int, float))]
        if len(rows) < 2:
            continue
        t0 = float(rows[0]["mono"])
        series = {"t": [float(s["mono"]) - t0 for s in rows]}
        for key, _, scale in PANELS:
            series[key] = [float(s[key]) * scale if isinstance(s.get(key), (int, float))
                           else float("nan") for s in rows]  # fmt: skip
        out[c.name] = series
    return out


def system_figure(study: StudyRecord, doc: Document, png: Path, label: str) -> None:
    """Add the figure of CPU use and resident memory over time per configuration (nothing
    where fewer than two samples were recorded: a run shorter than the sampling interval)."""
    series = system_series(study, label)
    if not series:
        return
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
    if not files:
        return
    png = files[0]
    doc.figure(png, "The process's CPU use and resident memory over time, one line per "
               "configuration (its first repeat)", None)  # fmt: skip


__all__ = ["system_figure", "system_series"]
