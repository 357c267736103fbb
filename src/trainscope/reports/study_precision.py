"""Sections of the precision study's report: loss curves, accuracy, time, memory."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from trainscope.records.study_dir import StudyRecord
from trainscope.reports.document import Document, escape_inline
from trainscope.reports.stats import (
    fmt_mean_std,
    fmt_mean_std_sig,
    mean_curve,
    mean_std,
    step_losses,
)
from trainscope.reports.tables import (
    Table,
    fmt_bytes,
    fmt_float,
    fmt_pct,
    fmt_rate,
)

if TYPE_CHECKING:
    from trainscope.reports.study_report import Section


def _pct_ms(m: float | None, s: float | None, n: int) -> str:
    return fmt_mean_std(m, s, lambda x: fmt_pct(x, 2), n)


def precision_sections(study: StudyRecord, doc: Document, plots: Path) -> Section:
    """One row per precision (not-applicable ones say why), loss curves, time and memory."""
    from trainscope.reports.study_plots import bar_plot, loss_curves_plot
    from trainscope.reports.study_report import Section

    section = Section()
    doc.heading("Precision comparison", 2)
    rows: list[list[object]] = []
    curves: dict[str, tuple[list[int], list[float]]] = {}
    labels: list[str] = []
    walls: list[float | None] = []
    wall_err: list[float | None] = []
    mems: list[float | None] = []
    mem_err: list[float | None] = []
    stats: dict[str, dict[str, float | None]] = {}
    mem_kind = None
    for cfg in study.configs():
        name = str(cfg.labels.get("precision", cfg.config))
        labels.append(name)
        recs = study.measured(cfg.config) if cfg.applicable else []
        if not recs:
            why = cfg.reason if not cfg.applicable else "no completed run"
            # The reason is listed below the table: it is too long for a cell.
            rows.append([name, "not applicable" if not cfg.applicable else why] + ["–"] * 7)
            walls.append(None)
            wall_err.append(None)
            mems.append(None)
            mem_err.append(None)
            continue
        summ = [r.summary for r in recs]
        val = [((s.get("epochs") or [{}])[-1]).get("val_accuracy") for s in summ]
        loss = [((s.get("epochs") or [{}])[-1]).get("train_loss") for s in summ]
        v_m, v_s, n = mean_std(val)
        t_m, t_s, _ = mean_std(s.get("test_accuracy") for s in summ)
        w_m, w_s, _ = mean_std(s.get("wall_time_s") for s in summ)
        r_m, _, _ = mean_std(s.get("samples_per_s") for s in summ)
        p_m, p_s, _ = mean_std(s.get("peak_memory_bytes") for s in summ)
        l_m, _, _ = mean_std(loss)
        skipped = max(int(s.get("skipped_steps") or 0) for s in summ)
        mem_kind = summ[0].get("peak_memory_kind") or mem_kind
        stats[name] = {"wall": w_m, "test": t_m, "mem": p_m, "loss": l_m}
        rows.append(
            [
                name,
                "ran",
                fmt_float(l_m),
                _pct_ms(v_m, v_s, n),
                _pct_ms(t_m, t_s, n),
                fmt_mean_std_sig(w_m, w_s, n),
                fmt_rate(r_m),
                fmt_bytes(p_m),
                str(skipped),
            ]
        )
        walls.append(w_m)
        wall_err.append(w_s)
        mems.append(p_m / 2**20 if p_m is not None else None)
        mem_err.append(p_s / 2**20 if p_s is not None else None)
        curves[name] = mean_curve([step_losses(r) for r in recs])
    table = Table(
        [
            "Precision",
            "Status",
            "Final train loss",
            "Final val acc",
            "Test acc",
            "Wall (s)",
            "Samples/s",
            "Peak memory",
            "Skipped steps",
        ],
        rows,
        "Same workload, seed and data order under each precision (mean ± std over repeats). "
        f"Peak memory: {mem_kind or 'n/a'}. Skipped steps: fp16 steps GradScaler skipped "
        "after an overflow (max over repeats).",
        "tab:precision",
        "llrrrrrrr",
    )
    section.tables["precision"] = table
    doc.table(table)
    files = loss_curves_plot(
        curves, plots / "precision_loss.png", title="Training loss by precision (mean of repeats)"
    )
    if files:
        doc.figure(files[0], "Training-loss curves of every precision on one plot", None)
    files = bar_plot(
        labels,
        walls,
        wall_err,
        plots / "precision_wall.png",
        ylabel="wall time (s)",
        title="Wall time by precision",
        na_text="not applicable",
    )
    if files:
        doc.figure(files[0], "Wall time by precision", None)
    files = bar_plot(
        labels,
        mems,
        mem_err,
        plots / "precision_memory.png",
        ylabel=f"peak memory (MiB, {mem_kind or 'n/a'})",
        title="Peak memory by precision",
        na_text="not applicable",
    )
    if files:
        doc.figure(files[0], "Peak memory by precision", None)
    if mem_kind == "process_peak_rss":
        doc.note(
            "On the CPU, peak memory is the process's peak resident set size: a high-water "
            "mark of the whole study process, in which the runs execute one after another, "
            "so it cannot tell precisions apart. On CUDA it is "
            "torch.cuda.max_memory_allocated, reset at the start of every run."
        )
    ref = stats.get("fp32")
    for name, st in stats.items():
        if name == "fp32" or ref is None or not st["wall"] or not ref["wall"]:
            continue
        parts = [f"{name} vs fp32: wall time {st['wall'] / ref['wall']:.2f}x"]
        if st["test"] is not None and ref["test"] is not None:
            parts.append(f"test accuracy {100 * (st['test'] - ref['test']):+.2f} points")
        if st["loss"] is not None and ref["loss"] is not None:
            parts.append(f"final train loss {st['loss'] - ref['loss']:+.4f}")
        if st["mem"] and ref["mem"]:
            parts.append(f"peak memory {st['mem'] / ref['mem']:.2f}x")
        text = ", ".join(parts) + "."
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
