"""Sections of the strategies study's report: the task's main quality figure (test
accuracy, test MSE or val perplexity), time per iteration, communication per iteration and
peak memory per rank for every strategy, as a table and bar plots."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainscope import registry
from trainscope.analysis.bounds import beyond, cores_bound, invalid_text, recorded_cores
from trainscope.analysis.cpu import budget_kept, threads_per_process
from trainscope.analysis.memory import cuda_peak, memory_of
from trainscope.analysis.stats import (
    SPREAD_NOTE,
    TRAIN_STAGES,
    Quality,
    fmt_spread,
    main_quality,
    quality_note,
    rate,
    task_of,
)
from trainscope.records.run_dir import STAGE_LABELS, RunRecord
from trainscope.records.study_dir import StudyRecord
from trainscope.records.view import SummaryView
from trainscope.render.document import Document, escape_inline
from trainscope.render.plots import new_figure, plain_text_figure, stage_color
from trainscope.render.study_plots import write_figure
from trainscope.render.table import Table, fmt_bytes, fmt_rate, fmt_sig
from trainscope.reports.section import (
    ConfigRows,
    ConfigRuns,
    Section,
    each_config,
    not_applicable_list,
)
from trainscope.reports.study_bars import Bars, BarTexts, bar_figure
from trainscope.reports.study_comm_model import comm_model_section
from trainscope.util.numfmt import cores_text
from trainscope.util.spread import Spread, differ, no_difference_text, spread
from trainscope.util.textsafe import plot_text

_ITER_BARS = BarTexts(
    ylabel="ms per iteration",
    title="Time per iteration by strategy",
    caption="Time per iteration by strategy (median and spread)",
)


def _per_iter_ms(summary: dict[str, Any], stage: str | None = None) -> float | None:
    view = SummaryView(summary)
    steps = view.steps
    if steps is None or not steps > 0:
        return None  # absent, or a damaged record's text
    secs = view.train_time_s if stage is None else view.stages_s.get(stage)
    return 1e3 * secs / steps if secs is not None else None


def _peak_per_rank(summary: dict[str, Any]) -> float | None:
    view = SummaryView(summary)
    return view.count("peak_memory_bytes_max_rank") or view.peak_memory_bytes


def _counted_per_rank(summary: dict[str, Any], key: str) -> int | None:
    """The largest rank's counted bytes of one memory component (``key`` of the memory
    section): FSDP's shards make model states per rank shrink with the world size."""
    every = [memory_of(r).get(key) for r in SummaryView(summary).ranks]
    every = [v for v in every if isinstance(v, int)]
    return max(every) if every else memory_of(summary).get(key)


def _stage_ms(recs: list[RunRecord]) -> dict[str, float]:
    """Median milliseconds per iteration of each training stage (rank 0), over repeats."""
    out: dict[str, float] = {}
    for stage in TRAIN_STAGES:
        m = spread(_per_iter_ms(r.summary, stage) for r in recs).median
        if m:
            out[stage] = m
    return out


@plain_text_figure
def _stacked_stage_plot(per: dict[str, dict[str, float]], png: Path) -> list[Path]:
    """One bar per strategy, split into the step's stages (ms per iteration)."""

    if not per:
        return []
    labels = list(per)
    fig = new_figure(max(5.5, 0.9 * len(labels) + 3.0), 4.5)
    ax = fig.add_subplot()
    bottoms = [0.0] * len(labels)
    for stage in TRAIN_STAGES:
        values = [per[lab].get(stage, 0.0) for lab in labels]
        if not any(values):
            continue
        ax.bar(
            range(len(labels)),
            values,
            bottom=bottoms,
            width=0.65,
            color=stage_color(stage),
            label=plot_text(STAGE_LABELS.get(stage, stage)),
        )
        bottoms = [b + v for b, v in zip(bottoms, values)]
    ax.set_xticks(range(len(labels)), [plot_text(lab) for lab in labels], rotation=25, ha="right")
    ax.set_ylabel("ms per iteration (rank 0)")
    ax.grid(True, axis="y", alpha=0.3)
    if any(bottoms):  # stages were drawn: name them
        ax.legend(fontsize=8, loc="upper left", frameon=False)
    fig.suptitle("Where an iteration's time goes, by strategy", fontsize=11)
    return write_figure(fig, png)


