"""The report of one run, built from its run directory.

Writes into the output directory::

    report.md          the report as Markdown (figures linked from plots/)
    report.html        the same content as one self-contained page (figures embedded)
    tables.tex         the tables as booktabs LaTeX, for \\input into a paper
    plots/stages.png   pie of where the wall time went (+ plots/stages.svg)
    plots/loss.png     training loss per step (+ plots/loss.svg)

Built from the run record alone (``load_run``), so a report of a GPU run can be rebuilt
on a laptop without torch or a GPU. The Markdown and HTML are two renderings of one
:class:`~trainscope.render.document.Document`, so they cannot drift apart.
"""

from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainscope.analysis.cpu import load_change_note, oversubscribed_note
from trainscope.analysis.memory import memory_bars, memory_table
from trainscope.analysis.timeline import load_timeline, no_timeline_reason, timeline_section
from trainscope.analysis.trace import TRACE_FILE, write_chrome_trace
from trainscope.records.run_dir import RunRecord, load_run
from trainscope.records.view import SummaryView
from trainscope.render.console import make_console, print_line, print_table, table_to_rich
from trainscope.render.document import Document, escape_inline, inline_code, write_document
from trainscope.render.outdir import ReportFiles, default_or, report_dir
from trainscope.render.plots import loss_curve, stage_pie
from trainscope.render.table import LATEX_NEEDS, Table, fmt_float, latex_escape
from trainscope.reports.doctor_section import doctor_section
from trainscope.reports.quantize_section import quantize_section
from trainscope.reports.stragglers import straggler_section
from trainscope.reports.tables import (
    attempts_table,
    epoch_table,
    overview_table,
    per_class_table,
    run_title,
    stage_table,
)

if TYPE_CHECKING:
    import rich.table

# Table keys in the order they appear in report.md, tables.tex and on the console.
TABLE_ORDER = ("overview", "attempts", "stages", "memory", "epochs", "per_class", "quantize")

# Figures go in a subfolder so the report files stay easy to spot in the output folder.
PLOTS_DIR = "plots"


@dataclass
class RunReport(ReportFiles):
    """What :func:`build_run_report` produced: where, which files, and the tables."""

    run_dir: Path
    out_dir: Path
    files: list[Path] = field(default_factory=list)
    tables: dict[str, Table] = field(default_factory=dict)
    status: str | None = None
    error: str | None = None

    @property
    def failed(self) -> bool:
        """True when the run did not complete."""
        return self.status != "completed"


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-").lower() or "run"


def _build_tables(record: RunRecord) -> dict[str, Table]:
    summary = record.summary
    tables = {
        "overview": overview_table(summary, record.env),
        "attempts": attempts_table(summary),
        "stages": stage_table(summary),
        "epochs": epoch_table(summary),
        "per_class": per_class_table(summary),
        "memory": memory_table(summary),
    }
    # Prefix labels with the run's name so tables of several runs can share a document.
    prefix = _slug(record.path.resolve().name)
    return {
        k: dataclasses.replace(t, label=t.label.replace("tab:", f"tab:{prefix}-", 1))
        for k, t in tables.items()
    }


def _status_note(doc: Document, summary: dict[str, Any]) -> None:
    # A failed or unfinished run says so first, before any table that might look normal.
    status = summary.get("status")
    error = summary.get("error")
    if status in ("preempted", "cancelled"):  # stopped by its scheduler, checkpointed
        said = {"preempted": "Run preempted", "cancelled": "Run cancelled"}[status]
        doc.note(f"**{said}: {escape_inline(str(error or 'no message recorded'))}**")
        requeue = SummaryView(summary).section("preemption").get("requeue")
        if isinstance(requeue, dict):
            done = "the job was requeued" if requeue.get("requeued") else (
                f"the job was not requeued ({requeue.get('why')})")  # fmt: skip
            doc.note(escape_inline(done))
    elif status == "failed" or (error and status != "completed"):
        text = str(error or "no error message recorded")
        first, *rest = text.splitlines() or [""]
        doc.note(f"**Run failed: {escape_inline(first)}**")
        if rest:  # a traceback or multi-line message: show all of it verbatim
            doc.code(text)
    elif status != "completed":
        doc.note(f"**Run did not complete** (status: {escape_inline(str(status))}).")
    launch_error = summary.get("launch_error")
    # What this rank saw was only the effect; said once where its error already names it.
    if launch_error and str(launch_error) not in str(error or ""):
        doc.note(f"What ended the launch: {escape_inline(str(launch_error))}")
    for crowded in (oversubscribed_note(summary), load_change_note(summary)):
        if crowded:  # before the timings it makes incomparable
            doc.note(f"**{escape_inline(crowded)}.**")
    for note in SummaryView(summary).rows("notes"):  # e.g. "no validation data: ..."
        doc.note(escape_inline(str(note)))


