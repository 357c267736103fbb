"""Sections of the scaling study's report: measured speed-up and efficiency per process
count, where the rest of the wall time went, and the α–β projection to many devices."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trainscope.analysis.bounds import beyond, cores_bound, invalid_text, recorded_cores
from trainscope.analysis.stats import MISSING, SPREAD_NOTE, fmt_spread, step_ms
from trainscope.comm.cost_model import given
from trainscope.comm.scaling import DEVICES, project
from trainscope.records.study_dir import StudyRecord
from trainscope.records.view import SummaryView
from trainscope.render.document import Document, escape_inline
from trainscope.render.plots import new_figure
from trainscope.render.study_plots import write_figure
from trainscope.render.table import Table
from trainscope.reports.section import Section
from trainscope.util.load import not_a_finding
from trainscope.util.numfmt import cores_text
from trainscope.util.spread import MIN_N_TO_CLAIM, Spread, differ, spread

FIXED_STAGES = ("setup", "compile", "evaluation", "checkpoint", "other")
"""Stages no number of devices shortens (start-up, evaluation...): Amdahl's serial part."""


def fixed_share(summary: dict[str, Any]) -> float | None:
    """The share of a run's wall time outside its training steps."""
    view = SummaryView(summary)
    wall = view.wall_time_s
    if wall is None or wall <= 0:
        return None
    return sum(v for k, v in view.stages_s.items() if k in FIXED_STAGES) / wall


def grad_bytes(summary: dict[str, Any]) -> int | None:
    """Gradient bytes all-reduced per step (the run's recorded gradient layout)."""
    sizes = SummaryView(summary).section("gradients").get("tensor_bytes")
    ok = isinstance(sizes, list) and all(isinstance(s, int) for s in sizes)
    return sum(sizes) if ok and sizes else None


def _bound_broken(mode: str, n: int, base: Spread, st: Spread, cores: float | None) -> str | None:
    """Why ``n`` processes' step against one process's is an invalid measurement (beyond
    what physics allows at every reading of the spreads), or None."""
    if mode == "weak":  # each process does one process's work: its step is no shorter
        floor = beyond(base, st, 1.0)
        why = "weak scaling allows (a process's step no shorter than one process's)"
        return None if floor is None else invalid_text("the per-process speed", floor, 1.0, why)
    bound = cores_bound(n, cores)
    floor = beyond(base, st, bound)
    why = f"{n} processes on {cores_text(cores)} can give" if cores else f"{n} processes can give"
    return None if floor is None else invalid_text("the speed-up", floor, bound, why)


def _mode_rows(
    study: StudyRecord, mode: str
) -> tuple[list[list[Any]], dict[int, Spread], list, set[int], dict[int, str]]:
    rows: list[list[Any]] = []
    steps: dict[int, Spread] = {}
    summaries: list[dict[str, Any]] = []
    over: set[int] = set()  # process counts that did not fit the core budget
    invalid: dict[int, str] = {}  # process counts whose speed-up breaks a physical bound
    blind: dict[int, str] = {}  # process counts measured only under other load
    for cfg in study.configs():
        if cfg.labels.get("mode") != mode:
            continue
        n = int(cfg.labels.get("processes") or 1)
        if cfg.labels.get("budget_kept") is False:
            over.add(n)
        recs = [r.summary for r in study.measured(cfg.config)]
        summaries += recs
        if not recs and (loaded := study.loaded(cfg.config)):  # load left no evidence
            every = [r.summary for r in loaded]
            blind[n] = not_a_finding(f"all {len(every)} repeat(s) of {cfg.config}", every)
        st = steps[n] = spread(step_ms(s) for s in recs)
        rate = spread(SummaryView(s).samples_per_s for s in recs)
        fixed = spread(fixed_share(s) for s in recs)
        shown = f"{n} (over the core budget)" if n in over else str(n)
        rows.append([shown, str(cfg.labels.get("global_batch")), str(st.n), fmt_spread(st),
                     fmt_spread(rate), "", "",
                     fmt_spread(fixed, lambda v: f"{100 * v:.0f}%")])  # fmt: skip
    base = steps.get(1)
    for row in rows:
        n = int(str(row[0]).split()[0])
        st = steps[n]
        if base is None or not (base.median and st.median):
            row[5] = row[6] = MISSING
            continue
        speed = base.median / st.median * (n if mode == "weak" else 1)
        eff = speed / n
        broken = None if n == 1 else _bound_broken(mode, n, base, st, recorded_cores(summaries))
        if broken:
            invalid[n] = broken
            row[5], row[6] = f"{speed:.2f}x (invalid)", f"{100 * eff:.0f}% (invalid)"
            continue
        noise = "" if n == 1 or differ(base, st) else f" ({_why_no_claim(base, st)})"
        row[5], row[6] = f"{speed:.2f}x{noise}", f"{100 * eff:.0f}%"
    return rows, steps, summaries, over, invalid, blind


