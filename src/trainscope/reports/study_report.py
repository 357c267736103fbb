"""The report of a study: one document (Markdown + HTML), LaTeX tables and plots.

Built from the study directory alone (``study.json`` and the run records), so it can be
rebuilt anywhere, without torch. Each study kind adds its own sections (``study_loader``,
``study_profile``, ``study_precision``, ``study_strategies``, ...); this module adds what
every study of runs shares: status, method, machine, failures, and writing the files (the
collectives sweep has no runs: its section says itself how its processes ran).
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainscope import registry
from trainscope.analysis.cpu import load_findings, study_cpu_lines, study_load_lines
from trainscope.records.study_dir import StudyRecord, load_study
from trainscope.render.console import make_console, print_line, print_table
from trainscope.render.document import Document, escape_inline, inline_code, write_document
from trainscope.render.outdir import ReportFiles, default_or, report_dir
from trainscope.render.table import LATEX_NEEDS, Table, latex_escape
from trainscope.reports.section import Section
from trainscope.reports.study_script import script_sections


@dataclass
class StudyReport(ReportFiles):
    """What :func:`build_study_report` produced."""

    study_dir: Path
    out_dir: Path
    kind: str
    status: str
    files: list[Path] = field(default_factory=list)
    tables: dict[str, Table] = field(default_factory=dict)
    findings: list[str] = field(default_factory=list)
    """The report's headline sentences (also printed on the console)."""


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


def study_header(study: StudyRecord, doc: Document) -> None:
    """A study's status, workload, repeats, how its runs executed and on what machine."""
    plan = study.plan
    applicable = [r for r in plan.runs if r.applicable]
    done = [r for r in applicable if study.completed(r)]
    status = str(study.status)
    cut = study.interrupted()
    if status in ("interrupted", "running") or status.startswith("stopped"):
        # A killed study never wrote "interrupted": it still says "running".
        how = "interrupted" if status == "running" else status
        during = f" (cut off during {', '.join(inline_code(r.id) for r in cut)})" if cut else ""
        doc.note(
            f"Study **{escape_inline(how)}** after {len(done)} of {len(applicable)} planned "
            f"runs{during}; the tables below use the completed ones. Rerun the same "
            "`trainscope study` command to finish it (completed runs are kept)."
        )
    elif status != "completed":
        doc.note(
            f"Study status: **{escape_inline(status)}**. {len(done)} of "
            f"{len(applicable)} planned runs completed; the tables below use what is there. "
            "Rerun the same `trainscope study` command to finish it (completed runs are kept)."
        )
    env = first_env(study)
    summary = first_summary(study)
    repeats = plan.options.get("repeats")
    warm = any(r.warmup for r in plan.runs)
    # Values from the records are text, not markup: escaped before they go into it.
    workload = summary.get("workload", plan.base_config.get("workload", {}).get("name"))
    description = summary.get("workload_description", "no completed run")
    doc.paragraph(
        f"Workload **{escape_inline(str(workload))}** ({escape_inline(str(description))}). "
        f"{escape_inline(str(repeats))} measured repeat(s) per configuration, shown as the "
        "median with its spread (the interquartile range when n ≥ 5, else min–max) and n"
        + (", after one warm-up run that is discarded" if warm else " (no warm-up run)")
        + ". Repeats ran round-robin across configurations, so slow spells of the machine "
        "spread over all of them. A difference is claimed only where two spreads do not "
        "overlap; otherwise the report says there is no measurable difference at that n. "
        "From 5 repeats on, one more than 3 scaled MADs from its median is flagged as an "
        "outlier, and kept."
    )
    doc.paragraph(_execution_text(study))

    def val(mapping: dict[str, Any], key: str) -> str:
        return escape_inline(str(mapping.get(key, "?")))

    def code(mapping: dict[str, Any], key: str) -> str:
        return inline_code(str(mapping.get(key, "?")))

    machine = [
        f"device: {code(summary, 'device')} ({val(summary, 'device_name')})",
        f"CPUs: {val(env, 'cpu_count')}, host {code(env, 'hostname')}",
        f"python {val(env, 'python')}, torch {val(env, 'torch')}",
    ]
    if env.get("git_sha"):
        machine.append(f"trainscope git {inline_code(str(env['git_sha'])[:12])}")
    doc.bullets(machine)
    for line in study_cpu_lines(study):  # plan and record text: escaped
        doc.paragraph(escape_inline(line))
    for line in study_load_lines(study):
        doc.note(escape_inline(line))
    for line in load_findings(study):
        doc.note(f"**{escape_inline(line)}.**")
    failed = study.failed()
    if failed:
        doc.note(f"{len(failed)} run(s) failed; they are left out of the statistics:")
        doc.bullets([f"{inline_code(str(r.id))}: {escape_inline(err)}" for r, err in failed[:20]])