def _build_document(
    record: RunRecord, report: RunReport, figures: dict[str, Path], plots: Path
) -> Document:
    """The report's content, rendered to both report.md and report.html; the timeline's
    figures (drawn into ``plots``) and trace.json are added to ``report.files``."""
    summary = record.summary
    tables = report.tables
    # Workload / model and how it ran (strategy, processes): a DDP run says so up front.
    title = run_title(summary) if summary.get("workload") or summary.get("model") else None
    doc = Document(f"Run report: {title or record.path.name}")
    _status_note(doc, summary)
    for line in record.left_out:  # summary fields that do not fit: said, not shown
        doc.note(escape_inline(f"Damaged record: {line}"))
    doc.paragraph(
        f"Run directory: {inline_code(record.path.name)}. Rebuilt from the run record alone"
        " (no torch needed); tables for LaTeX are in `tables.tex` next to this report."
    )
    doc.heading("Overview")
    doc.table(tables["overview"])
    if tables["attempts"].rows:
        doc.heading("Attempts (resumed run)")
        doc.table(tables["attempts"])

    doc.heading("Where the time went")
    if not record.view.section("stages_s"):
        doc.paragraph("No per-stage timings were recorded.")
    elif "stages" in figures:
        doc.figure(figures["stages"], "Share of wall time per stage")
    if tables["stages"].rows:
        doc.table(tables["stages"])
    if record.view.section("stages_s"):
        doc.paragraph(
            "`other` = wall time minus the measured stages; it can be slightly negative"
            " when asynchronous GPU timings overlap the host clock."
        )

    straggler_section(record, doc)  # multi-rank runs: per-rank stages, who waits for whom
    report.files += timeline_section(record, doc, plots)
    trace = _write_trace(record, report.out_dir)
    if trace is not None:
        report.files.append(trace)
        doc.paragraph(
            "The same timeline as a Chrome trace, one track per rank and stage: "
            f"{inline_code(trace.name)} (open it in https://ui.perfetto.dev or chrome://tracing)."
        )

    doctor_section(record, doc)  # what to fix, from the same record

    doc.heading("Where the memory went")
    if "memory" in figures:
        doc.figure(figures["memory"], "Memory by component (tensor bytes on one step)")
    if tables["memory"].rows:
        doc.table(tables["memory"])
    else:
        doc.paragraph("No memory was counted (a data-only run, or a record from before the meter).")

    doc.heading("Training loss")
    if "loss" in figures:
        doc.figure(figures["loss"], "Training loss per step")
    first = record.view.rows("first_losses")
    if first:
        doc.paragraph("First losses: " + ", ".join(fmt_float(x) for x in first[:5]))
    if "loss" not in figures and not first:
        doc.paragraph("No step losses were recorded.")

    doc.heading("Per-epoch results")
    if tables["epochs"].rows:
        doc.table(tables["epochs"])
    else:
        doc.paragraph("No completed epochs were recorded.")
    if tables["per_class"].rows:
        doc.heading("Per-class test accuracy")
        doc.table(tables["per_class"])
    quantized = quantize_section(record.path, doc)  # after `trainscope quantize RUN_DIR`
    if quantized is not None and "quantize" in quantized.tables:
        table = quantized.tables["quantize"]
        prefix = _slug(record.path.resolve().name)
        tables["quantize"] = dataclasses.replace(
            table, label=table.label.replace("tab:", f"tab:{prefix}-", 1)
        )
    return doc