def _why_no_claim(a: Spread, b: Spread) -> str:
    return "too few repeats" if min(a.n, b.n) < MIN_N_TO_CLAIM else "spreads overlap"


def _finding(
    mode: str, row: list[Any], one: list[Any], over: bool, invalid: str | None,
    blind: str | None = None,
) -> str:  # fmt: skip
    """One sentence on a process count against one process."""
    n = str(row[0]).split()[0]
    if over:
        return (f"{mode} scaling on {n} processes: more processes than the core budget "
                "(oversubscribed): shown, not compared.")  # fmt: skip
    if blind:  # measured only under other load (this count's or the baseline's)
        return f"{mode} scaling on {n} processes: {blind}."
    if row[3] == MISSING:
        return f"{mode} scaling on {n} processes: no steady-state step measured."
    if invalid:
        return (f"{mode} scaling on {n} processes: {invalid} (step {row[3]} ms against "
                f"{one[3]} ms on one).")  # fmt: skip
    if "too few repeats" in str(row[5]):
        return (f"{mode} scaling on {n} processes: too few repeats to conclude (step "
                f"{row[3]} ms against {one[3]} ms on one; 3 repeats each needed).")  # fmt: skip
    return (f"{mode} scaling on {n} processes: speed-up {row[5]}, efficiency {row[6]} "
            f"(step {row[3]} ms against {one[3]} ms on one).")  # fmt: skip


def _projection(doc: Document, section: Section, study: StudyRecord, mode: str,
                steps: dict[int, Spread], summaries: list[dict[str, Any]]) -> None:  # fmt: skip
    links = study.plan.options.get("links") or {}
    base = steps.get(1)
    nbytes = next((b for s in summaries if (b := grad_bytes(s))), None)
    if not links or base is None or not base.median or not nbytes:
        doc.paragraph("No projection: it needs the one-process run's step time, the "
                      "gradients' bytes and a named interconnect.")  # fmt: skip
        return
    rows = []
    for key, link in links.items():
        fit = given(float(link["alpha_s"]), float(link["bandwidth_GBps"]), 2)["all_reduce"]
        for p in project(base.median / 1e3, nbytes, fit, mode, DEVICES):
            lo, hi = p.efficiency
            rows.append([escape_inline(key), str(p.devices), f"{1e3 * p.compute_s:.3g}",
                         f"{1e3 * p.allreduce_s:.3g}",
                         f"{1e3 * p.step_s_overlap:.3g}–{1e3 * p.step_s_no_overlap:.3g}",
                         f"{100 * lo:.0f}–{100 * hi:.0f}%"])  # fmt: skip
    table = Table(
        ["Link", "Devices", "Compute (ms)", "All-reduce (ms)", "Step (ms)", "Efficiency"],
        rows,
        f"{mode.capitalize()} scaling projected by the α–β model from the one-process step "
        f"({base.median:.3g} ms, taken as compute) and {nbytes} gradient bytes per step: "
        "ring all-reduce, α per message and 1/β per link as the interconnect's figures "
        "(orders of magnitude, not measured here); step and efficiency from full overlap "
        "with compute to none. Compute assumed to divide perfectly.",
        f"tab:scaling-projection-{mode}",
        "lrrrrr",
    )
    section.tables[f"projection_{mode}"] = table
    doc.table(table)


