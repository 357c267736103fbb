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
from trainscope.reports.stats import fmt_spread, step_ms
from trainscope.reports.tables import MISSING, Table, fmt_bytes
from trainscope.util.spread import Spread, differ, no_difference_text, spread

BASELINE = "baseline"  # the name studies.doctor gives the run as it was


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


def _wall_s(summary: dict[str, Any]) -> float | None:
    wall = summary.get("wall_time_s")
    return wall if isinstance(wall, (int, float)) and not isinstance(wall, bool) else None


def measured(c: Any) -> str:
    """What a configuration's fix saves: ``step`` time, or the run's ``wall`` time."""
    return "wall" if c.planned.labels.get("measure") == "wall" else "step"


def doctor_rows(study: StudyRecord) -> tuple[list[list[object]], dict[str, Spread]]:
    """One row per configuration, and each one's figure on what its fix saves (step ms or
    wall s; the baseline's under both names, ``baseline`` and ``baseline/wall``)."""
    configs = each_config(study, "")
    step = {c.name: spread(step_ms(r.summary) for r in c.runs) for c in configs}
    wall = {c.name: spread(_wall_s(r.summary) for r in c.runs) for c in configs}
    judged = {c.name: (wall if measured(c) == "wall" else step)[c.name] for c in configs}
    judged[f"{BASELINE}/wall"] = wall.get(BASELINE, spread([]))
    rows: list[list[object]] = []
    for c in configs:
        summ = [r.summary for r in c.runs]
        peak = spread(s.get("peak_memory_bytes") for s in summ)
        loss = spread(_loss(s) for s in summ)
        base = wall if measured(c) == "wall" else step
        vs = "–" if c.name == BASELINE else verdict(base[c.name], base.get(BASELINE, spread([])))
        rows.append([
            c.name, str(c.planned.labels.get("fix", "")), fmt_spread(step[c.name]),
            fmt_spread(wall[c.name]), f"{vs} ({measured(c)})" if c.name != BASELINE else vs,
            fmt_bytes(peak.median) if peak.ok else MISSING,
            f"{loss.median:.4g}" if loss.ok else MISSING,
            "yes" if c.planned.labels.get("numerics") else "no",
        ])  # fmt: skip
    return rows, judged


def best_proven(study: StudyRecord, figures: dict[str, Spread]) -> str | None:
    """The configuration with the largest proven saving (each judged on what its fix
    saves, against the baseline's same figure), or None where none is proven."""
    ratios: dict[str, float] = {}
    for c in each_config(study, ""):
        base = figures.get(f"{BASELINE}/wall" if measured(c) == "wall" else BASELINE)
        sp = figures.get(c.name)
        if c.name == BASELINE or base is None or sp is None or not (sp.ok and base.ok):
            continue
        if differ(sp, base) and sp.median < base.median:
            ratios[c.name] = base.median / sp.median if sp.median else float("inf")
    return max(ratios, key=lambda n: ratios[n]) if ratios else None


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
        "the steady-state median of each run, wall time the whole run's; each fix is judged "
        "on what it saves (step: the loop; wall: evaluation, checkpoints, compile), and is "
        "called faster only where its spread and the baseline's do not overlap. Fixes that "
        "change numerics show the training loss over the same steps beside the baseline's."
    )
    rows, steps = doctor_rows(study)
    table = Table(
        ["configuration", "fix", "step (ms)", "wall (s)", "vs baseline", "peak memory",
         "train loss", "changes numerics"],
        rows, caption="Each fix against the baseline", label="tab:doctor",
    )  # fmt: skip
    section.add_table(doc, "doctor", table)
    best = best_proven(study, steps)
    if best is None:
        line = "No fix is faster than the baseline beyond the noise: keep the run as it was."
    else:
        cfg = next(c for c in each_config(study, "") if c.name == best)
        base = steps[f"{BASELINE}/wall" if measured(cfg) == "wall" else BASELINE]
        what = "in wall time" if measured(cfg) == "wall" else "per step"
        line = (
            f"Best proven: {escape_inline(best)}, {verdict(steps[best], base)} {what} "
            f"than the baseline. Command: {inline_code(_command(study, best))}"
        )
    doc.paragraph(line)
    section.findings.append(line)
    return section
