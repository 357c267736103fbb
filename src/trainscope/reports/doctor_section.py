"""The run report's "What to fix" section: ``trainscope doctor``'s findings on the run
(:mod:`trainscope.diagnosis`), so the report and the command give the same advice."""

from __future__ import annotations

from trainscope.diagnosis import diagnose_record
from trainscope.records.run_dir import RunRecord
from trainscope.render.document import Document, escape_inline, inline_code


def doctor_section(record: RunRecord, doc: Document) -> None:
    """Add the doctor's findings, most important first, each with its fix command."""
    diagnosis = diagnose_record(record)
    doc.heading("What to fix (trainscope doctor)")
    if not [f for f in diagnosis.findings if f.severity != "minor"]:
        doc.paragraph("Nothing to fix beyond the noise: no rule found more than a minor point.")
    items = []
    for f in diagnosis.findings:
        text = f"**{f.severity}**, {escape_inline(f.rule)}: {escape_inline(f.problem)}"
        text += " Evidence: " + "; ".join(escape_inline(e) for e in f.evidence) + "."
        text += f" Estimated gain: {escape_inline(f.gain)}."
        if f.numerics:
            text += " The fix changes numerics: compare the loss at the same step."
        text += f" Fix: {inline_code(f.command)}" if f.command else " No flag changes it."
        items.append(text)
    if items:
        doc.bullets(items)
    if diagnosis.unread:
        doc.paragraph(
            "Left out of the diagnosis (not readable): "
            + "; ".join(escape_inline(u) for u in diagnosis.unread)
        )
    doc.paragraph(
        "Rules and thresholds: docs/doctor.md. The same findings as a list: "
        + inline_code(f"trainscope doctor {record.path.name} --json")
        + "."
    )
