"""Chapters 6 and 12: a run profiled and doctored, a run quantized.

Chapter 6 profiles MNIST with augmentation on one compute thread (the loader decodes and
augments in the training process, the usual first setting), asks ``trainscope doctor``
what to fix and re-measures its fix (``doctor --apply``). Chapter 12 trains LeNet on
MNIST and quantizes its Linear layers to INT8 (``trainscope quantize``).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from trainscope.analysis.cpu import load_findings
from trainscope.analysis.stats import compare_text
from trainscope.diagnosis.load_rule import RULE as LOAD_RULE
from trainscope.errors import TrainscopeError
from trainscope.lab.steps import MakeContext, read_json, read_load
from trainscope.records.jsonio import read_json_object
from trainscope.records.study_dir import load_study
from trainscope.render.document import Document, Heading, escape_inline
from trainscope.reports.quantize_section import quantize_section
from trainscope.reports.section import Section
from trainscope.reports.study_report import section_builder, study_header
from trainscope.util.load import loaded, not_a_finding
from trainscope.util.spread import spread

MNIST = "mnist"
PROFILE = {True: ("60", "2"), False: ("200", "3")}
"""The profiled run's steps and the profile's repeats, under --quick (True) and not."""
APPLY = {True: ("40", "5"), False: ("60", "7")}
"""``doctor --apply``'s steps and repeats, under --quick (True) and not."""
QUANTIZE_LOAD = "quantize-load.json"
"""The other load beside the quantize command (its evaluation times record none)."""
INT8_EPOCHS = {True: "2", False: "8"}


def mnist_split(ctx: MakeContext) -> str:
    """The lab's MNIST training split (8k/2k from the test set under ``--data``), made
    once in the lab's folder and shared by the chapters that train on MNIST."""
    out = ctx.folder.parent.parent / "data" / "mnist"
    ctx.run(["data", "mnist-split", ctx.data(MNIST), str(out)],
            skip=(out / "train-labels-idx1-ubyte.gz").is_file())  # fmt: skip
    return str(out)


def study_done(folder: Path) -> bool:
    """Whether ``folder`` holds a completed study."""
    path = folder / "study.json"
    if not path.is_file():
        return False
    try:
        return read_json_object(path).get("status") == "completed"
    except (TrainscopeError, OSError, ValueError):
        return False


def make_time(ctx: MakeContext) -> None:
    """Profile the run, ask the doctor, re-measure its fix (when it has one)."""
    data = mnist_split(ctx)
    prof = ctx.folder / "profile"
    steps, repeats = PROFILE[ctx.quick]
    argv = ["study", "profile", "--workload", "mnist", "--data-dir", data, "--augment",
            "--batch-size", "64", "--threads", "1", "--epochs", "1", "--max-steps-per-epoch",
            steps, "--repeats", repeats, "--out", str(prof), "-q"]  # fmt: skip
    ctx.run(argv, skip=study_done(prof))
    run = _profiled_run(prof)
    findings = ctx.folder / "doctor.json"
    ctx.run(["doctor", run, "--json"], skip=findings.is_file(), capture=findings)
    found = _findings(findings)
    if not any(f.get("fix") for f in found):
        return  # nothing to re-measure: the section says so
    if found[0].get("rule") == LOAD_RULE:  # the doctor would only wait, then refuse
        ctx.say("  the profiled run was measured under other load: no fix re-measured")
        return
    doctor = ctx.folder / "doctor"
    apply_steps, apply_repeats = APPLY[ctx.quick]
    ctx.run(["doctor", run, "--apply", "--steps", apply_steps, "--repeats", apply_repeats,
             "--out", str(doctor), "-q"], skip=study_done(doctor))  # fmt: skip


def _profiled_run(prof: Path) -> str:
    """The first measured run of the profile study (the doctor reads one run); where
    other load contaminated every repeat, the first of them (the doctor then says so
    first)."""
    study = load_study(prof)
    for c in study.configs():
        runs = study.measured(c.config) or study.repeats(c.config)
        if runs:
            return str(runs[0].path)
    raise TrainscopeError(f"{prof}: the profile study has no completed run")


def _findings(path: Path) -> list[dict[str, Any]]:
    data = read_json(path) if path.is_file() else []
    return [f for f in data if isinstance(f, dict)] if isinstance(data, list) else []


