"""Sections of the profile study's report: stage breakdown, biggest stage, suggestion."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainscope.analysis.stats import SPREAD_NOTE, fmt_sig, fmt_spread
from trainscope.records.run_dir import STAGE_LABELS, STAGES, RunRecord
from trainscope.records.study_dir import StudyRecord
from trainscope.render.document import Document, escape_inline, inline_code
from trainscope.render.plots import stage_pie
from trainscope.render.table import Table, fmt_pct
from trainscope.reports.advice import STEP_STAGES, findings
from trainscope.reports.section import Section
from trainscope.util.spread import Spread, spread


@dataclass
class ProfileRows:
    """The stage table's rows and what the pie and the advice read, as plain data."""

    wall: Spread
    """Wall time over the repeats."""
    steps: float | None
    """Median optimizer steps of a run."""
    fresh: bool
    """Whether every run had a process of its own."""
    rows: list[list[object]] = field(default_factory=list)
    medians: dict[str, float] = field(default_factory=dict)
    """Median seconds of each stage that was measured."""


def profile_rows(study: StudyRecord, recs: list[RunRecord]) -> ProfileRows:
    """Each stage's seconds, share of wall and ms per step over the repeats (no rendering)."""
    wall = spread(r.view.wall_time_s for r in recs)
    steps_m = spread(r.view.steps for r in recs).median
    data = ProfileRows(wall, steps_m, study.fresh_processes)
    for stage in STAGES:
        sp = spread(r.view.stages_s.get(stage) for r in recs)
        if sp.median is None:
            continue
        data.medians[stage] = sp.median
        per_step = fmt_spread(sp.scaled(1e3 / steps_m)) if stage in STEP_STAGES and steps_m else "–"
        share = fmt_pct(sp.median / wall.median if wall.median else None)
        data.rows.append([STAGE_LABELS.get(stage, stage), fmt_spread(sp), share, per_step])
    data.rows.append(["total (wall)", fmt_spread(wall), "100.0%", "–"])
    startup = spread(r.view.process.get("startup_s") for r in recs)
    if data.fresh and startup.median is not None:
        data.rows.append(
            ["process start-up, before the run (not in wall)", fmt_spread(startup), "–", "–"]
        )
    return data


def profile_sections(study: StudyRecord, doc: Document, plots: Path) -> Section:
    """Median stage seconds over the repeats, pie chart, table, and what to optimise first."""
    section = Section()
    doc.heading("Where the time goes", 2)
    recs = [rec for cfg in study.configs() for rec in study.measured(cfg.config)]
    if not recs:
        doc.note("No completed measured run: nothing to profile yet.")
        return section
    first = recs[0].summary
    data = profile_rows(study, recs)
    table = Table(
        ["Stage", "Seconds", "Share of wall", "ms/step"],
        data.rows,
        f"Stage breakdown of {first.get('workload')} on {first.get('device')} "
        f"({first.get('precision')}), {SPREAD_NOTE}, n={data.wall.n}; 'other' is wall time "
        "minus the measured stages. Wall starts when the run starts, after the interpreter "
        "and imports" + (" (the last row)." if data.fresh else "."),
        "tab:profile-stages",
        "lrrr",
    )
    section.tables["stages"] = table
    pie_summary = {
        **{k: first.get(k) for k in ("workload", "model", "device", "precision")},
        "stages_s": data.medians,
        "wall_time_s": sum(data.medians.values()),
    }
    files = stage_pie(pie_summary, plots / "stages.png", plots / "stages.svg")
    if files:
        doc.figure(files[0], "Share of each stage's median in their sum", None)
    doc.table(table)
    if not data.fresh:
        doc.note(
            "These runs shared one process: the setup stage of every run but the first "
            "found torch imported and caches warm, so it is shorter than a run alone would "
            "see (pass --fresh-processes to measure each run's own)."
        )
    _run_paragraphs(doc, recs, data)
    _advice(study, doc, section, first, data)
    return section


def _run_paragraphs(doc: Document, recs: list[RunRecord], data: ProfileRows) -> None:
    """The steady-state step time, and what the runs were: steps, batch, loader, wall."""
    first = recs[0].summary
    step = spread(r.view.steady_step_s for r in recs)
    warm = recs[0].view.steady_state.get("warmup_steps")
    if step.median is not None:
        doc.paragraph(
            f"Steady-state step time (after the first {escape_inline(str(warm))} warm-up "
            f"steps of each run): {fmt_spread(step.scaled(1e3))} ms, median of the runs' "
            f"medians, n={step.n}."
        )
    doc.paragraph(
        f"{data.wall.n} run(s): {int(data.steps or 0)} optimizer steps each, batch size "
        f"{escape_inline(str(first.get('batch_size')))}, "
        f"{escape_inline(str(first.get('num_workers')))} DataLoader worker(s), loader "
        f"{inline_code(str(first.get('loader', 'torch')))}, "
        f"{fmt_sig(data.wall.median)} s wall (median)."
    )


def _advice(
    study: StudyRecord, doc: Document, section: Section, first: dict[str, Any], data: ProfileRows
) -> None:
    """What to optimise first: the stages above their thresholds, biggest first."""
    doc.heading("What to optimise first", 2)
    cfg = study.plan.base_config
    ctx = {
        "device": first.get("device"),
        "loader": first.get("loader", "torch"),
        "num_workers": first.get("num_workers"),
        "eval_every": (cfg.get("train") or {}).get("eval_every"),
        "log_every": (cfg.get("train") or {}).get("log_every"),
        "strategy": first.get("strategy", "single"),
        "script": isinstance(cfg.get("script"), dict),  # the user's script: its own flags
    }
    found = findings(data.medians, data.wall.median or 0.0, ctx)
    for f in found:
        section.findings.append(f.text)
    if found:
        doc.note(found[0].text)
        if len(found) > 1:
            doc.paragraph("Also above their thresholds:")
            doc.bullets([f.text for f in found[1:]])
