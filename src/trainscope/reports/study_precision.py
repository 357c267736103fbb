"""Sections of the precision study's report: loss curves, the task's quality figures
(accuracy, MSE and R^2, or val loss and perplexity), time, memory."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainscope.analysis.memory import MEMORY_NOTE, cuda_peak, memory_of
from trainscope.analysis.stats import (
    QUALITY,
    SPREAD_NOTE,
    Quality,
    compare_text,
    count_text,
    fmt_spread,
    main_quality,
    mean_curve,
    quality_note,
    quality_text,
    rate,
    step_losses,
    task_of,
)
from trainscope.records.run_dir import RunRecord
from trainscope.records.study_dir import StudyRecord
from trainscope.records.view import SummaryView
from trainscope.render.document import Document, escape_inline
from trainscope.render.study_plots import loss_curves_plot
from trainscope.render.table import Table, fmt_bytes, fmt_float, fmt_rate
from trainscope.reports.section import ConfigRows, Section, each_config, not_applicable_list
from trainscope.reports.study_bars import Bars, BarTexts, bar_figure
from trainscope.reports.study_system import system_figure
from trainscope.util.spread import Spread, differ, spread

# What the bar figures say (the bars themselves are in PrecisionRows).
_TIME_BARS = BarTexts(
    ylabel="training time (s)",
    title="Training time by precision (median, spread)",
    caption="Training time by precision (median and spread)",
)
_MEMORY_BARS = BarTexts(
    ylabel="activations saved for backward (MiB)",
    title="Saved activations by precision",
    caption="Activations saved for backward, by precision",
)


@dataclass
class PrecisionRows(ConfigRows):
    """Per precision: its row, its bars (a gap without a measured run), loss curve and
    statistics."""

    quality: tuple[Quality, ...]
    """The table's quality columns: accuracy, MSE and R^2, or val loss and perplexity."""
    main: Quality
    """The quality figure the findings compare."""
    time: Bars = field(default_factory=Bars)
    """Training time (s)."""
    mem: Bars = field(default_factory=Bars)
    """Saved activations (MiB)."""
    curves: dict[str, tuple[list[int], list[float]]] = field(default_factory=dict)
    stats: dict[str, dict[str, Spread]] = field(default_factory=dict)
    outliers: list[str] = field(default_factory=list)

    @property
    def memory_counted(self) -> bool:
        """Whether any precision's runs counted their tensors' memory."""
        return any(m is not None for m in self.mem.values)


def precision_rows(study: StudyRecord) -> PrecisionRows:
    """Every precision's table row, statistics, bars and loss curve (no rendering)."""
    configs = each_config(study, "precision")
    task = task_of(r.summary for c in configs for r in c.runs)
    data = PrecisionRows(QUALITY[task], main_quality(task))
    for c in configs:
        data.labels.append(c.name)
        if c.runs:
            _add_measured(data, c.name, c.runs)
            continue
        # The reason is listed below the table: it is too long for a cell.
        data.rows.append([c.name, c.missing] + ["–"] * 10)
        data.time.add(None)
        data.mem.add(None)
    return data


def _precision_stats(summ: list[dict[str, Any]], quality: tuple[Quality, ...]) -> dict[str, Spread]:
    """The spreads over one precision's repeats that its row and findings show."""
    views = [SummaryView(s) for s in summ]
    last = [(v.epochs or [{}])[-1] for v in views]
    return {
        **{q.header: spread(q.get(s) for s in summ) for q in quality},
        "loss": spread(e.get("train_loss") for e in last),
        "train": spread(v.train_time_s for v in views),
        "rate": spread(rate(s) for s in summ),
        "peak": spread(v.peak_memory_bytes for v in views),
        # Counted tensor bytes of each run: comparable even in one shared process.
        "mem": spread(memory_of(s).get("activations_bytes") for s in summ),
        "states": spread(memory_of(s).get("model_states_bytes") for s in summ),
    }


def _add_measured(data: PrecisionRows, name: str, recs: list[RunRecord]) -> None:
    """Add a precision that has measured runs: its row, statistics, bars and mean curve."""
    summ = [r.summary for r in recs]
    st = _precision_stats(summ, data.quality)
    data.stats[name] = st
    skipped = max(r.view.count("skipped_steps") or 0 for r in recs)
    for key in ("train", "rate"):
        data.outliers += [f"{name} repeat {recs[i].path.name}: {key}" for i in st[key].outliers]
    data.rows.append(
        [
            name,
            "ran",
            str(st["train"].n),
            fmt_spread(st["loss"], fmt_float),
            *(fmt_spread(st[q.header], q.fmt) for q in data.quality),
            fmt_spread(st["train"]),
            fmt_spread(st["rate"], fmt_rate),
            fmt_spread(st["mem"], fmt_bytes),
            fmt_spread(st["states"], fmt_bytes),
            fmt_spread(st["peak"], fmt_bytes) if cuda_peak(summ) else "–",
            str(skipped),
        ]
    )
    data.time.add(st["train"])
    data.mem.add(st["mem"].scaled(1 / 2**20))
    data.curves[name] = mean_curve([step_losses(r) for r in recs])


