"""Sections of the profile study's report: stage breakdown, biggest stage, suggestion."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from trainscope.records.run_dir import STAGE_LABELS, STAGES
from trainscope.records.study_dir import StudyRecord
from trainscope.reports.advice import STEP_STAGES, findings
from trainscope.reports.document import Document, escape_inline, inline_code
from trainscope.reports.plots import stage_pie
from trainscope.reports.stats import fmt_mean_std_sig, mean_std
from trainscope.reports.tables import Table, fmt_pct

if TYPE_CHECKING:
    from trainscope.reports.study_report import Section


def profile_sections(study: StudyRecord, doc: Document, plots: Path) -> Section:
    """Mean stage seconds over the repeats, pie chart, table, and what to optimise first."""
    from trainscope.reports.study_report import Section

    section = Section()
    doc.heading("Where the time goes", 2)
    recs = [rec for cfg in study.configs() for rec in study.measured(cfg.config)]
    if not recs:
        doc.note("No completed measured run: nothing to profile yet.")
        return section
    first = recs[0].summary
    wall_m, wall_s, n = mean_std(r.summary.get("wall_time_s") for r in recs)
    steps_m, _, _ = mean_std(r.summary.get("steps") for r in recs)
    means: dict[str, float] = {}
    rows: list[list[object]] = []
    for stage in STAGES:
        m, s, k = mean_std((r.summary.get("stages_s") or {}).get(stage) for r in recs)
        if m is None:
            continue
        means[stage] = m
        per_step = f"{1e3 * m / steps_m:.3f}" if stage in STEP_STAGES and steps_m else "–"
        rows.append(
            [
                STAGE_LABELS.get(stage, stage),
                fmt_mean_std_sig(m, s, k),
                fmt_pct(m / wall_m if wall_m else None),
                per_step,
            ]
        )
    rows.append(["total (wall)", fmt_mean_std_sig(wall_m, wall_s, n), "100.0%", "–"])
    table = Table(
        ["Stage", "Seconds", "Share of wall", "ms/step"],
        rows,
        f"Stage breakdown of {first.get('workload')} on {first.get('device')} "
        f"({first.get('precision')}), mean ± std over {n} runs; 'other' is wall time minus "
        "the measured stages.",
        "tab:profile-stages",
        "lrrr",
    )
    section.tables["stages"] = table
    pie_summary = {
        "workload": first.get("workload"),
        "model": first.get("model"),
        "device": first.get("device"),
        "precision": first.get("precision"),
        "stages_s": means,
        "wall_time_s": wall_m,
    }
    files = stage_pie(pie_summary, plots / "stages.png", plots / "stages.svg")
    if files:
        doc.figure(files[0], "Mean share of wall time per stage", None)
    doc.table(table)
    doc.paragraph(
        f"{n} run(s): {int(steps_m or 0)} optimizer steps each, batch size "
        f"{escape_inline(str(first.get('batch_size')))}, "
        f"{escape_inline(str(first.get('num_workers')))} DataLoader worker(s), loader "
        f"{inline_code(str(first.get('loader', 'torch')))}, {wall_m:.3f} s wall on average."
    )
    doc.heading("What to optimise first", 2)
    cfg = study.plan.base_config
    ctx = {
        "device": first.get("device"),
        "loader": first.get("loader", "torch"),
        "num_workers": first.get("num_workers"),
        "eval_every": (cfg.get("train") or {}).get("eval_every"),
        "log_every": (cfg.get("train") or {}).get("log_every"),
        "strategy": first.get("strategy", "single"),
    }
    found = findings(means, wall_m or 0.0, ctx)
    for f in found:
        section.findings.append(f.text)
    if found:
        doc.note(found[0].text)
        if len(found) > 1:
            doc.paragraph("Also above their thresholds:")
            doc.bullets([f.text for f in found[1:]])
    return section
