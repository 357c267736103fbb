"""Sections of the parallelism study's report: every layout at one global batch.

Rows from the runs' records (torch-free): step time with its spread and n, the
pipeline's bubble beside its theory, what each layout communicates, and memory per rank
(the largest rank's counted model states and activations in flight: exact bytes). The
findings compare each layout with ``single`` by the studies' noise rule.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from trainscope.analysis.memory import memory_of
from trainscope.analysis.stats import MISSING, SPREAD_NOTE, compare_text, fmt_spread, step_ms
from trainscope.comm.cost_model import fit_for, fits_from_dict
from trainscope.comm.pipeline import theory_bubble as pipeline_bubble
from trainscope.comm.tensor_parallel import predict_from_summary
from trainscope.records.study_dir import StudyRecord
from trainscope.records.view import SummaryView
from trainscope.render.document import Document, escape_inline
from trainscope.render.table import Table, fmt_bytes
from trainscope.reports.section import Section
from trainscope.util.spread import Spread, spread


def theory_bubble(schedule: str | None, stages: int, microbatches: int | None) -> float | None:
    """The schedule's bubble in theory (comm.pipeline), None where it has none."""
    if not schedule or not microbatches or stages < 2:
        return None
    return pipeline_bubble(schedule, stages, microbatches)


