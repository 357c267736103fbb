"""Sections of the precision study's report: loss curves, the task's quality figures
(accuracy, MSE and R^2, or val loss and perplexity), time, memory."""

from __future__ import annotations

from pathlib import Path

from trainscope.records.study_dir import StudyRecord
from trainscope.reports.document import Document, escape_inline
from trainscope.reports.memory import MEMORY_NOTE, cuda_peak, memory_of
from trainscope.reports.section import Section
from trainscope.reports.stats import (
    QUALITY,
    SPREAD_NOTE,
    compare_text,
    count_text,
    error_bar,
    fmt_spread,
    main_quality,
    mean_curve,
    quality_note,
    quality_text,
    rate,
    step_losses,
    task_of,
)
from trainscope.reports.tables import Table, fmt_bytes, fmt_float, fmt_rate
from trainscope.spread import Spread, spread


def precision_sections(study: StudyRecord, doc: Document, plots: Path) -> Section:
    """One row per precision (not-applicable ones say why), loss curves, time and memory."""
    from trainscope.reports.study_plots import bar_plot, loss_curves_plot

    section = Section()
    doc.heading("Precision comparison", 2)
    rows: list[list[object]] = []
    curves: dict[str, tuple[list[int], list[float]]] = {}
    labels: list[str] = []
    times: list[float | None] = []
    time_err: list[tuple[float, float] | None] = []
    mems: list[float | None] = []
    mem_err: list[tuple[float, float] | None] = []
    stats: dict[str, dict[str, Spread]] = {}
    outliers: list[str] = []
    task = task_of(
        r.summary for c in study.configs() if c.applicable for r in study.measured(c.config)
    )
    quality = QUALITY[task]  # two columns: accuracy, MSE and R^2, or val loss and perplexity
    main = main_quality(task)
    for cfg in study.configs():
        name = str(cfg.labels.get("precision", cfg.config))
        labels.append(name)
        recs = study.measured(cfg.config) if cfg.applicable else []
        if not recs:
            why = cfg.reason if not cfg.applicable else "no completed run"
            # The reason is listed below the table: it is too long for a cell.
            rows.append([name, "not applicable" if not cfg.applicable else why] + ["–"] * 10)
            for series in (times, time_err, mems, mem_err):
                series.append(None)
            continue
        summ = [r.summary for r in recs]
        last = [(s.get("epochs") or [{}])[-1] for s in summ]
        st = {
            **{q.header: spread(q.get(s) for s in summ) for q in quality},
            "loss": spread(e.get("train_loss") for e in last),
            "train": spread(s.get("train_time_s") for s in summ),
            "rate": spread(rate(s) for s in summ),
            "peak": spread(s.get("peak_memory_bytes") for s in summ),
            # Counted tensor bytes of each run: comparable even in one shared process.
            "mem": spread(memory_of(s).get("activations_bytes") for s in summ),
            "states": spread(memory_of(s).get("model_states_bytes") for s in summ),
        }
        stats[name] = st
        skipped = max(int(s.get("skipped_steps") or 0) for s in summ)
        for key in ("train", "rate"):
            outliers += [f"{name} repeat {recs[i].path.name}: {key}" for i in st[key].outliers]
        rows.append(
            [
                name,
                "ran",
                str(st["train"].n),
                fmt_spread(st["loss"], fmt_float),
                *(fmt_spread(st[q.header], q.fmt) for q in quality),
                fmt_spread(st["train"]),
                fmt_spread(st["rate"], fmt_rate),
                fmt_spread(st["mem"], fmt_bytes),
                fmt_spread(st["states"], fmt_bytes),
                fmt_spread(st["peak"], fmt_bytes) if cuda_peak(summ) else "–",
                str(skipped),
            ]
        )
        times.append(st["train"].median)
        time_err.append(error_bar(st["train"]))
        mib = st["mem"].scaled(1 / 2**20)
        mems.append(mib.median)
        mem_err.append(error_bar(mib))
        curves[name] = mean_curve([step_losses(r) for r in recs])
    table = Table(
        [
            "Precision",
            "Status",
            "n",
            "Final train loss",
            *(q.header for q in quality),
            "Train time (s)",
            "Samples/s",
            "Activations",
            "Model states",
            "CUDA peak",
            "Skipped steps",
        ],
        rows,
        f"Same workload, seed and data order under each precision; {SPREAD_NOTE}. Train "
        "time: the training epochs alone (no setup, no evaluation); samples/s: a repeat's "
        f"samples over its train time. {MEMORY_NOTE} Skipped steps: fp16 "
        "steps GradScaler skipped after an overflow (max over repeats)." + quality_note(quality),
        "tab:precision",
        "llrrrrrrrrrr",
    )
    section.tables["precision"] = table
    doc.table(table)
    if outliers:
        doc.note("Outlier repeats (> 3 scaled MADs from the median; kept in the figures):")
        doc.bullets([escape_inline(o) for o in outliers])
    files = loss_curves_plot(
        curves, plots / "precision_loss.png", title="Training loss by precision (mean of repeats)"
    )
    if files:
        doc.figure(files[0], "Training-loss curves of every precision on one plot", None)
    files = bar_plot(
        labels,
        times,
        time_err,
        plots / "precision_time.png",
        ylabel="training time (s)",
        title="Training time by precision (median, spread)",
        na_text="not applicable",
    )
    if files:
        doc.figure(files[0], "Training time by precision (median and spread)", None)
    comparable = any(m is not None for m in mems)
    if comparable:
        files = bar_plot(
            labels,
            mems,
            mem_err,
            plots / "precision_memory.png",
            ylabel="activations saved for backward (MiB)",
            title="Saved activations by precision",
            na_text="not applicable",
        )
        if files:
            doc.figure(files[0], "Activations saved for backward, by precision", None)
    else:
        doc.note(
            "These runs counted no memory (records from before the memory meter); the "
            "process's peak RSS they have cannot tell precisions apart in a shared process."
        )
    ref = stats.get("fp32")
    for name, st in stats.items():
        if name == "fp32" or ref is None:
            continue
        parts = [compare_text(name, st["rate"], "fp32", ref["rate"], "throughput")]
        parts.append(compare_text(name, st["train"], "fp32", ref["train"], "training time"))
        parts.append(quality_text(st[main.header], ref[main.header], main))
        if comparable:
            parts.append(
                count_text(name, st["mem"], "fp32", ref["mem"], "activations", fmt=fmt_bytes)
            )
        prefix = f"{name} vs fp32: "
        text = prefix + "; ".join(p.removeprefix(prefix) for p in parts if p) + "."
        section.findings.append(text)
        doc.paragraph(escape_inline(text))  # names are labels from study.json: text
    na = [
        f"{escape_inline(c.config)}: {escape_inline(str(c.reason))}"
        for c in study.configs()
        if not c.applicable
    ]
    if na:
        doc.paragraph("Not applicable on this device (not run, not faked):")
        doc.bullets(na)
    return section
