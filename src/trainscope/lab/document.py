"""The lab's document: one chapter per question, each built from its study's records.

A chapter states its question; its short answer is the study's own findings (sentences
its report builder generates by the noise rule: median, spread and n, no claim inside
the noise); then the study's tables and figures, the command that reproduces them and
the folder of records every number comes from. A chapter this version cannot measure,
or one whose data was not given, says so instead of showing anything.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from trainscope.errors import TrainscopeError
from trainscope.lab.chapter_runs import study_part
from trainscope.lab.chapters import Chapter
from trainscope.lab.makers import maker
from trainscope.lab.runner import ChapterState, LabResult
from trainscope.lab.steps import COMMAND_LOAD, read_commands, read_load
from trainscope.records.study_dir import load_study
from trainscope.render.document import Document, TableBlock, escape_inline, inline_code
from trainscope.render.document import write_document as write_markdown_html
from trainscope.render.document_latex import write_latex_document
from trainscope.render.table import LATEX_NEEDS, Table
from trainscope.reports.section import Section
from trainscope.util.load import loaded, not_a_finding

STATUS_TEXT = {
    "measured": "measured here",
    "reused": "from an existing study (--from)",
    "not built": "not measured by this version of trainscope",
    "elsewhere": "not measured on a script: it needs trainscope's reference workloads",
    "needs data": "not measured: its data was not given",
    "unavailable": "not measured: this machine lacks what it needs",
    "interrupted": "not finished: the lab was stopped while measuring it",
    "failed": "its study failed",
}
NOT_SHOWN = {
    "failed": "This chapter was not measured: its study failed",
    "elsewhere": "This chapter is not measured in a lab of a script",
}
"""The sentence of a chapter shown without figures, where "This chapter is ..." (its
state's text) would not be English."""
PDF_PACKAGES = "texlive-latex-base texlive-latex-recommended"
"""The Debian packages that build the PDF: pdflatex and geometry, graphicx, longtable
(-base), booktabs and float (-recommended); the T1 fonts come with texlive-base, a
dependency."""
PDF_HINT = f"to build the PDF, on Debian or Ubuntu: apt-get install {PDF_PACKAGES}"


def _contents(doc: Document, chapters: list[Chapter], states: dict[int, ChapterState]) -> None:
    rows = [[str(c.number), c.title, STATUS_TEXT[states[c.number].status]]
            for c in chapters]  # fmt: skip
    doc.table(Table(["Chapter", "Question", "State"], rows, "The chapters of this lab.",
                    "tab:lab-contents", "rll"))  # fmt: skip


def _study_blocks(folder: str, plots: Path) -> tuple[Document, Section, Any]:
    """The study's report blocks (its header, tables, figures), built apart so that its
    findings can lead the chapter; its headings one level down."""
    part = Document("")
    section = study_part(Path(folder), part, plots)
    return part, section, load_study(folder)


def _beside_load(folder: Path, findings: list[str]) -> list[str]:
    """A command chapter's findings where the lab measured other load beside it: what
    it checked (its first finding, the examples) stays, its timings give way to one
    "not a finding" sentence."""
    beside = read_load(folder / COMMAND_LOAD)
    if beside is None or not loaded(beside) or not findings:
        return findings
    return [findings[0], not_a_finding("the command's timings", [beside])]


def _chapter(doc: Document, c: Chapter, state: ChapterState, plots: Path) -> dict[str, Table]:
    doc.heading(f"{c.number}. {c.title}", 2)
    doc.paragraph(f"**Question.** {escape_inline(c.question)}")
    if state.status not in ("measured", "reused") or state.study_dir is None:
        reason = f" ({escape_inline(state.reason)})" if state.reason else ""
        said = NOT_SHOWN.get(state.status, f"This chapter is {STATUS_TEXT[state.status]}")
        doc.note(f"{said}{reason}.")
        return {}
    chapter_plots = plots / f"{c.number:02d}-{c.slug}"
    if c.maker is not None:
        part = Document("")
        section = maker(c.maker).section(Path(state.study_dir), part, chapter_plots)
        commands = read_commands(Path(state.study_dir)) or (state.command or "").splitlines()
    else:
        part, section, study = _study_blocks(state.study_dir, chapter_plots)
        if c.command:
            section.findings[:] = _beside_load(Path(state.study_dir), section.findings)
        argv = study.meta.get("argv") or []
        commands = [state.command or ("trainscope " + " ".join(str(a) for a in argv[1:]))]
    if c.not_yet:
        doc.note(f"Not measured by this version: {escape_inline(c.not_yet)}.")
    doc.heading("Short answer", 3)
    if section.findings:
        doc.bullets([escape_inline(f) for f in section.findings])
    else:
        doc.paragraph("The study states no finding (no comparison beyond the noise).")
    doc.heading("The measurement", 3)
    tables = _chapter_labels(part, section.tables, c.number)
    doc.blocks.extend(part.blocks)
    doc.heading("Reproduce", 3)
    doc.code("\n".join(commands))
    doc.paragraph(
        f"Every figure in this chapter comes from the records in {inline_code(state.study_dir)}"
        " (each run's `summary.json` and `metrics.jsonl`, or the JSON answers its commands "
        "wrote):"
    )
    doc.bullets(records_list(Path(state.study_dir)))
    return {f"{c.number}-{k}": t for k, t in tables.items()}


def chapter_label(label: str, number: int) -> str:
    """A study's table label as chapter ``number`` shows it: ``tab:precision`` is
    ``tab:ch2-precision`` in chapter 2, so that two chapters running the same study
    (2 and 7: precision) label their tables apart in one document."""
    kind, colon, name = label.partition(":")
    return f"{kind}:ch{number}-{name}" if colon else f"ch{number}-{label}"


def _chapter_labels(part: Document, tables: dict[str, Table], number: int) -> dict[str, Table]:
    """Relabel the tables of a chapter's blocks (in place) by :func:`chapter_label`;
    return its study's ``tables`` relabelled alike (the same tables, for tables.tex)."""

    def relabel(t: Table) -> Table:
        return replace(t, label=chapter_label(t.label, number)) if t.label else t

    done: dict[int, Table] = {}  # by the id of the table relabelled
    for i, block in enumerate(part.blocks):
        if isinstance(block, TableBlock):
            part.blocks[i] = TableBlock(done.setdefault(id(block.table), relabel(block.table)))
    return {k: done.get(id(t)) or relabel(t) for k, t in tables.items()}


def records_list(folder: Path) -> list[str]:
    """Where each configuration's numbers come from: for every study in ``folder`` (the
    chapter's own, or those its commands made), each configuration and its measured run
    folders; and the JSON answers the chapter's commands wrote. Paths relative to
    ``folder``, as inline code."""
    studies = [folder] if (folder / "study.json").is_file() else sorted(
        p.parent for p in folder.glob("*/study.json"))  # fmt: skip
    items = []
    for s in studies:
        study = load_study(s)
        for c in study.configs():
            runs = [r.path for r in study.measured(c.config)] if c.applicable else []
            where = ", ".join(inline_code(str(p.relative_to(folder))) for p in runs)
            items.append(f"{escape_inline(c.config)}: {where or 'no measured run'}")
    answers = sorted(p for p in folder.glob("*.json") if p.name not in ("study.json",))
    answers += sorted(p for p in folder.glob("*/quantize.json"))
    if answers:
        items.append("answers: " + ", ".join(inline_code(str(p.relative_to(folder)))
                                             for p in answers))  # fmt: skip
    runs = sorted(p.parent for p in folder.glob("*/*/summary.json") if p.parent.parent.name
                  not in ("runs",))  # fmt: skip
    runs += sorted(p.parent for p in folder.glob("*/summary.json"))
    if runs:
        items.append("runs: " + ", ".join(inline_code(str(p.relative_to(folder))) for p in runs))
    return items or [f"the folder {inline_code(str(folder))}"]


def build_lab_document(result: LabResult, chapters: list[Chapter]) -> LabDocument:
    """Write ``report/report.md``, ``report.html``, ``report.tex``, ``tables.tex`` and,
    where pdflatex is on PATH, ``report.pdf`` of a lab."""
    out = result.out / "report"
    plots = out / "plots"
    plots.mkdir(parents=True, exist_ok=True)
    states = {s.number: s for s in result.states}
    doc = Document("trainscope lab: efficient training, measured on this machine")
    _title_page(doc, result)
    _contents(doc, chapters, states)
    tables: dict[str, Table] = {}
    for c in chapters:
        tables.update(_chapter(doc, c, states[c.number], plots))
    made = LabDocument(write_markdown_html(doc, out))
    tex = out / "tables.tex"
    body = [t.to_latex() for t in tables.values() if t.rows]
    tex.write_text("\n".join(["% Tables of a trainscope lab; generated, do not edit.",
                              LATEX_NEEDS, "", *body]), encoding="utf-8")  # fmt: skip
    made.files.append(tex)
    try:
        source, pdf = write_latex_document(doc, out, "report")
    except TrainscopeError as e:  # the other formats stand; the PDF's failure is said
        # A LaTeX package (a .sty) or font not found: the install that brings them.
        hint = f" ({PDF_HINT})" if "not found" in str(e) else ""
        made.problems.append(f"no PDF: {e}{hint}")
        made.files.append(out / "report.tex")
        return made
    made.files.append(source)
    if pdf is None:
        made.problems.append(
            f"no PDF: pdflatex is not on PATH (report.tex is the source; {PDF_HINT})"
        )
    else:
        made.files.append(pdf)
    return made


def _title_page(doc: Document, result: LabResult) -> None:
    budget = (
        "**--quick**: small workloads and few repeats, so spreads are wide and fewer "
        "differences clear the noise"
        if result.quick
        else "the full budget"
    )
    doc.paragraph(
        f"Built {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC with {budget}. Every "
        "number below was measured by the study its chapter names, on the machine its "
        "chapter describes, or is labelled as an estimate; a comparison is stated only where "
        "two spreads do not overlap."
    )  # fmt: skip


@dataclass
class LabDocument:
    """The files a lab's document was written to, and what could not be made."""

    files: list[Path]
    problems: list[str] = field(default_factory=list)


__all__ = ["LabDocument", "build_lab_document"]
