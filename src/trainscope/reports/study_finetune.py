"""Sections of the finetune study's report: full fine-tuning against LoRA, in what each
trains (parameters, counted), what a step costs (time per stage, measured), what it keeps
(gradients, optimizer states, activations, counted) and how well it learns (dev accuracy
after the same steps, and at the same training time)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainscope.analysis.memory import memory_of
from trainscope.analysis.stats import (
    SPREAD_NOTE,
    Quality,
    compare_text,
    count_text,
    fmt_spread,
    mean_curve,
    per_step_stages,
    quality_text,
    step_losses,
    step_ms,
)
from trainscope.records.run_dir import RunRecord
from trainscope.records.study_dir import StudyRecord
from trainscope.records.view import SummaryView
from trainscope.render.document import Document, escape_inline
from trainscope.render.study_plots import loss_curves_plot
from trainscope.render.table import Table, fmt_bytes, fmt_int, fmt_pct
from trainscope.reports.section import Section, each_config
from trainscope.util.spread import NONE, Spread, spread

STAGES = ("forward", "backward", "optimizer")


def _acc(x: Any) -> str:
    return fmt_pct(x, 2) if isinstance(x, (int, float)) else "–"


SAME_STEPS = Quality("Dev acc", "dev accuracy after the same steps", lambda s: s, _acc, True)
SAME_TIME = Quality("Dev acc at T", "dev accuracy at the same training time", lambda s: s,
                    _acc, True)  # fmt: skip


def dev_accuracy_by(summary: dict[str, Any], seconds: float) -> float | None:
    """The dev accuracy of the last evaluation a run had made within ``seconds`` of
    training (its epochs' training time, evaluation excluded); None if it had made none."""
    done, found = 0.0, None
    for e in SummaryView(summary).epochs:
        done += float(e.get("duration_s") or 0.0)
        if done > seconds * (1 + 1e-9):
            break
        if isinstance(e.get("val_accuracy"), (int, float)):
            found = float(e["val_accuracy"])
    return found


def _train_seconds(summary: dict[str, Any]) -> float | None:
    times = [e.get("duration_s") for e in SummaryView(summary).epochs]
    if not times or not all(isinstance(t, (int, float)) for t in times):
        return None
    return float(sum(times))


def _last_dev(summary: dict[str, Any]) -> Any:
    return (SummaryView(summary).epochs or [{}])[-1].get("val_accuracy")


@dataclass
class FinetuneData:
    """Per configuration: its statistics, loss curve and measured runs."""

    stats: dict[str, dict[str, Spread]] = field(default_factory=dict)
    curves: dict[str, tuple[list[int], list[float]]] = field(default_factory=dict)
    runs: dict[str, list[RunRecord]] = field(default_factory=dict)
    equal_time_s: float | None = None


def _config_stats(recs: list[RunRecord]) -> dict[str, Spread]:
    summ = [r.summary for r in recs]
    stages = [per_step_stages(r) for r in recs]
    out = {f"{k}_ms": spread(1e3 * s[k] for s in stages if k in s) for k in STAGES}
    out.update(
        step=spread(step_ms(s) for s in summ),
        train=spread(_train_seconds(s) for s in summ),
        trainable=spread(r.view.section("workload_info").get("trainable_parameters")
                         for r in recs),  # fmt: skip
        dev=spread(_last_dev(s) for s in summ),
        **{k: spread(memory_of(s).get(f"{k}_bytes") for s in summ)
           for k in ("gradients", "optimizer_states", "activations")},
    )  # fmt: skip
    return out


def finetune_data(study: StudyRecord) -> FinetuneData:
    """Every configuration's statistics; the equal training time T is the shortest
    configuration's median training time, and each one's dev accuracy at T."""
    data = FinetuneData()
    for c in each_config(study, "finetune"):
        if c.runs:
            data.runs[c.name] = c.runs
            data.stats[c.name] = _config_stats(c.runs)
            data.curves[c.name] = mean_curve([step_losses(r) for r in c.runs])
    times = [st["train"].median for st in data.stats.values() if st["train"].median]
    if times:
        data.equal_time_s = min(times)
        for name, recs in data.runs.items():
            data.stats[name]["dev_at_t"] = spread(
                dev_accuracy_by(r.summary, data.equal_time_s) for r in recs
            )
    return data


def finetune_sections(study: StudyRecord, doc: Document, plots: Path) -> Section:
    """Two tables (cost per step; memory and accuracy), the loss curves, the findings."""
    section = Section()
    doc.heading("Full fine-tuning vs LoRA", 2)
    data = finetune_data(study)
    section.add_table(doc, "finetune-time", _time_table(data))
    section.add_table(doc, "finetune-memory", _memory_table(data))
    title = "Training loss, full fine-tuning vs LoRA (mean of repeats)"
    files = loss_curves_plot(data.curves, plots / "finetune_loss.png", title=title)
    if files:
        doc.figure(files[0], "Training-loss curves of each configuration on one plot", None)
    for text in _findings(data):
        section.findings.append(text)
        doc.paragraph(escape_inline(text))
    return section


def _time_table(data: FinetuneData) -> Table:
    rows = [
        [name, str(st["step"].n), fmt_spread(st["trainable"], fmt_int), fmt_spread(st["step"]),
         *(fmt_spread(st[f"{k}_ms"]) for k in STAGES)]
        for name, st in data.stats.items()
    ]  # fmt: skip
    return Table(
        ["Config", "n", "Trainable params", "Step (ms)", "Forward (ms)", "Backward (ms)",
         "Optimizer (ms)"],
        rows,
        f"What a step costs, same model, data, seed and steps; {SPREAD_NOTE}. Step: the "
        "median steady-state step; stages: mean ms per step of each run (warm-up steps "
        "left out).",
        "tab:finetune-time", "lrrrrrr",
    )  # fmt: skip


def _memory_table(data: FinetuneData) -> Table:
    t = data.equal_time_s
    rows = [
        [name, *(fmt_spread(st[k], fmt_bytes) for k in ("gradients", "optimizer_states",
                                                         "activations")),
         fmt_spread(st["train"]), fmt_spread(st["dev"], _acc),
         fmt_spread(st.get("dev_at_t", NONE), _acc)]
        for name, st in data.stats.items()
    ]  # fmt: skip
    at = f"{t:.3g} s" if t else "T"
    return Table(
        ["Config", "Gradients", "Optimizer states", "Activations", "Train time (s)",
         "Dev acc", f"Dev acc at {at}"],
        rows,
        "What each keeps on one step (tensor bytes, counted) and how well it learned. Dev "
        "acc: after the last epoch, the same steps for every configuration; dev acc at "
        f"{at}: the last evaluation each had made within {at} of training (the shortest "
        "configuration's median training time; evaluation time excluded).",
        "tab:finetune-memory", "lrrrrrr",
    )  # fmt: skip


def _counted(name: str, a: Spread, ref: Spread, what: str, fmt: Any) -> str:
    """:func:`count_text`, but a count under a tenth of full's is said as "N x fewer"
    (LoRA's trainable parameters are hundreds of times fewer: "0.00x" says nothing)."""
    if a.median and ref.median and a.median < 0.1 * ref.median and a.low == a.high:
        return (f"{name} vs full: {what} {ref.median / a.median:.0f}x fewer "
                f"({fmt(a.median)} vs {fmt(ref.median)}, counted, exact)")  # fmt: skip
    return count_text(name, a, "full", ref, what, fmt=fmt)


def _findings(data: FinetuneData) -> list[str]:
    """Each LoRA configuration against full fine-tuning: counts exact, times and
    accuracies by the noise rule."""
    ref = data.stats.get("full")
    out = []
    for name, st in data.stats.items():
        if name == "full" or ref is None:
            continue
        parts = [
            _counted(name, st["trainable"], ref["trainable"], "trainable parameters", fmt_int),
            _counted(name, st["optimizer_states"], ref["optimizer_states"], "optimizer states",
                     fmt_bytes),
            _counted(name, st["activations"], ref["activations"], "activations", fmt_bytes),
            compare_text(name, st["step"], "full", ref["step"], "time per step", unit=" ms"),
            compare_text(name, st["backward_ms"], "full", ref["backward_ms"], "backward",
                         unit=" ms"),
            compare_text(name, st["optimizer_ms"], "full", ref["optimizer_ms"],
                         "optimizer step", unit=" ms"),
            quality_text(st["dev"], ref["dev"], SAME_STEPS),
            quality_text(st.get("dev_at_t", NONE),
                         ref.get("dev_at_t", NONE), SAME_TIME),
        ]  # fmt: skip
        prefix = f"{name} vs full: "
        out.append(prefix + "; ".join(p.removeprefix(prefix) for p in parts if p) + ".")
    return out


__all__ = ["dev_accuracy_by", "finetune_data", "finetune_sections"]
