"""The report section of a study of the user's own script (``trainscope study loader |
precision | checkpointing -- SCRIPT.py``): each configuration's injected settings against
the first one's (the script as it is, or the fewest workers).

Per configuration, over its repeats: the steady-state step time, its data wait and the
rest of the step, the run's wall time, the tensor bytes a step holds (counted on the
memory probe's step: exact), the last logged loss (for settings that change numerics)
and the verdict against the first configuration, claimed only where the spreads do not
overlap.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trainscope.analysis.stats import SPREAD_NOTE, fmt_spread, per_step_stages, step_losses, step_ms
from trainscope.records.run_dir import RunRecord
from trainscope.records.study_dir import StudyRecord
from trainscope.records.view import SummaryView
from trainscope.render.document import Document, escape_inline
from trainscope.render.table import MISSING, Table, fmt_bytes
from trainscope.reports.section import Section, each_config, not_applicable_list
from trainscope.reports.study_bars import Bars, BarTexts, bar_figure
from trainscope.reports.study_doctor import verdict
from trainscope.util.spread import spread

WHAT = {
    "loader": "DataLoader worker processes (and pinned memory on a GPU) given to every "
    "DataLoader the script builds",
    "precision": "the training forward and its loss under bf16 autocast against the script "
    "as it is (fp32)",
    "checkpointing": "the model's repeated blocks under each activation-checkpointing policy "
    "against none: the step time recomputation costs and the activation bytes it saves",
}


def _last_loss(record: RunRecord) -> float | None:
    _, losses = step_losses(record)
    return losses[-1] if losses else None


def _activations(summary: dict[str, Any]) -> float | None:
    value = SummaryView(summary).memory.get("activations_bytes")
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def script_sections(study: StudyRecord, doc: Document, plots: Path) -> Section:
    """The table of configurations, the bar chart of step times, and the finding."""
    section = Section()
    kind = study.plan.kind
    spec = study.plan.base_config.get("script") or {}
    doc.heading("Your script under each setting", 2)
    command = " ".join(str(a) for a in spec.get("argv") or [])
    doc.paragraph(
        f"The unchanged script `{escape_inline(command)}`, re-run for "
        f"{escape_inline(str(spec.get('steps')))} training steps per run with "
        f"{escape_inline(WHAT.get(kind, 'each setting'))}, each injected by `trainscope "
        "profile --inject`. Step time is each run's steady-state median (its first steps "
        f"left out), then the {SPREAD_NOTE} over the repeats; data wait and the rest are "
        "the steady-state means per step."
    )
    configs = [c for c in each_config(study, "") if c.planned.applicable]
    steps = {c.name: spread(step_ms(r.summary) for r in c.runs) for c in configs}
    first = configs[0].name if configs else None
    rows: list[list[object]] = []
    bars = Bars()
    for c in configs:
        per = [per_step_stages(r) for r in c.runs]
        wait = spread(p.get("data_wait") for p in per).scaled(1e3)
        rest = spread(sum(v for k, v in p.items() if k != "data_wait") for p in per).scaled(1e3)
        wall = spread(r.view.wall_time_s for r in c.runs)
        acts = spread(_activations(r.summary) for r in c.runs)
        loss = spread(_last_loss(r) for r in c.runs)
        vs = "–" if c.name == first or first is None else verdict(steps[c.name], steps[first])
        rows.append([c.name, str(c.planned.labels.get("inject", "none")), str(steps[c.name].n),
                     fmt_spread(steps[c.name]), fmt_spread(wait), fmt_spread(rest),
                     fmt_spread(wall), fmt_bytes(acts.median) if acts.ok else MISSING,
                     f"{loss.median:.4g}" if loss.ok else MISSING, vs])  # fmt: skip
        bars.add(steps[c.name] if steps[c.name].ok else None)
    table = Table(
        ["configuration", "injected", "n", "step (ms)", "data wait, mean (ms)", "rest, mean (ms)",
         "wall (s)", "activations", "last loss", f"vs {first or 'the first'}"],
        rows, f"Each configuration of the script over its repeats ({SPREAD_NOTE}).",
        "tab:script-study", "llrrrrrrrl",
    )  # fmt: skip
    section.tables["script"] = table
    texts = BarTexts("step (ms)", f"Step time per configuration ({kind})",
                     "Steady-state step time per configuration (median and spread)")  # fmt: skip
    bar_figure(doc, [c.name for c in configs], bars, plots / f"script_{kind}.png", texts)
    doc.table(table)
    not_applicable_list(study, doc, "machine")
    section.findings += _best(configs, steps, first)
    for text in section.findings:
        doc.paragraph(escape_inline(text))
    return section


def _best(configs: list[Any], steps: dict[str, Any], first: str | None) -> list[str]:
    """The fastest configuration proven faster than the first, or that none is."""
    if first is None or not steps[first].ok:
        return []
    faster = [c.name for c in configs if c.name != first and steps[c.name].ok
              and verdict(steps[c.name], steps[first]).endswith("faster")]  # fmt: skip
    if not faster:
        return [f"No configuration is faster per step than {first} beyond the noise."]
    best = min(faster, key=lambda n: steps[n].median)
    return [f"Fastest beyond the noise: {best}, {verdict(steps[best], steps[first])} per step "
            f"than {first}."]  # fmt: skip


__all__ = ["script_sections"]
