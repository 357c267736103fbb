"""Ranks and stragglers in the run report: which rank of a multi-process run the others
wait for, as tables and findings (torch-free).

The analysis (every rank's step lines read back, the waiting at the gradient
synchronisation, the straggler named only beyond noise) is
:mod:`trainscope.diagnosis.stragglers`, shared with the doctor's ``straggler`` rule; this
module lays it out: a per-stage table across ranks, a waiting table and the findings,
with the text that comes from the record escaped where it lands in the document.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping

from trainscope.diagnosis.stragglers import (
    MIN_STEP_SHARE,
    StragglerAnalysis,
    analyze_stragglers,
    load_rank_steps,
    per_step_ms,
    rank_hosts,
    stage_label,
    strategy_of,
    warmup_of,
    world_size,
)
from trainscope.records.run_dir import RunRecord
from trainscope.render.document import Document, escape_inline, inline_code
from trainscope.render.table import Table, fmt_pct, fmt_seconds

# ---------------------------------------------------------------------------------------
# Tables
# ---------------------------------------------------------------------------------------


def _steps_text(a: StragglerAnalysis) -> str:
    k = a.warmup_left_out
    left = f", the first {k} warm-up step{'s' if k > 1 else ''} left out" if k else ""
    return f"over the {len(a.steps)} steps every rank recorded{left}"


def rank_stage_table(a: StragglerAnalysis) -> Table:
    """Stage | min / median / max of the per-rank totals (s and ms/step) | slowest rank |
    spread (max − min as a share of the median)."""
    n = len(a.steps)
    rows: list[list[object]] = []
    for st in a.stages:
        totals = sorted(st.totals.values())
        lo, med, hi = totals[0], statistics.median(totals), totals[-1]
        slowest = max(st.totals, key=lambda r: st.totals[r])
        rows.append(
            [
                stage_label(st.stage),
                fmt_seconds(lo),
                fmt_seconds(med),
                fmt_seconds(hi),
                per_step_ms(lo / n) if n else None,
                per_step_ms(med / n) if n else None,
                per_step_ms(hi / n) if n else None,
                str(slowest) if st.slower_rank == slowest else f"{slowest} (within noise)",
                fmt_pct((hi - lo) / med) if med > 0 else None,
            ]
        )
    sync = (
        f" In the communication-bearing stage ({a.sync.name}) the slowest rank is the one "
        "that waits, not the one that is slow."
        if a.sync
        else ""
    )
    return Table(
        [
            "Stage",
            "min (s)",
            "median (s)",
            "max (s)",
            "min (ms/step)",
            "median (ms/step)",
            "max (ms/step)",
            "Slowest rank",
            "Spread",
        ],
        rows,
        f"Per-stage time across {len(a.ranks)} ranks {_steps_text(a)}: min, median and max "
        "of the per-rank totals, spread = (max − min) / median. A slowest rank is named "
        "without '(within noise)' only when its per-step times lie above every other "
        f"rank's beyond their interquartile ranges.{sync}",
        "tab:rank-stages",
        align="lrrrrrrlr",
    )


def waiting_table(a: StragglerAnalysis, hosts: Mapping[int, str] | None = None) -> Table:
    """Rank | (host) | its per-step time in the communication-bearing stage | waiting per
    step, in total and as a share of its step time. Empty without such a stage."""
    n = len(a.steps)
    show_hosts = bool(hosts) and len(set((hosts or {}).values())) > 1
    rows: list[list[object]] = []
    for r in a.ranks:
        w = a.waiting.get(r)
        if w is None:
            continue
        med = w.sync_per_step.median
        row: list[object] = [str(r)]
        if show_hosts:
            row.append((hosts or {}).get(r))
        row += [
            per_step_ms(med) if med is not None else None,
            per_step_ms(w.total_s / n) if n else None,
            fmt_seconds(w.total_s),
            fmt_pct(w.total_s / w.step_total_s) if w.step_total_s > 0 else None,
        ]
        rows.append(row)
    name = a.sync.name if a.sync else "comm"
    where = a.sync.where if a.sync else ""
    columns = ["Rank", *(["Host"] if show_hosts else [])]
    columns += [
        f"{name} (ms/step, median)",
        "waiting (ms/step)",
        "waiting (s)",
        "waiting / step time",
    ]
    return Table(
        columns,
        rows,
        f"Time each rank waits for the others {where}, {_steps_text(a)}: per step, its "
        f"time in {name} minus the fastest rank's on the same step. The rank that waits "
        "least is the one the others wait for.",
        "tab:rank-waiting",
        align="l" + ("l" if show_hosts else "") + "rrrr",
    )


# ---------------------------------------------------------------------------------------
# The report section
# ---------------------------------------------------------------------------------------


def straggler_section(record: RunRecord, doc: Document) -> list[str]:
    """Add "Ranks and stragglers" (tables and findings) to ``doc``; return the findings.

    Adds nothing to a one-rank run. When ranks' step files are missing it says which and
    why, and compares the ranks that remain (if at least two).
    """
    summary = record.summary
    if world_size(summary) < 2:
        return []
    doc.heading("Ranks and stragglers")
    loaded = load_rank_steps(record)
    findings: list[str] = []
    if loaded.missing:
        missing = sorted(loaded.missing.items())
        what = "; ".join(
            f"rank {r}: {inline_code(file)} {escape_inline(why)}" for r, (file, why) in missing[:8]
        )
        if len(missing) > 8:  # a record may claim thousands of ranks that left nothing
            what += f"; and {len(missing) - 8} more ranks"
        if len(loaded.steps) < 2:
            text = (
                f"no straggler analysis: per-rank step records are missing ({what}); it "
                "needs the step times of at least two ranks"
            )
        else:
            text = (
                f"per-rank step records are missing ({what}): only ranks "
                f"{', '.join(map(str, sorted(loaded.steps)))} are compared, and a missing "
                "rank may be the straggler"
            )
        doc.note(text)
        findings.append(text)
        if len(loaded.steps) < 2:
            return findings
    strategy = strategy_of(summary)
    analysis = analyze_stragglers(loaded.steps, strategy, warmup_of(summary))
    if analysis.sync is not None:
        how = (
            f"Waiting is measured {escape_inline(analysis.sync.where)}: per step, each "
            "rank's time there minus the fastest rank's; ranks meet at every gradient "
            "synchronisation, so the rank that waits least is the one the others wait for."
        )
    else:
        how = "This run has no timed gradient communication, so waiting is not measured."
    doc.paragraph(
        "Step times of every rank, compared step by step "
        f"({escape_inline(_steps_text(analysis))}). {how} A straggler is named only when "
        "the difference is beyond noise: the ranks' per-step times do not overlap in their "
        f"interquartile ranges and differ by at least {fmt_pct(MIN_STEP_SHARE, 0)} of a step."
    )
    if analysis.steps:
        doc.table(rank_stage_table(analysis))
        if analysis.waiting:
            doc.table(waiting_table(analysis, rank_hosts(summary)))
    # The findings are plain text, stage names as the record has them: escaped here, they
    # stay literal in both renderings (a stage called "*x*" is not emphasis).
    shown = [escape_inline(text) for text in analysis.findings]
    doc.bullets(shown)
    return findings + shown