@dataclass
class StrategyRows(ConfigRows):
    """Per strategy: its row, its time per iteration (a gap without a measured run) and
    the split of an iteration into stages."""

    quality: Quality
    """The one quality column: test accuracy, test MSE or val perplexity."""
    on_cuda: bool
    """Whether the table has a CUDA peak column (CUDA's allocator peak is per run; RSS is
    not shown)."""
    iters: Bars = field(default_factory=Bars)
    """Time per iteration (ms)."""
    per_stage: dict[str, dict[str, float]] = field(default_factory=dict)
    spreads: dict[str, Spread] = field(default_factory=dict)
    """Time per iteration of the strategies the findings may compare."""
    processes: dict[str, int] = field(default_factory=dict)
    """Processes of each strategy (the bound on what it can gain over one)."""
    cores: float | None = None
    """The fewest cores a run recorded it could use (None: not recorded)."""
    notes: list[str] = field(default_factory=list)


def strategies_rows(study: StudyRecord) -> StrategyRows:
    """Every strategy's table row, time per iteration and stage split (no rendering)."""
    configs = each_config(study, "strategy")
    measured = [r.summary for c in configs for r in c.runs]
    data = StrategyRows(main_quality(task_of(measured)), cuda_peak(measured))
    data.cores = recorded_cores(measured)
    for c in configs:
        data.labels.append(c.name)
        if not c.runs:
            procs = str(c.planned.labels.get("processes", 1))
            data.rows.append([c.name, procs, "–", "–", c.missing] + ["–"] * (6 + data.on_cuda))
            data.iters.add(None)
            continue
        per_iter = _add_row(data, c)
        data.iters.add(per_iter)
        if per_iter.median and budget_kept(c.planned.labels):  # findings: like with like
            data.spreads[c.name] = per_iter
            data.processes[c.name] = int(c.planned.labels.get("processes") or 1)
        data.per_stage[c.name] = _stage_ms(c.runs)
    return data


def _comm_cell(name: str, summ: list[dict[str, Any]]) -> str:
    """The comm stage per iteration, or where the strategy communicates without one."""
    comm_sp = spread(_per_iter_ms(s, "comm") for s in summ)
    if comm_sp.median is not None:
        return fmt_spread(comm_sp)
    variant = registry.study_variants().get(name, (None, None))[1]
    # Where its communication is when it has no stage of its own (registry text).
    comm = (variant.comm_place if variant else None) or "in backward"
    h_m = spread(SummaryView(s).comm.get("hook_inflight_s") for s in summ).median
    steps = SummaryView(summ[0]).steps
    if h_m and steps:
        comm += f" ({fmt_sig(1e3 * h_m / steps)} in flight)"
    return comm


def _add_row(data: StrategyRows, c: ConfigRuns) -> Spread:
    """Add the row of a strategy that has measured runs (and its note); its time per
    iteration, for the figures and findings."""
    name, labels, recs = c.name, c.planned.labels, c.runs
    summ = [r.summary for r in recs]
    per_iter = spread(_per_iter_ms(s) for s in summ)
    note = recs[0].view.section("parallel").get("note")
    if note:
        data.notes.append(f"{name}: {note}")
    data.rows.append(
        [
            name,
            str(labels.get("processes", 1)),
            str(threads_per_process(labels, recs)),
            str(per_iter.n),
            fmt_spread(spread(data.quality.get(s) for s in summ), data.quality.fmt),
            fmt_spread(spread(r.view.wall_time_s for r in recs)),
            fmt_spread(per_iter),
            _comm_cell(name, summ),
            fmt_spread(spread(rate(s) for s in summ), fmt_rate),
            fmt_spread(spread(_counted_per_rank(s, "model_states_bytes") for s in summ), fmt_bytes),
            fmt_spread(spread(_counted_per_rank(s, "activations_bytes") for s in summ), fmt_bytes),
        ]
        + ([fmt_spread(spread(_peak_per_rank(s) for s in summ), fmt_bytes)] if data.on_cuda else [])
    )
    return per_iter


