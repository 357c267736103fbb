"""Chapter 1: what a second process buys, what it costs, and what one slow rank costs all.

The scaling study (single vs DDP on this machine's cores, and the α–β projection to 8 and
64 devices), then DDP on 2 processes with a straggler planted on rank 1
(:mod:`trainscope.lab.straggler`: each of its samples loads ``delay`` ms slower) against
the same runs without one, alternated: the step time every rank pays, and where each rank
spends it (rank 1 in its data, rank 0 waiting in the gradient all-reduce).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trainscope.analysis.stats import compare_text, fmt_spread
from trainscope.errors import TrainscopeError
from trainscope.lab.chapter_runs import add_shifted, study_done, study_part
from trainscope.lab.steps import MakeContext
from trainscope.records.run_dir import RunRecord, load_run
from trainscope.render.document import Document, escape_inline
from trainscope.render.table import Table
from trainscope.reports.section import Section
from trainscope.reports.stragglers import straggler_section
from trainscope.util.load import loaded, not_a_finding
from trainscope.util.spread import MIN_N_TO_CLAIM, Spread, spread

WORKLOAD = "trainscope.lab.straggler:slow_rank"
DELAY_MS = "1"
"""Per sample on rank 1: about 4 ms per step at its 4 samples (of a global batch of 8)."""
SCALING = {True: ("--nproc", "1,2", "--repeats", str(MIN_N_TO_CLAIM)), False: ("--repeats", "5")}
STRAGGLER = {True: ("40", 3), False: ("100", 5)}
"""Steps per straggler run and repeats of each, under --quick (True) and not."""
CONFIGS = (("even", "0"), ("slow-rank-1", DELAY_MS))


def make(ctx: MakeContext) -> None:
    """The scaling study, then the straggler runs, alternated."""
    scaling = ctx.folder / "scaling"
    ctx.run(["study", "scaling", *SCALING[ctx.quick], "--out", str(scaling), "-q"],
            skip=study_done(scaling))  # fmt: skip
    steps, repeats = STRAGGLER[ctx.quick]
    for k in range(1, repeats + 1):
        for name, delay in CONFIGS:
            out = ctx.folder / "straggler" / f"{name}-r{k}"
            argv = ["run", "--workload", WORKLOAD, "--set", f"workload.options.delay_ms={delay}",
                    "--nproc", "2", "--strategy", "ddp", "--threads", "1", "--batch-size", "8",
                    "--epochs", "1", "--max-steps-per-epoch", steps, "--no-save-weights",
                    "--out", str(out), "-q"]  # fmt: skip
            ctx.run(argv, skip=(out / "summary.json").is_file() and _completed(out))


def _completed(run: Path) -> bool:
    try:
        return load_run(run).summary.get("status") == "completed"
    except (TrainscopeError, OSError, ValueError):  # half-written: run it again
        return False


def _runs(folder: Path, name: str) -> list[RunRecord]:
    found = []
    for d in sorted((folder / "straggler").glob(f"{name}-r*")):
        if _completed(d):
            found.append(load_run(d))
    return found


def _rank_wait_ms(rec: RunRecord, rank: int, stage: str) -> Any:
    r = next((x for x in rec.view.ranks if x.get("rank") == rank), {})
    value = ((r.get("steady_state") or {}).get("stage_s_median") or {}).get(stage)
    return 1e3 * value if isinstance(value, (int, float)) else None


def _step_ms(rec: RunRecord) -> Any:
    step = rec.view.steady_step_s
    return 1e3 * step if step is not None else None


def section(folder: Path, doc: Document, plots: Path) -> Section:
    """The scaling study's part, then the straggler's table, findings and rank analysis."""
    out = study_part(folder / "scaling", doc, plots / "scaling")
    doc.heading("One slow rank", 4)
    stats: dict[str, dict[str, Spread]] = {}
    rows, blind = [], []
    for name, delay in CONFIGS:
        every = _runs(folder, name)
        recs = [r for r in every if not loaded(r.summary)]  # a loaded run is no evidence
        if every and not recs:
            blind.append(not_a_finding(f"all {len(every)} runs of {name}",
                                       [r.summary for r in every]))  # fmt: skip
        st = {"step": spread(_step_ms(r) for r in recs),
              "data0": spread(_rank_wait_ms(r, 0, "data_wait") for r in recs),
              "data1": spread(_rank_wait_ms(r, 1, "data_wait") for r in recs),
              "back0": spread(_rank_wait_ms(r, 0, "backward") for r in recs)}  # fmt: skip
        stats[name] = st
        rows.append([name, delay, str(st["step"].n), fmt_spread(st["step"]),
                     fmt_spread(st["data1"]), fmt_spread(st["data0"]),
                     fmt_spread(st["back0"])])  # fmt: skip
    out.add_table(doc, "straggler", Table(
        ["Config", "Delay per sample on rank 1 (ms)", "n", "Step (ms)",
         "Rank 1 data wait (ms)", "Rank 0 data wait (ms)", "Rank 0 backward (ms)"],
        rows,
        "DDP on 2 processes of 1 thread, alternated: the steady-state median step (every "
        "rank's: the all-reduce makes them wait for each other) and per rank the median ms "
        "per step of its data wait and its backward, where DDP's all-reduce waits; median "
        "(min–max, IQR from n=5) over repeats.",
        "tab:straggler", "lrrrrrr",
    ))  # fmt: skip
    even, slow = stats["even"], stats["slow-rank-1"]
    found = list(blind)
    if even["step"].ok and slow["step"].ok:
        found = [
            compare_text("one slow rank", slow["step"], "none", even["step"],
                         "step time of every rank", unit=" ms"),
            compare_text("rank 0's backward, where its all-reduce waits", slow["back0"],
                         "without the straggler", even["back0"], "time", unit=" ms"),
        ]  # fmt: skip
    for f in found:
        doc.paragraph(escape_inline(f))
    out.findings += found
    slow_runs = _runs(folder, "slow-rank-1")
    clean = [r for r in slow_runs if not loaded(r.summary)]
    if slow_runs:
        shown = (clean or slow_runs)[0]
        doc.paragraph(f"The ranks of one run with the straggler ({shown.path.name}):")
        part = Document("")
        ranks = straggler_section(shown, part)[:1]
        out.findings += ranks if clean else []  # a loaded run's ranks: shown, not claimed
        add_shifted(doc, part, 2)
    return out


__all__ = ["make", "section"]
