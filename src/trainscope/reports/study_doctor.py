"""The doctor study's report (``trainscope doctor RUN_DIR --apply``): each fix against the
baseline, step time and memory with their spread and n, called better only beyond the
noise, and the best proven command line (torch-free)."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from trainscope.records.study_dir import StudyRecord
from trainscope.reports.document import Document, escape_inline, inline_code
from trainscope.reports.section import Section, each_config
from trainscope.reports.stats import fmt_spread
from trainscope.reports.tables import MISSING, Table, fmt_bytes
from trainscope.util.spread import Spread, differ, no_difference_text, spread

BASELINE = "baseline"  # the name studies.doctor gives the run as it was


def _step_ms(summary: dict[str, Any]) -> float | None:
    step = ((summary.get("steady_state") or {}).get("step_s") or {}).get("median")
    return 1e3 * step if isinstance(step, (int, float)) else None


def _loss(summary: dict[str, Any]) -> float | None:
    epochs = summary.get("epochs") or []
    loss = epochs[-1].get("train_loss") if epochs and isinstance(epochs[-1], dict) else None
    return loss if isinstance(loss, (int, float)) else None


def verdict(step: Spread, base: Spread) -> str:
    """Better or worse than the baseline beyond the noise (the studies' rule), or not."""
    if not step.ok or not base.ok:
        return "not measured"
    if differ(step, base):
        ratio = base.median / step.median if step.median else float("inf")
        return f"{ratio:.2f}x faster" if ratio > 1 else f"{1 / ratio:.2f}x slower"
    return no_difference_text(step, base)


def doctor_rows(study: StudyRecord) -> tuple[list[list[object]], dict[str, Spread]]:
    """One row per configuration, and each one's step-time spread (ms)."""
    steps = {c.name: spread(_step_ms(r.summary) for r in c.runs) for c in each_config(study, "")}
    base = steps.get(BASELINE, spread([]))
    rows: list[list[object]] = []
    for c in each_config(study, ""):
        summ = [r.summary for r in c.runs]
        peak = spread(s.get("peak_memory_bytes") for s in summ)
        loss = spread(_loss(s) for s in summ)
        numerics = "yes" if c.planned.labels.get("numerics") else "no"
        rows.append([
            c.name, str(c.planned.labels.get("fix", "")), fmt_spread(steps[c.name]),
            "–" if c.name == BASELINE else verdict(steps[c.name], base),
            fmt_bytes(peak.median) if peak.ok else MISSING,
            f"{loss.median:.4g}" if loss.ok else MISSING, numerics,
        ])  # fmt: skip
    return rows, steps


def best_proven(study: StudyRecord, steps: dict[str, Spread]) -> str | None:
    """The fastest configuration that is faster than the baseline beyond the noise."""
    base = steps.get(BASELINE)
    proven = [
        name for name, sp in steps.items()
        if name != BASELINE and base is not None and sp.ok and base.ok
        and differ(sp, base) and sp.median < base.median
    ]  # fmt: skip
    return min(proven, key=lambda n: steps[n].median) if proven else None


def _command(study: StudyRecord, name: str) -> str:
    """The run's own command line with the configuration's fix flags."""
    run_dir = Path(str(study.plan.options.get("run_dir", "RUN_DIR")))
    cfg = next(c for c in study.configs() if c.config == name)
    flags = cfg.labels.get("flags")
    flags = [str(x) for x in flags] if isinstance(flags, list) else []
    return shlex.join(["trainscope", "run", "--config", str(run_dir / "config.yaml"), *flags])


def doctor_sections(study: StudyRecord, doc: Document, plots: Path) -> Section:
    """Before/after per fix, and the recommendation."""
    section = Section()
    options = study.plan.options
    doc.heading("The doctor's fixes, re-measured", 2)
    doc.paragraph(
        f"Run {inline_code(str(options.get('run_dir')))}: the baseline and each fix for "
        f"{escape_inline(str(options.get('steps')))} steps, repeats alternated. Step time is "
        "the steady-state median of each run; a fix is called faster only where its spread "
        "and the baseline's do not overlap. Fixes that change numerics show the training "
        "loss over the same steps beside the baseline's."
    )
    rows, steps = doctor_rows(study)
    table = Table(
        ["configuration", "fix", "step (ms)", "vs baseline", "peak memory", "train loss",
         "changes numerics"],
        rows, caption="Each fix against the baseline", label="tab:doctor",
    )  # fmt: skip
    section.add_table(doc, "doctor", table)
    best = best_proven(study, steps)
    if best is None:
        line = "No fix is faster than the baseline beyond the noise: keep the run as it was."
    else:
        line = (
            f"Best proven: {escape_inline(best)}, {verdict(steps[best], steps[BASELINE])} "
            f"than the baseline. Command: {inline_code(_command(study, best))}"
        )
    doc.paragraph(line)
    section.findings.append(line)
    return section
