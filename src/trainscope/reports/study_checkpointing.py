"""Sections of the checkpointing study's report: memory kept vs time paid, per policy."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trainscope.analysis.memory import cuda_peak, memory_of
from trainscope.analysis.stats import (
    SPREAD_NOTE,
    compare_text,
    count_text,
    fmt_sig,
    fmt_spread,
    step_ms,
)
from trainscope.records.study_dir import StudyRecord
from trainscope.render.document import Document, escape_inline
from trainscope.render.plots import new_figure, plain_text_figure
from trainscope.render.study_plots import write_figure
from trainscope.render.table import Table, fmt_bytes
from trainscope.reports.section import Section
from trainscope.util.spread import Spread, spread
from trainscope.util.textsafe import plot_text


def _loss_gap(a: list[Any], b: list[Any]) -> float | None:
    """Largest difference between two runs' first losses (None if either has none)."""
    pairs = [(x, y) for x, y in zip(a, b) if isinstance(x, float) and isinstance(y, float)]
    return max(abs(x - y) for x, y in pairs) if pairs else None


@plain_text_figure
def frontier_plot(points: dict[str, tuple[Spread, Spread]], png: Path) -> list[Path]:
    """Saved activations (MiB) against step time (ms), one point per policy, with the
    step time's spread as a horizontal error bar: the memory/time frontier."""
    ok = {k: v for k, v in points.items() if v[0].median is not None and v[1].median is not None}
    if not ok:
        return []
    fig = new_figure(6.0, 4.2)
    ax = fig.add_subplot()
    for name, (time_sp, mem_sp) in ok.items():
        x, y = time_sp.median, mem_sp.median / 2**20  # type: ignore[operator]
        err = [[x - time_sp.low], [time_sp.high - x]]  # type: ignore[operator]
        ax.errorbar([x], [y], xerr=err, fmt="o", capsize=4)
        ax.annotate(plot_text(name), (x, y), textcoords="offset points", xytext=(6, 6))
    ax.set_xlabel("steady-state step time (ms; median, spread over repeats)")
    ax.set_ylabel("activations saved for backward (MiB)")
    top = max(v[1].median for v in ok.values()) / 2**20  # type: ignore[operator]
    ax.set_ylim(0, 1.15 * top if top > 0 else 1.0)  # room for the top point's label
    ax.margins(x=0.15)
    ax.grid(True, alpha=0.3)
    fig.suptitle("Activation checkpointing: memory kept vs time per step", fontsize=11)
    return write_figure(fig, png)


def checkpointing_sections(study: StudyRecord, doc: Document, plots: Path) -> Section:
    """The per-policy table, the frontier plot, and each policy against ``none``."""
    section = Section()
    doc.heading("Activation checkpointing", 2)
    measured = [r.summary for c in study.configs() for r in study.measured(c.config)]
    on_cuda = cuda_peak(measured)
    rows: list[list[object]] = []
    stats: dict[str, dict[str, Spread]] = {}
    first: dict[str, list[Any]] = {}
    for cfg in study.configs():
        name = str(cfg.labels.get("checkpointing", cfg.config))
        recs = study.measured(cfg.config)
        if not recs:
            rows.append([name, "–", "no completed run"] + ["–"] * (4 + on_cuda))
            continue
        summ = [r.summary for r in recs]
        st = {
            "act": spread(memory_of(s).get("activations_bytes") for s in summ),
            "states": spread(memory_of(s).get("model_states_bytes") for s in summ),
            "step": spread(step_ms(s) for s in summ),
            "peak": spread(r.view.peak_memory_bytes for r in recs),
        }
        stats[name] = st
        first[name] = recs[0].view.rows("first_losses")
        blocks = (memory_of(summ[0]).get("checkpointing") or {}).get("blocks")
        rows.append(
            [
                name,
                "–" if blocks is None else str(blocks),
                str(st["step"].n),
                fmt_spread(st["act"], fmt_bytes),
                fmt_spread(st["states"], fmt_bytes),
                fmt_spread(st["step"]),
                "–",  # filled below, once none's time is known
            ]
            + ([fmt_spread(st["peak"], fmt_bytes)] if on_cuda else [])
        )
    base = stats.get("none")
    for row in rows:
        st = stats.get(str(row[0]))
        if st and base and st["step"].median and base["step"].median and row[0] != "none":
            row[6] = f"{100 * (st['step'].median / base['step'].median - 1):+.1f}%"
    table = Table(
        ["Policy", "Blocks", "n", "Activations", "Model states", "Step (ms)", "vs none"]
        + (["CUDA peak"] if on_cuda else []),
        rows,
        f"Same workload, seed and data order under each policy; {SPREAD_NOTE}. Activations: "
        "bytes kept for backward, counted from the tensors on one step (each storage once); "
        "model states: parameters, gradients, optimizer states. Step: steady-state step "
        "time (warm-up steps left out), median over each run's steps, then over repeats. "
        "vs none: the recomputation's cost in step time (medians; see the findings for "
        "whether it is beyond the noise).",
        "tab:checkpointing",
        "lrrrrrr" + "r" * on_cuda,
    )
    section.tables["checkpointing"] = table
    doc.table(table)
    files = frontier_plot(
        {k: (v["step"], v["act"]) for k, v in stats.items()}, plots / "checkpointing_frontier.png"
    )
    if files:
        doc.figure(files[0], "Saved activations against step time, one point per policy", None)
    for name, st in stats.items():
        if name == "none" or base is None:
            continue
        parts = [
            count_text(name, st["act"], "none", base["act"], "activations", fmt=fmt_bytes),
            compare_text(name, st["step"], "none", base["step"], "step time", unit=" ms"),
        ]
        gap = _loss_gap(first.get(name, []), first.get("none", []))
        if gap is not None:
            same = "identical" if gap == 0 else f"within {fmt_sig(gap)}"
            parts.append(f"first losses {same} to none's")
        prefix = f"{name} vs none: "
        text = prefix + "; ".join(p.removeprefix(prefix) for p in parts) + "."
        section.findings.append(text)
        doc.paragraph(escape_inline(text))
    return section


__all__ = ["checkpointing_sections", "frontier_plot"]
