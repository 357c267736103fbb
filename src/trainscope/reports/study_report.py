"""The report of a study: one document (Markdown + HTML), LaTeX tables and plots.

Built from the study directory alone (``study.json`` and the run records), so it can be
rebuilt anywhere, without torch. Each study kind adds its own sections (``study_loader``,
``study_profile``, ``study_precision``, ``study_strategies``); this module adds what every
study shares: status, method, machine, failures, and writing the files.
"""

from __future__ import annotations

import os
import shlex
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainscope.records.study_dir import StudyRecord, load_study
from trainscope.reports.document import Document, escape_inline, write_document
from trainscope.reports.tables import Table, latex_escape


@dataclass
class StudyReport:
    """What :func:`build_study_report` produced."""

    study_dir: Path
    out_dir: Path
    kind: str
    status: str
    files: list[Path] = field(default_factory=list)
    tables: dict[str, Table] = field(default_factory=dict)
    findings: list[str] = field(default_factory=list)
    """The report's headline sentences (also printed on the console)."""

    @property
    def markdown_path(self) -> Path:
        """report.md."""
        return self.out_dir / "report.md"

    @property
    def html_path(self) -> Path:
        """report.html (self-contained)."""
        return self.out_dir / "report.html"


@dataclass
class Section:
    """What a study kind's builder returns: tables (for tables.tex) and headline findings."""

    tables: dict[str, Table] = field(default_factory=dict)
    findings: list[str] = field(default_factory=list)


def first_env(study: StudyRecord) -> dict[str, Any]:
    """env.json of the first run that has one (the machine the study ran on)."""
    for rec in study.records.values():
        if rec.env:
            return rec.env
    return {}


def first_summary(study: StudyRecord) -> dict[str, Any]:
    """summary.json of the first completed run."""
    for r in study.plan.runs:
        rec = study.completed(r)
        if rec is not None:
            return rec.summary
    return {}


def _header(study: StudyRecord, doc: Document) -> None:
    plan = study.plan
    applicable = [r for r in plan.runs if r.applicable]
    done = [r for r in applicable if study.completed(r)]
    if study.status not in ("completed",):
        doc.note(
            f"Study status: **{study.status}**. {len(done)} of {len(applicable)} planned runs "
            "completed; the tables below use what is there. Rerun the same `trainscope study` "
            "command to finish it (completed runs are kept)."
        )
    env = first_env(study)
    summary = first_summary(study)
    repeats = plan.options.get("repeats")
    warm = any(r.warmup for r in plan.runs)
    doc.paragraph(
        f"Workload **{summary.get('workload', plan.base_config.get('workload', {}).get('name'))}**"
        f" ({summary.get('workload_description', 'no completed run')}). "
        f"{repeats} measured repeat(s) per configuration, shown as mean ± sample standard "
        "deviation"
        + (", after one warm-up run that is discarded" if warm else " (no warm-up run)")
        + ". Repeats ran round-robin across configurations, so slow spells of the machine "
        "spread over all of them."
    )
    machine = [
        f"device: `{summary.get('device', '?')}` ({summary.get('device_name', '?')})",
        f"CPUs: {env.get('cpu_count', '?')}, host `{env.get('hostname', '?')}`",
        f"python {env.get('python', '?')}, torch {env.get('torch', '?')}",
    ]
    if env.get("git_sha"):
        machine.append(f"trainscope git `{str(env['git_sha'])[:12]}`")
    doc.bullets(machine)
    failed = study.failed()
    if failed:
        doc.note(f"{len(failed)} run(s) failed; they are left out of the statistics:")
        doc.bullets([f"`{r.id}`: {escape_inline(err)}" for r, err in failed[:20]])


def _latex(study: StudyRecord, tables: dict[str, Table]) -> str:
    tex = [
        f"% Tables of trainscope study '{latex_escape(study.path.name)}' "
        f"({study.plan.kind}); generated, do not edit.",
        "% Needs \\usepackage{booktabs}; \\input{tables.tex} where wanted.",
        "",
    ]
    tex += [t.to_latex() for t in tables.values() if t.rows]
    return "\n".join(tex)


def build_study_report(
    study_dir: str | os.PathLike[str], out_dir: str | os.PathLike[str] | None = None
) -> StudyReport:
    """Write report.md, report.html, tables.tex and plots/ for a study directory."""
    study = load_study(study_dir)
    out = Path(out_dir) if out_dir is not None else study.path / "report"
    plots = out / "plots"
    if plots.is_dir():
        shutil.rmtree(plots)  # figures of an earlier build this one may not redraw
    plots.mkdir(parents=True, exist_ok=True)
    kind = study.plan.kind
    doc = Document(f"Study: {kind} ({study.path.name})")
    _header(study, doc)
    if kind == "loader":
        from trainscope.reports.study_loader import loader_sections as build
    elif kind == "profile":
        from trainscope.reports.study_profile import profile_sections as build
    elif kind == "precision":
        from trainscope.reports.study_precision import precision_sections as build
    elif kind == "strategies":
        from trainscope.reports.study_strategies import strategies_sections as build
    else:
        doc.note(f"Unknown study kind {kind!r}: this trainscope cannot report it.")
        build = None
    section = build(study, doc, plots) if build is not None else Section()
    doc.heading("Reproduce", 2)
    # study.json keeps the command; older studies only have it in their runs' env.json.
    argv = study.meta.get("argv") or first_env(study).get("argv") or []
    if len(argv) > 1 and argv[1] == "study":
        doc.paragraph("The command that ran this study (rerun it to resume or repeat it):")
        doc.code("trainscope " + " ".join(shlex.quote(str(a)) for a in argv[1:]))
    doc.paragraph(
        "Each run's resolved configuration is its `config.yaml` under `runs/`; "
        f"`trainscope report {study.path.name}` rebuilds this report from the records."
    )
    report = StudyReport(
        study_dir=study.path,
        out_dir=out,
        kind=kind,
        status=study.status,
        tables=section.tables,
        findings=section.findings,
    )
    report.files += write_document(doc, out)
    tex = out / "tables.tex"
    tex.write_text(_latex(study, section.tables), encoding="utf-8")
    report.files.append(tex)
    report.files += sorted(p for p in plots.iterdir() if p.is_file())
    return report


def print_study_report(report: StudyReport) -> None:
    """Tables and findings on the console (stderr), then where the files are."""
    from rich.console import Console

    from trainscope.reports.console import table_to_rich

    console = Console(stderr=True)
    for table in report.tables.values():
        if table.rows:
            console.print(table_to_rich(table))
    for line in report.findings:
        console.print("• " + line, highlight=False, markup=False)
    console.print(f"report: {report.markdown_path} and {report.html_path}", highlight=False)