def _render_latex(record: RunRecord, report: RunReport) -> str:
    # The run's name is someone else's text: escaped, it stays on this comment line (a
    # newline in it would end the comment and make the rest live LaTeX).
    tex = [
        f"% Tables of trainscope run '{latex_escape(record.path.name)}'"
        " (generated; do not edit by hand).",
        LATEX_NEEDS,
        "",
    ]
    for key in TABLE_ORDER:
        # "quantize" exists only after `trainscope quantize`; an empty tabular is a LaTeX
        # error, not an empty table.
        table = report.tables.get(key)
        if table is not None and table.rows:
            tex += [table.to_latex()]
    return "\n".join(tex)


def build_run_report(
    run_dir: str | os.PathLike[str], out_dir: str | os.PathLike[str] | None = None
) -> RunReport:
    """Write figures, ``report.md``, ``report.html`` and ``tables.tex`` for one run.

    ``out_dir`` defaults to ``run_dir/report``. Failed runs are reported too: whatever
    the summary holds is shown, with a visible "Run failed: <error>" line.
    """
    record = load_run(run_dir)
    out, what, default = default_or(out_dir, record.path / "report")
    with report_dir(out, "report", REPORT_FILES, what=what, folders=(PLOTS_DIR,), register=default):
        return _write_run_report(record, out)


# What a run report writes (besides plots/): recorded before written.
REPORT_FILES = ("report.md", "report.html", "tables.tex", TRACE_FILE)


def _write_trace(record: RunRecord, out: Path) -> Path | None:
    """trace.json where the steps carry start times (older records have none)."""
    timeline = load_timeline(record)
    if no_timeline_reason(timeline) is not None:
        return None
    return write_chrome_trace(timeline, out / TRACE_FILE)


def _write_run_report(record: RunRecord, out: Path) -> RunReport:
    summary = record.summary
    report = RunReport(
        run_dir=record.path,
        out_dir=out,
        tables=_build_tables(record),
        status=summary.get("status"),
        error=summary.get("error"),
    )
    plots = out / PLOTS_DIR
    figures: dict[str, Path] = {}
    for key, files in (
        ("stages", stage_pie(summary, plots / "stages.png", plots / "stages.svg")),
        ("loss", loss_curve(record, plots / "loss.png", plots / "loss.svg")),
        (
            "memory",
            memory_bars([record.path.name], [summary], plots / "memory.png", plots / "memory.svg"),
        ),
    ):
        report.files += files
        if files:
            figures[key] = files[0]  # the PNG: what the Markdown links and the HTML embeds
    if plots.is_dir() and not any(plots.iterdir()):
        plots.rmdir()  # nothing to draw (e.g. a run that failed in setup): no empty folder

    report.files += write_document(_build_document(record, report, figures, plots), out)
    tex_path = out / "tables.tex"
    tex_path.write_text(_render_latex(record, report), encoding="utf-8")
    report.files.append(tex_path)
    return report


def render_tables_rich(report: RunReport) -> list[rich.table.Table]:
    """The report's non-empty tables as rich tables, for printing on the console."""
    tables = (report.tables.get(key) for key in TABLE_ORDER)
    return [table_to_rich(t) for t in tables if t is not None and t.rows]


def print_report(report: RunReport) -> None:
    """Print a built report's tables and the files it wrote."""
    console = make_console()
    for table in (report.tables.get(key) for key in TABLE_ORDER):
        if table is not None and table.rows:
            print_table(console, table)
    print_line(console, f"wrote {len(report.files)} files to {report.out_dir}:")
    for f in report.files:
        # Relative names (plots/loss.png) read better than the same long prefix repeated.
        shown = f.relative_to(report.out_dir) if f.is_relative_to(report.out_dir) else f
        print_line(console, f"  {shown}")
    print_line(console, f"open in a browser: {report.html_path}")