def add_shifted(doc: Document, part: Document, level: int) -> None:
    """``part``'s blocks at the end of ``doc``, its headings ``level`` down (a report's
    sections inside a chapter)."""
    doc.blocks.extend(Heading(b.text, min(6, b.level + level)) if isinstance(b, Heading)
                      else b for b in part.blocks)  # fmt: skip


def study_part(folder: Path, doc: Document, plots: Path, level: int = 1) -> Section:
    """A study's header and report blocks into ``doc``, its headings ``level`` down."""
    study = load_study(folder)
    part = Document("")
    study_header(study, part)
    build = section_builder(study)
    section = build(study, part, plots) if build is not None else Section()
    # First, as in the study's own report: what other load left without any evidence.
    section.findings[:0] = load_findings(study)
    add_shifted(doc, part, level)
    return section


def time_section(folder: Path, doc: Document, plots: Path) -> Section:
    """The profile's stages and advice, the doctor's top finding, its fix re-measured."""
    section = study_part(folder / "profile", doc, plots / "profile")
    found = _findings(folder / "doctor.json")
    doc.heading("What the doctor proposes", 4)
    if not found:
        text = "The doctor found nothing to fix beyond a minor point in the profiled run."
        doc.paragraph(text)
        section.findings.append(text)
        return section
    top = found[0]
    text = f"The doctor's top finding ({top.get('severity')}): {top.get('problem')}"
    if top.get("estimated_gain"):
        text += f" Estimate: {top['estimated_gain']}."
    doc.paragraph(escape_inline(text))
    section.findings.append(text)
    if top.get("rule") == LOAD_RULE:
        text = ("No fix was re-measured: the profiled run was measured under other load, "
                "and a re-measure beside that load would be no evidence either.")  # fmt: skip
        doc.paragraph(text)
        section.findings.append(text)
    if (folder / "doctor").is_dir():
        applied = study_part(folder / "doctor", doc, plots / "doctor")
        section.findings += applied.findings
        section.tables.update({f"doctor-{k}": t for k, t in applied.tables.items()})
    return section


def int8_needs() -> str | None:
    """What this machine lacks for chapter 12 (torchao), or None."""
    if importlib.util.find_spec("torchao") is None:
        return "needs torchao: pip install 'trainscope[quant]'"
    return None


def make_int8(ctx: MakeContext) -> None:
    """Train LeNet on MNIST (weights kept), then quantize it."""
    data = mnist_split(ctx)
    run = ctx.folder / "run"
    ctx.run(["run", "--workload", "mnist", "--data-dir", data, "--epochs",
             INT8_EPOCHS[ctx.quick], "--save-weights",
             "--out", str(run), "-q"], skip=(run / "model.safetensors").is_file())  # fmt: skip
    ctx.run(
        ["quantize", str(run), "-q"],
        skip=(run / "quantize.json").is_file(),
        load=ctx.folder / QUANTIZE_LOAD,
    )  # its evaluation times record no load


def int8_section(folder: Path, doc: Document, plots: Path) -> Section:
    """The quantize section of the run's report (fp32 against int8)."""
    part = Document("")
    section = quantize_section(folder / "run", part)
    if section is None:
        raise TrainscopeError(f"{folder / 'run'}: no quantize.json")
    add_shifted(doc, part, 2)
    data = read_json(folder / "run" / "quantize.json")
    times = {k: spread(((data.get(k) or {}).get("eval_s") or {}).get("repeats") or [])
             for k in ("fp32", "int8")}  # fmt: skip
    beside = read_load(folder / QUANTIZE_LOAD)
    if beside is not None and loaded(beside):
        text = not_a_finding("the quantize command's fp32 and int8 evaluations", [beside])
        section.findings.append(text)
        doc.paragraph(escape_inline(text))
    elif times["fp32"].ok and times["int8"].ok:
        text = compare_text("int8", times["int8"], "fp32", times["fp32"], "evaluation time",
                            unit=" s")  # fmt: skip
        section.findings.append(text)
        doc.paragraph(escape_inline(text))
    return section


__all__ = ["make_int8", "make_time", "int8_section", "study_part", "time_section"]