def _ranks(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """Every rank's figures (rank 0's record alone in a one-process run)."""
    return SummaryView(summary).ranks or [summary]


def bubble_of(summary: dict[str, Any]) -> float | None:
    """The run's measured bubble: the mean over its ranks of each rank's pipeline wait over
    its schedule time (each rank's first step left out)."""
    values = [(r.get("comm") or {}).get("measured_bubble") for r in _ranks(summary)]
    values = [v for v in values if isinstance(v, (int, float))]
    return statistics.mean(values) if values else None


def memory_per_rank(summary: dict[str, Any]) -> tuple[int | None, int | None]:
    """(largest model states, largest activations in flight) over the ranks, counted."""
    states, flight = [], []
    for r in _ranks(summary):
        mem = memory_of(r)
        if mem:
            states.append(mem.get("model_states_bytes"))
            flight.append((mem.get("activations") or {}).get("peak_in_flight_bytes"))
    states = [s for s in states if isinstance(s, int)]
    flight = [f for f in flight if isinstance(f, int)]
    return (max(states) if states else None, max(flight) if flight else None)


def comm_text(summary: dict[str, Any]) -> str:
    """What a layout communicates per step, as its record measured it."""
    view = SummaryView(summary)
    comm, steps = view.comm, view.steps or 0
    collectives = (comm.get("collectives") or {}).get("ops") or {}
    parts = [
        f"{op} x{int(v['calls'])} ({fmt_bytes(int(v['bytes']))}, {1e3 * v['seconds']:.2f} ms)"
        for op, v in sorted(collectives.items())
    ]
    if isinstance(comm.get("hook_inflight_s"), (int, float)) and steps:
        parts.append(f"all-reduce in flight {1e3 * comm['hook_inflight_s'] / steps:.2f} ms/step")
    stages = view.section("stages_s")
    if isinstance(stages.get("pipeline_wait"), (int, float)) and steps:
        parts.append(f"pipeline wait {1e3 * stages['pipeline_wait'] / steps:.2f} ms/step")
    p2p, own, n = (comm.get(k) for k in ("pipeline_p2p_wait_s", "pipeline_schedule_s",
                                         "pipeline_steps"))  # fmt: skip
    if all(isinstance(v, (int, float)) for v in (p2p, own, n)) and n:
        parts.append(f"of it on rank 0 blocked on sends/receives {1e3 * p2p / n:.2f} ms/step, "
                     f"the schedule's own {1e3 * own / n:.2f} ms/step")  # fmt: skip
    if isinstance(stages.get("comm"), (int, float)) and steps:
        parts.append(f"comm stage {1e3 * stages['comm'] / steps:.2f} ms/step")
    return "; ".join(parts) or "none"


def _row(
    name: str, labels: dict[str, Any], summaries: list[dict[str, Any]]
) -> tuple[list[Any], Spread]:
    step = spread(step_ms(s) for s in summaries)
    bubble = spread(bubble_of(s) for s in summaries)
    procs = int(labels.get("processes") or 1)
    stages = procs // int(labels.get("dp_size") or 1)
    schedule = labels.get("schedule")
    if schedule is None and labels.get("strategy") == "pipeline":
        schedule = "1f1b"  # the pipeline's default
    theory = theory_bubble(schedule, stages, labels.get("microbatches"))
    states, flight = memory_per_rank(summaries[0])
    return [
        name,
        str(procs),
        str(step.n),
        fmt_spread(step),
        fmt_spread(bubble, lambda v: f"{v:.3f}") if bubble.median is not None else MISSING,
        f"{theory:.3f}" if theory is not None else MISSING,
        fmt_bytes(states) if states is not None else MISSING,
        fmt_bytes(flight) if flight is not None else MISSING,
        escape_inline(comm_text(summaries[0])),
    ], step


def _probed_ops(summary: dict[str, Any]) -> dict[str, Any]:
    """The comm probe's collectives of one run, by op ("all_gather_into_tensor" read as
    all_gather, "reduce_scatter_tensor" as reduce_scatter: the fits' names)."""
    ops = (SummaryView(summary).comm.get("collectives") or {}).get("ops") or {}
    out: dict[str, Any] = {}
    for name, entry in ops.items():
        key = name.removesuffix("_into_tensor").removesuffix("_tensor").removeprefix("_")
        if key in ("all_reduce", "all_gather", "reduce_scatter") and isinstance(entry, dict):
            out[key] = entry
    return out


def _tp_table(study: StudyRecord, doc: Document, section: Section) -> None:
    """Tensor parallelism's collectives, op by op: the split's count and bytes, and with
    a cost model their time, beside what the probed step measured."""
    model = study.plan.options.get("cost_model") or {}
    fits = fits_from_dict(model.get("fits"))
    by_op = {op: fit_for(fits, op) for op in ("all_reduce", "all_gather", "reduce_scatter")}
    rows = []
    for cfg in study.configs():
        recs = study.measured(cfg.config)
        pred = predict_from_summary(recs[0].summary, by_op) if recs else None
        if pred is None:
            continue
        measured = _probed_ops(recs[0].summary)
        for op, (calls, nbytes) in pred.by_op().items():
            times = [c.seconds for c in pred.ops if c.op == op]
            predicted = None if None in times else sum(t for t in times if t is not None)
            got = measured.get(op) or {}
            took = spread(_probed_ops(r.summary).get(op, {}).get("seconds") for r in recs)
            rows.append([
                escape_inline(str(cfg.labels.get("layout", cfg.config))), op,
                f"{calls} / {got.get('calls', MISSING)}",
                f"{fmt_bytes(nbytes)} / {fmt_bytes(got['bytes']) if 'bytes' in got else MISSING}",
                MISSING if predicted is None else f"{1e3 * predicted:.3g}",
                fmt_spread(took, lambda v: f"{1e3 * v:.3g}") if took.median is not None
                else MISSING,
            ])  # fmt: skip
    if not rows:
        return
    where = escape_inline(str(model.get("source"))) if model else None
    table = Table(
        ["Layout", "Collective", "Calls: predicted / measured", "Bytes: predicted / measured",
         "Predicted (ms)", "Measured (ms)"],
        rows,
        "Tensor parallelism's collectives per step, from the split: 4 all-reduces per "
        "block of batch x context x width fp32 activations; under sequence parallelism "
        "4 all-gathers, 2 reduce-scatters and 2 all-reduces per block, 2 all-gathers "
        "around the blocks and one all-reduce per norm parameter. Beside them, the probed "
        "step's (each waited for at once); bytes are each call's input, summed (an "
        "all-gather's is one share). Predicted time: "
        + (f"the α–β fit of each collective ({where})." if where else "give --cost-model DIR.")
        + " Measured: host seconds in that collective in one step per run (median over runs).",
        "tab:parallelism-tp",
        "llrrrr",
    )  # fmt: skip
    section.tables["tp_comm"] = table
    doc.table(table)


def parallelism_sections(study: StudyRecord, doc: Document, plots: Path) -> Section:
    """The layouts' table, and each against ``single``."""
    section = Section()
    doc.heading("Replicate or split the model", 2)
    rows: list[list[Any]] = []
    steps: dict[str, Spread] = {}
    over: list[str] = []  # layouts with more processes than the core budget
    for cfg in study.configs():
        recs = study.measured(cfg.config)
        name = str(cfg.labels.get("layout", cfg.config))
        if cfg.labels.get("budget_kept") is False:
            over.append(name)
        if not recs:
            procs = str(cfg.labels.get("processes", MISSING))
            rows.append([name, procs, "0", *[MISSING] * 5, "no completed run"])
            continue
        row, steps[name] = _row(name, dict(cfg.labels), [r.summary for r in recs])
        rows.append(row)
    table = Table(
        ["Layout", "Processes", "n", "Step (ms)", "Bubble", "Theory", "States / rank",
         "In flight / rank", "Communication (one run)"],
        rows,
        f"Same workload, seed and global batch in every layout; {SPREAD_NOTE}. Step: "
        "steady-state step time. Bubble: a pipeline rank's wait over its schedule time, "
        "mean over ranks; theory (S-1)/(M+S-1), interleaved (S-1)/(2M+S-1). States and in "
        "flight: the largest rank's model states and most activation bytes held at once "
        "(counted, exact). Communication: collectives the dispatcher saw on one step "
        "(calls, bytes, host time), DDP's all-reduce in flight, the pipeline's wait.",
        "tab:parallelism",
        "lrrrrrrrl",
    )  # fmt: skip
    section.tables["parallelism"] = table
    doc.table(table)
    _tp_table(study, doc, section)
    base = steps.get("single")
    for name, st in steps.items():
        if name == "single" or base is None:
            continue
        if name in over:
            text = (f"{name}: {st.n and fmt_spread(st)} ms per step on more processes than "
                    "the core budget (oversubscribed): shown, not compared.")  # fmt: skip
        else:
            text = compare_text(name, st, "single", base, "step time", unit=" ms") + "."
        section.findings.append(text)
        doc.paragraph(escape_inline(text))
    return section


__all__ = ["bubble_of", "comm_text", "memory_per_rank", "parallelism_sections", "theory_bubble"]
