"""Sections of the profile study's report: stage breakdown, biggest stage, suggestion."""

from __future__ import annotations

from pathlib import Path

from trainscope.records.run_dir import STAGE_LABELS, STAGES
from trainscope.records.study_dir import StudyRecord
from trainscope.reports.advice import STEP_STAGES, findings
from trainscope.reports.document import Document, escape_inline, inline_code
from trainscope.reports.plots import stage_pie
from trainscope.reports.section import Section
from trainscope.reports.stats import SPREAD_NOTE, fmt_sig, fmt_spread
from trainscope.reports.tables import Table, fmt_pct
from trainscope.spread import spread


def profile_sections(study: StudyRecord, doc: Document, plots: Path) -> Section:
    """Median stage seconds over the repeats, pie chart, table, and what to optimise first."""
    section = Section()
    doc.heading("Where the time goes", 2)
    recs = [rec for cfg in study.configs() for rec in study.measured(cfg.config)]
    if not recs:
        doc.note("No completed measured run: nothing to profile yet.")
        return section
    first = recs[0].summary
    wall = spread(r.summary.get("wall_time_s") for r in recs)
    steps_m = spread(r.summary.get("steps") for r in recs).median
    wall_m = wall.median
    n = wall.n
    medians: dict[str, float] = {}
    rows: list[list[object]] = []
    for stage in STAGES:
        sp = spread((r.summary.get("stages_s") or {}).get(stage) for r in recs)
        if sp.median is None:
            continue
        medians[stage] = sp.median
        per_step = (
            fmt_spread(sp.scaled(1e3 / steps_m), lambda x: f"{x:.3f}")
            if stage in STEP_STAGES and steps_m
            else "–"
        )
        rows.append(
            [
                STAGE_LABELS.get(stage, stage),
                fmt_spread(sp),
                fmt_pct(sp.median / wall_m if wall_m else None),
                per_step,
            ]
        )
    rows.append(["total (wall)", fmt_spread(wall), "100.0%", "–"])
    startup = spread((r.summary.get("process") or {}).get("startup_s") for r in recs)
    fresh = study.fresh_processes
    if fresh and startup.median is not None:
        rows.append(["process start-up, before the run (not in wall)", fmt_spread(startup)])
        rows[-1] += ["–", "–"]
    table = Table(
        ["Stage", "Seconds", "Share of wall", "ms/step"],
        rows,
        f"Stage breakdown of {first.get('workload')} on {first.get('device')} "
        f"({first.get('precision')}), {SPREAD_NOTE}, n={n}; 'other' is wall time minus the "
        "measured stages. Wall starts when the run starts, after the interpreter and imports"
        + (" (the last row)." if fresh else "."),
        "tab:profile-stages",
        "lrrr",
    )
    section.tables["stages"] = table
    pie_summary = {
        "workload": first.get("workload"),
        "model": first.get("model"),
        "device": first.get("device"),
        "precision": first.get("precision"),
        "stages_s": medians,
        "wall_time_s": sum(medians.values()),
    }
    files = stage_pie(pie_summary, plots / "stages.png", plots / "stages.svg")
    if files:
        doc.figure(files[0], "Share of each stage's median in their sum", None)
    doc.table(table)
    if not fresh:
        doc.note(
            "These runs shared one process: the setup stage of every run but the first "
            "found torch imported and caches warm, so it is shorter than a run alone would "
            "see (pass --fresh-processes to measure each run's own)."
        )
    steady = [r.summary.get("steady_state") or {} for r in recs]
    step = spread((s.get("step_s") or {}).get("median") for s in steady)
    warm = steady[0].get("warmup_steps") if steady else None
    if step.median is not None:
        doc.paragraph(
            f"Steady-state step time (after the first {escape_inline(str(warm))} warm-up "
            f"steps of each run): {fmt_spread(step.scaled(1e3))} ms, median of the runs' "
            f"medians, n={step.n}."
        )
    doc.paragraph(
        f"{n} run(s): {int(steps_m or 0)} optimizer steps each, batch size "
        f"{escape_inline(str(first.get('batch_size')))}, "
        f"{escape_inline(str(first.get('num_workers')))} DataLoader worker(s), loader "
        f"{inline_code(str(first.get('loader', 'torch')))}, {fmt_sig(wall_m)} s wall (median)."
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
    found = findings(medians, wall_m or 0.0, ctx)
    for f in found:
        section.findings.append(f.text)
    if found:
        doc.note(found[0].text)
        if len(found) > 1:
            doc.paragraph("Also above their thresholds:")
            doc.bullets([f.text for f in found[1:]])
    return section