def _strategies_table(data: StrategyRows) -> Table:
    """The table of every strategy, its caption saying what each column is."""
    on_cuda = data.on_cuda
    return Table(
        [
            "Strategy",
            "Procs",
            "Threads",
            "n",
            data.quality.header,
            "Wall (s)",
            "Time/iter (ms)",
            "Comm/iter (ms)",
            "Samples/s",
            "States/rank",
            "Activations/rank",
        ]
        + (["CUDA peak/rank"] if on_cuda else []),
        data.rows,
        f"Same workload, seed and global batch under each strategy; {SPREAD_NOTE}. "
        "Time/iter: training time over optimizer steps. Comm/iter: the gradient-sync stage "
        "of the hand-written strategies, timed exactly; DDP and FSDP communicate inside "
        "backward (and FSDP forward), where it is part of those stages. Threads: torch "
        "intra-op threads per process, the study's core budget shared out among the "
        "processes (* where they do not divide it: compared in no finding). "
        "States/rank (parameters, gradients, optimizer states) and activations: tensor "
        "bytes counted on one step, the largest rank's"
        + ("; CUDA peak: max_memory_allocated of the largest rank." if on_cuda else ".")
        + quality_note([data.quality]),
        "tab:strategies",
        "lrrrrrrrrrr" + "r" * on_cuda,
    )


def strategies_sections(study: StudyRecord, doc: Document, plots: Path) -> Section:
    """The comparison table, two bar plots and the ratios that answer "why is X faster"."""
    section = Section()
    doc.heading("Strategy comparison", 2)
    data = strategies_rows(study)
    section.add_table(doc, "strategies", _strategies_table(data))
    bar_figure(doc, data.labels, data.iters, plots / "strategies_time_per_iter.png", _ITER_BARS)
    files = _stacked_stage_plot(data.per_stage, plots / "strategies_stages.png")
    if files:
        doc.figure(files[0], "Each strategy's iteration split into its stages (rank 0)", None)
    for text in _ratios(data.spreads, data.processes, data.cores):
        section.findings.append(text)
        doc.paragraph(text)
    if data.notes:
        doc.bullets([escape_inline(n) for n in data.notes])
    comm_model_section(study, doc, section)
    not_applicable_list(study, doc, "machine")
    return section


def _ratios(
    spreads: dict[str, Spread], processes: dict[str, int] | None = None, cores: float | None = None
) -> list[str]:
    """Time-per-iteration ratios of the pairs people ask about, where both ran: a ratio
    only where the two spreads do not overlap, else "no measurable difference"; a
    several-process strategy faster than one process by more than its processes (or the
    cores) can give is an invalid measurement (analysis.bounds)."""
    processes = processes or {}
    pairs = [
        ("gather-scatter", "allreduce", "hand-written sync through rank 0 vs all-reduce"),
        ("allreduce", "ddp", "per-tensor all-reduce after backward vs DDP's buckets"),
        ("allreduce", "allreduce-bucketed", "per-tensor vs bucketed all-reduce: bucketing alone"),
        ("allreduce-bucketed", "ddp", "bucketed all-reduce after backward vs DDP: overlap"),
        ("ddp-1proc", "single", "the DDP wrapper alone (one process)"),
        ("dp", "single", "DataParallel vs no wrapper"),
        ("ddp", "single", "DDP with several processes vs one process"),
        ("fsdp", "ddp", "FSDP sharding vs DDP replication"),
    ]
    out = []
    for a, b, what in pairs:
        if a not in spreads or b not in spreads:
            continue
        sa, sb = spreads[a], spreads[b]
        figures = f"{fmt_sig(sa.median)} vs {fmt_sig(sb.median)} ms, n={sa.n} and {sb.n}"
        procs = processes.get(a, 1)
        floor = beyond(sb, sa, cores_bound(procs, cores)) if b == "single" and procs > 1 else None
        if floor is not None:
            why = f"{procs} processes" + (f" on {cores_text(cores)}" if cores else "") + " can give"
            bad = invalid_text(
                f"{a}'s speed over one process", floor, cores_bound(procs, cores), why
            )
            out.append(f"{a} / {b} time per iteration: {bad} ({what}; {figures}).")
        elif differ(sa, sb):
            ratio = sa.median / sb.median  # type: ignore[operator]
            out.append(f"{a} / {b} time per iteration: {ratio:.2f}x ({what}; {figures}).")
        else:
            out.append(
                f"{a} / {b} time per iteration: {no_difference_text(sa, sb)} ({what}; {figures})."
            )
    return out