def _execution_text(study: StudyRecord) -> str:
    """How the runs were executed, and what that means for setup time and memory."""
    warmup = ""
    for rec in study.records.values():
        st = rec.view.steady_state
        if "warmup_steps" in st:
            warmup = (
                f" Within each run the first {st['warmup_steps']} step(s) are warm-up, "
                "reported apart from the steady-state step times."
            )
            break
    if study.fresh_processes:
        return (
            "Execution: every run in a fresh process of its own, so each run's setup time "
            "includes its own imports and caches, and its peak memory is its own." + warmup
        )
    return (
        "Execution: the runs shared one process, one after another. Imports and warm caches "
        "were paid once (by the first run), so setup times are not a run's own, and a "
        "process-wide peak memory (RSS) is the high-water mark of all of them: neither "
        "compares across configurations. Pass --fresh-processes to run each in its own." + warmup
    )


def _latex(study: StudyRecord, tables: dict[str, Table]) -> str:
    # Names are someone else's text: escaped, they stay on this comment line.
    tex = [
        f"% Tables of trainscope study '{latex_escape(study.path.name)}' "
        f"({latex_escape(study.plan.kind)}); generated, do not edit.",
        LATEX_NEEDS,
        "",
    ]
    tex += [t.to_latex() for t in tables.values() if t.rows]
    return "\n".join(tex)


def build_study_report(
    study_dir: str | os.PathLike[str], out_dir: str | os.PathLike[str] | None = None
) -> StudyReport:
    """Write report.md, report.html, tables.tex and plots/ for a study directory."""
    study = load_study(study_dir)
    out, what, default = default_or(out_dir, study.path / "report")
    files = ("report.md", "report.html", "tables.tex")
    # An earlier build's figures go with the claim: this build may not redraw them all.
    with report_dir(out, "report", files, what=what, folders=("plots",), register=default):
        return _write_study_report(study, out)


def section_builder(study: StudyRecord) -> Any:
    """The function that writes ``study``'s own sections (its kind's; a study of a
    script's settings has one of its own), or None for a kind nobody registered."""
    kind = study.plan.kind
    # The kind is record text: only a registered kind's builder is ever imported.
    build = registry.report_builder(kind) if isinstance(kind, str) else None
    script = isinstance(study.plan.base_config.get("script"), dict)
    if build is not None and script and kind in ("loader", "precision", "checkpointing"):
        return script_sections  # a script's configurations: settings injected into it
    return build


def _write_study_report(study: StudyRecord, out: Path) -> StudyReport:
    plots = out / "plots"
    plots.mkdir(parents=True, exist_ok=True)
    before = set(plots.iterdir())  # someone else's files, kept by the claim: not ours
    kind = study.plan.kind
    doc = Document(f"Study: {kind} ({study.path.name})")
    if kind != "collectives":  # no runs: its section says itself how its processes ran
        study_header(study, doc)
    # The kind is record text: only a registered kind's builder is ever imported.
    build = section_builder(study)
    script = isinstance(study.plan.base_config.get("script"), dict)
    if build is None:
        doc.note(
            f"Unknown study kind {escape_inline(repr(kind))}: this trainscope cannot report it."
        )
    section = build(study, doc, plots) if build is not None else Section()
    doc.heading("Reproduce", 2)
    # study.json keeps the command; older studies only have it in their runs' env.json.
    argv = study.meta.get("argv") or first_env(study).get("argv") or []
    if len(argv) > 1 and argv[1] in ("study", "collectives"):
        doc.paragraph("The command that ran this study (rerun it to resume or repeat it):")
        doc.code("trainscope " + " ".join(shlex.quote(str(a)) for a in argv[1:]))
    # The full path: the folder's name alone works only from its parent directory.
    again = "trainscope report " + shlex.quote(str(study.path.resolve()))
    runs = (
        "Each re-run's record is under `runs/` (its `summary.json` says what ran, with "
        "which `--inject` settings); "
        if script
        else "Each run's resolved configuration is its `config.yaml` under `runs/`; "
    )
    doc.paragraph(
        (runs if study.plan.runs else "")
        + f"{inline_code(again)} rebuilds this report from the records, from any folder."
    )
    report = StudyReport(
        study_dir=study.path,
        out_dir=out,
        kind=kind,
        status=study.status,
        tables=section.tables,
        findings=load_findings(study) + section.findings,
    )
    report.files += write_document(doc, out)
    tex = out / "tables.tex"
    tex.write_text(_latex(study, section.tables), encoding="utf-8")
    report.files.append(tex)
    report.files += sorted(p for p in set(plots.iterdir()) - before if p.is_file())
    return report


def print_study_report(report: StudyReport) -> None:
    """Tables and findings on the console (stderr), then where the files are."""
    console = make_console(stderr=True)
    for table in report.tables.values():
        if table.rows:
            print_table(console, table)
    for line in report.findings:
        print_line(console, "• " + line)
    print_line(console, f"report: {report.markdown_path} and {report.html_path}")