# IEEE 754 and the vendors' definitions: (format, bytes, sign/exponent/mantissa bits,
# largest finite value, what it is used for). Facts of the formats, not measurements.
FORMATS = (
    ("fp32", "4", "1 / 8 / 23", "3.4e38", "weights, gradients, optimizer states"),
    ("tf32", "4 (stored as fp32)", "1 / 8 / 10", "3.4e38",
     "inside Ampere+ GPU matmuls only; tensors stay fp32"),
    ("fp16", "2", "1 / 5 / 10", "65504", "autocast on GPUs, with loss scaling"),
    ("bf16", "2", "1 / 8 / 7", "3.4e38", "autocast on GPUs and recent CPUs, no scaling"),
    ("int8", "1", "integer, with a scale", "127", "post-training quantized weights"),
)  # fmt: skip


def formats_table() -> Table:
    """Bytes per element of each number format (the facts the measured rows rest on)."""
    return Table(
        ["Format", "Bytes per element", "Sign / exponent / mantissa bits", "Largest value",
         "Where it is used"],
        [list(r) for r in FORMATS],
        "Bytes per element of each format: fp16 and bf16 halve what a tensor takes; the "
        "exponent bits set the range (fp16 overflows past 65504, hence GradScaler), the "
        "mantissa bits the precision.",
        "tab:precision-formats", "lllll",
    )  # fmt: skip


def precision_sections(study: StudyRecord, doc: Document, plots: Path) -> Section:
    """The formats' bytes, then one row per precision (not-applicable ones say why), loss
    curves, time and memory."""
    section = Section()
    doc.heading("Precision comparison", 2)
    section.add_table(doc, "formats", formats_table())
    data = precision_rows(study)
    section.add_table(doc, "precision", _precision_table(data))
    if data.outliers:
        doc.note("Outlier repeats (> 3 scaled MADs from the median; kept in the figures):")
        doc.bullets([escape_inline(o) for o in data.outliers])
    _precision_figures(study, data, doc, plots)
    for text in _findings(data) + _why_slower(study, data):
        section.findings.append(text)
        doc.paragraph(escape_inline(text))  # names are labels from study.json: text
    not_applicable_list(study, doc, "device")
    return section


def _precision_table(data: PrecisionRows) -> Table:
    """The table of every precision, its caption saying what each column is."""
    return Table(
        [
            "Precision",
            "Status",
            "n",
            "Final train loss",
            *(q.header for q in data.quality),
            "Train time (s)",
            "Samples/s",
            "Activations",
            "Model states",
            "CUDA peak",
            "Skipped steps",
        ],
        data.rows,
        f"Same workload, seed and data order under each precision; {SPREAD_NOTE}. Train "
        "time: the training epochs alone (no setup, no evaluation); samples/s: a repeat's "
        f"samples over its train time. {MEMORY_NOTE} Skipped steps: fp16 "
        "steps GradScaler skipped after an overflow (max over repeats)."
        + quality_note(data.quality),
        "tab:precision",
        "llrrrrrrrrrr",
    )


def _precision_figures(study: StudyRecord, data: PrecisionRows, doc: Document, plots: Path) -> None:
    """Loss curves, training time and (where counted) saved activations by precision."""
    files = loss_curves_plot(
        data.curves,
        plots / "precision_loss.png",
        title="Training loss by precision (mean of repeats)",
    )
    if files:
        doc.figure(files[0], "Training-loss curves of every precision on one plot", None)
    bar_figure(doc, data.labels, data.time, plots / "precision_time.png", _TIME_BARS)
    system_figure(study, doc, plots / "precision_system.png", "precision")
    if not data.memory_counted:
        doc.note(
            "These runs counted no memory (records from before the memory meter); the "
            "process's peak RSS they have cannot tell precisions apart in a shared process."
        )
        return
    bar_figure(doc, data.labels, data.mem, plots / "precision_memory.png", _MEMORY_BARS)


def _why_slower(study: StudyRecord, data: PrecisionRows) -> list[str]:
    """Why a 16-bit precision trained slower than fp32 on a CPU, where the record says the
    CPU has no native unit for it (env.json's ``cpu_low_precision_units``)."""
    env = next((r.env for r in study.records.values() if r.env), {})
    units = env.get("cpu_low_precision_units")
    ref = data.stats.get("fp32")
    if (
        not isinstance(units, dict)
        or ref is None
        or not str(env.get("device", "")).startswith("cpu")
    ):
        return []
    out = []
    for name in ("bf16", "fp16"):
        st = data.stats.get(name)
        slower = st is not None and differ(st["train"], ref["train"])
        if slower and st["train"].median > ref["train"].median and units.get(name) is False:
            flags = f"avx512_{name}, amx_{name}"  # runtime.device.LOW_PRECISION_UNITS
            out.append(
                f"Why {name} is slower here: this CPU has no native {name} unit (none of "
                f"{flags} among its flags), so autocast converts tensors to {name} and back "
                "around each operation and the arithmetic itself runs no faster than fp32."
            )
    return out


def _findings(data: PrecisionRows) -> list[str]:
    """Each precision against fp32 (none without an fp32 row): throughput, training time,
    the main quality figure and, where counted, saved activations."""
    ref = data.stats.get("fp32")
    out = []
    for name, st in data.stats.items():
        if name == "fp32" or ref is None:
            continue
        main = data.main.header
        parts = [compare_text(name, st["rate"], "fp32", ref["rate"], "throughput")]
        parts.append(compare_text(name, st["train"], "fp32", ref["train"], "training time"))
        parts.append(quality_text(st[main], ref[main], data.main))
        if data.memory_counted:
            parts.append(
                count_text(name, st["mem"], "fp32", ref["mem"], "activations", fmt=fmt_bytes)
            )
        prefix = f"{name} vs fp32: "
        out.append(prefix + "; ".join(p.removeprefix(prefix) for p in parts if p) + ".")
    return out
