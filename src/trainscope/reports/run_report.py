"""The report of one run: figures, ``report.md`` and ``tables.tex`` from a run directory.

Built from the run record alone (``load_run``), so a report of a GPU run can be rebuilt
on a laptop without torch or a GPU.
"""

from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainscope.records.run_dir import RunRecord, load_run
from trainscope.reports.plots import loss_curve, stage_pie
from trainscope.reports.tables import (
    Table,
    epoch_table,
    fmt_float,
    overview_table,
    per_class_table,
    stage_table,
)

if TYPE_CHECKING:
    import rich.table

# Table keys in the order they appear in report.md, tables.tex and on the console.
TABLE_ORDER = ("overview", "stages", "epochs", "per_class")


@dataclass
class RunReport:
    """What :func:`build_run_report` produced: where, which files, and the tables."""

    run_dir: Path
    out_dir: Path
    files: list[Path] = field(default_factory=list)
    tables: dict[str, Table] = field(default_factory=dict)
    status: str | None = None
    error: str | None = None

    @property
    def markdown_path(self) -> Path:
        """The report's Markdown file."""
        return self.out_dir / "report.md"

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
        "stages": stage_table(summary),
        "epochs": epoch_table(summary),
        "per_class": per_class_table(summary),
    }
    # Prefix labels with the run's name so tables of several runs can share a document.
    prefix = _slug(record.path.resolve().name)
    return {
        k: dataclasses.replace(t, label=t.label.replace("tab:", f"tab:{prefix}-", 1))
        for k, t in tables.items()
    }


def _md_inline(text: str) -> str:
    # Backslash-escape what Markdown would read as markup, so an error prints verbatim.
    return re.sub(r"([\\`*_\[\]<>#|])", r"\\\1", text)


def _status_lines(summary: dict[str, Any]) -> list[str]:
    status = summary.get("status")
    error = summary.get("error")
    if status == "failed" or (error and status != "completed"):
        text = str(error or "no error message recorded")
        first, *rest = text.splitlines() or [""]
        lines = [f"> **Run failed: {_md_inline(first)}**", ""]
        if rest:  # a traceback or multi-line message: show all of it verbatim
            lines += ["```text", text.replace("```", "'''"), "```", ""]
        return lines
    if status != "completed":
        return [f"> **Run did not complete** (status: {_md_inline(str(status))}).", ""]
    return []


def _render_markdown(record: RunRecord, report: RunReport, loss_written: bool) -> str:
    summary = record.summary
    tables = report.tables
    title = " / ".join(str(summary[k]) for k in ("workload", "model") if summary.get(k))
    md = [f"# Run report: {title or record.path.name}", ""]
    md += _status_lines(summary)
    md += [
        (
            f"Run directory: `{record.path.name}`. Rebuilt from the run record alone"
            " (no torch needed); tables for LaTeX are in [tables.tex](tables.tex)."
        ),
        "",
        "## Overview",
        "",
        tables["overview"].to_markdown(),
        "## Where the time went",
        "",
    ]
    if not summary.get("stages_s"):
        md += ["No per-stage timings were recorded.", ""]
    elif (report.out_dir / "stages.png").exists():
        md += ["![Share of wall time per stage](stages.png)", ""]
    if tables["stages"].rows:
        md += [tables["stages"].to_markdown()]
    if summary.get("stages_s"):
        md += [
            (
                "*other* = wall time minus the measured stages; it can be slightly negative"
                " when asynchronous GPU timings overlap the host clock."
            ),
            "",
        ]

    md += ["## Training loss", ""]
    if loss_written:
        md += ["![Training loss per step](loss.png)", ""]
    first = summary.get("first_losses") or []
    if first:
        md += ["First losses: " + ", ".join(fmt_float(x) for x in first[:5]), ""]
    if not loss_written and not first:
        md += ["No step losses were recorded.", ""]

    md += ["## Per-epoch results", ""]
    md += (
        [tables["epochs"].to_markdown()]
        if tables["epochs"].rows
        else [
            "No completed epochs were recorded.",
            "",
        ]
    )
    if tables["per_class"].rows:
        md += ["## Per-class test accuracy", "", tables["per_class"].to_markdown()]
    return "\n".join(md).rstrip("\n") + "\n"


def _render_latex(record: RunRecord, report: RunReport) -> str:
    tex = [
        f"% Tables of trainscope run '{record.path.name}' (generated; do not edit by hand).",
        "% Needs \\usepackage{booktabs} in the preamble; \\input{tables.tex} where wanted.",
        "",
    ]
    for key in TABLE_ORDER:
        table = report.tables[key]
        if table.rows:  # an empty tabular is a LaTeX error, not an empty table
            tex += [table.to_latex()]
    return "\n".join(tex)


def build_run_report(
    run_dir: str | os.PathLike[str], out_dir: str | os.PathLike[str] | None = None
) -> RunReport:
    """Write figures, ``report.md`` and ``tables.tex`` for one run directory.

    ``out_dir`` defaults to ``run_dir/report``. Failed runs are reported too: whatever
    the summary holds is shown, with a visible "Run failed: <error>" line.
    """
    record = load_run(run_dir)
    out = Path(out_dir) if out_dir is not None else record.path / "report"
    out.mkdir(parents=True, exist_ok=True)
    summary = record.summary
    report = RunReport(
        run_dir=record.path,
        out_dir=out,
        tables=_build_tables(record),
        status=summary.get("status"),
        error=summary.get("error"),
    )
    # Remove figures of an earlier build that this one may not redraw (e.g. no steps now).
    for stale in ("stages.png", "stages.svg", "loss.png", "loss.svg"):
        (out / stale).unlink(missing_ok=True)

    report.files += stage_pie(summary, out / "stages.png", out / "stages.svg")
    loss_files = loss_curve(record, out / "loss.png")
    report.files += loss_files

    md_path = out / "report.md"
    md_path.write_text(_render_markdown(record, report, bool(loss_files)), encoding="utf-8")
    tex_path = out / "tables.tex"
    tex_path.write_text(_render_latex(record, report), encoding="utf-8")
    report.files += [md_path, tex_path]
    return report


def render_tables_rich(report: RunReport) -> list[rich.table.Table]:
    """The report's non-empty tables as rich tables, for printing on the console."""
    from trainscope.reports.console import table_to_rich

    tables = (report.tables.get(key) for key in TABLE_ORDER)
    return [table_to_rich(t) for t in tables if t is not None and t.rows]