def scaling_sections(study: StudyRecord, doc: Document, plots: Path) -> Section:
    """Per mode: the measured table, its findings, and the projection."""
    section = Section()
    doc.heading("Scaling", 2)
    strategy = escape_inline(str(study.plan.options.get("strategy")))
    drawn: dict[str, tuple[dict[int, Spread], set[int]]] = {}
    for mode in study.plan.options.get("modes") or []:
        doc.heading(f"{mode.capitalize()} scaling ({strategy})", 3)
        rows, steps, summaries, over, invalid, blind = _mode_rows(study, mode)
        ideal = "1/n of one process's" if mode == "strong" else "one process's"
        table = Table(
            ["Processes", "Global batch", "n", "Step (ms)", "Samples/s", "Speed-up",
             "Efficiency", "Fixed share of wall"],
            rows,
            f"{SPREAD_NOTE}; the same core budget in every row (the machine's cores shared "
            f"out over the processes). Ideal step: {ideal}. Speed-up from the medians (its "
            "spread: the step's); fixed share: setup, evaluation and the rest outside the "
            "training steps, which more devices do not shorten.",
            f"tab:scaling-{mode}",
            "rrrrrrrr",
        )  # fmt: skip
        section.tables[mode] = table
        doc.table(table)
        for row in rows[1:]:
            n = int(str(row[0]).split()[0])
            loaded = blind.get(n) or blind.get(1)
            text = _finding(mode, row, rows[0], n in over, invalid.get(n), loaded)
            section.findings.append(text)
            doc.paragraph(escape_inline(text))
        _projection(doc, section, study, mode, steps, summaries)
        drawn[mode] = (steps, over | set(invalid) | set(blind))
    _speedup_figure(drawn, doc, plots)
    return section


def _speedup_figure(
    drawn: dict[str, tuple[dict[int, Spread], set[int]]], doc: Document, plots: Path
) -> None:
    """Measured speed-up against processes, per mode, beside the ideal line. The bars
    span the speed-up at either end of the step's spread; a count whose speed-up is
    invalid (a physical bound broken) or over the core budget is drawn hollow."""
    points = {m: (st, bad) for m, (st, bad) in drawn.items() if 1 in st and st[1].median}
    if not points or all(len(st) < 2 for st, _ in points.values()):
        return
    fig = new_figure(6.0, 4.0)
    ax = fig.add_subplot()
    top = max(max(st) for st, _ in points.values())
    ax.plot([1, top], [1, top], color="black", ls="--", lw=1, label="ideal (speed-up = processes)")
    for i, (mode, (steps, bad)) in enumerate(points.items()):
        base = steps[1].median
        for n in sorted(steps):
            st = steps[n]
            if not (st.median and st.low and st.high and base):
                continue
            k = n if mode == "weak" else 1
            y = base / st.median * k
            err = [[y - base / st.high * k], [base / st.low * k - y]]
            face = "none" if n in bad else f"C{i}"
            ax.errorbar([n], [y], yerr=err, fmt="o", color=f"C{i}", mfc=face, capsize=3,
                        label=f"{mode} scaling" if n == min(steps) else None)  # fmt: skip
    ax.set_xlabel("processes")
    ax.set_ylabel("speed-up over one process")
    ax.set_xticks(sorted({n for st, _ in points.values() for n in st}))
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    files = write_figure(fig, plots / "scaling_speedup.png")
    doc.figure(
        files[0],
        "measured speed-up against processes",
        "Speed-up over one process from the median steady-state step (weak scaling: "
        "samples per second); bars: the speed-up at either end of the step's spread; "
        "hollow: invalid (a physical bound broken) or over the core budget, not a finding.",
    )


__all__ = ["fixed_share", "grad_bytes", "scaling_sections"]
