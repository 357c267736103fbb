"""``trainscope compare``: several runs side by side, one column per run (torch-free)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainscope.analysis.stats import compare_text, fmt_sig
from trainscope.errors import TrainscopeError
from trainscope.records.run_dir import STAGE_LABELS, STAGES, RunRecord, load_run, output_root
from trainscope.records.steady_state import steady_state
from trainscope.records.view import SummaryView
from trainscope.render.console import make_console, print_line, print_table
from trainscope.render.document import Document, escape_inline, write_document
from trainscope.render.outdir import report_dir
from trainscope.render.table import LATEX_NEEDS, Table, fmt_pct, fmt_seconds
from trainscope.reports.tables import WALL_DEFINITION, overview_table
from trainscope.util.load import loaded, not_a_finding
from trainscope.util.spread import NONE, Spread

# Warm-up steps left out of an older run's steady state (its summary has none).
DEFAULT_WARMUP = 5


@dataclass
class Comparison:
    """What :func:`build_comparison` produced."""

    out_dir: Path
    table: Table
    files: list[Path] = field(default_factory=list)
    findings: list[str] = field(default_factory=list)
    """Step-time verdicts against the first run (also printed on the console)."""


def _stage_cell(s: dict[str, Any], stage: str) -> str:
    view = SummaryView(s)
    secs, wall = view.stages_s.get(stage), view.wall_time_s
    if secs is None:
        return "–"
    share = f" ({fmt_pct(secs / wall)})" if wall else ""
    return fmt_seconds(secs) + share


def comparison_table(records: Sequence[RunRecord]) -> Table:
    """One column per run (named by its directory), one row per fact, then per stage.

    The facts are the rows of each run's overview (what the console summary and the run
    report show), in order of first appearance: a fact only some runs have shows as a
    dash in the others.
    """
    names = _unique_names(records)
    per_run = [{row[0]: row[1] for row in overview_table(r.summary, r.env).rows} for r in records]
    labels: list[str] = []
    for facts in per_run:
        labels += [k for k in facts if k not in labels]
    rows: list[list[object]] = [[label, *(f.get(label, "–") for f in per_run)] for label in labels]
    for stage in STAGES:
        if any(stage in r.view.section("stages_s") for r in records):
            rows.append(
                [f"{STAGE_LABELS[stage]} (s)", *(_stage_cell(r.summary, stage) for r in records)]
            )
    return Table(
        ["", *names],
        rows,
        "Runs side by side; stage rows give seconds and share of wall time. " + WALL_DEFINITION,
        "tab:compare",
        "l" + "r" * len(records),
    )


def step_spread(record: RunRecord) -> Spread:
    """A run's steady-state step times as a spread (IQR over its steps after warm-up),
    from the summary, or recomputed from the step records of an older run."""
    st = record.view.steady_state or steady_state(record.events("step"), DEFAULT_WARMUP) or {}
    step = st.get("step_s") or {}
    if not isinstance(step.get("median"), (int, float)):
        return NONE
    return Spread(
        step["median"], step["low"], step["high"], int(st.get("steps") or 0), step["kind"]
    )


def verdicts(names: Sequence[str], records: Sequence[RunRecord]) -> list[str]:
    """Each run's steady step time against the first run's: a ratio only where the two
    interquartile ranges of per-step times do not overlap, else no measurable difference;
    "not a finding" where either run was measured under other load (util.load)."""
    if len(records) < 2:
        return []
    base = step_spread(records[0])
    if base.median is None:
        return []
    out = []
    for name, rec in zip(names[1:], records[1:]):
        sp = step_spread(rec)
        if sp.median is None:
            continue
        crowded = [(n, r) for n, r in ((name, rec), (names[0], records[0])) if loaded(r.summary)]
        if crowded:  # one side measured beside other work: its step times are not its own
            who = " and ".join(n for n, _ in crowded)
            line = not_a_finding(who, [r.summary for _, r in crowded])
            out.append(f"{name} vs {names[0]}: steady step time: {line}.")
            continue
        out.append(
            compare_text(name, sp, names[0], base, "steady step time", fmt=_ms, unit=" ms")
            + " (per-step spreads)."
        )
    return out


def _ms(x: Any) -> str:
    return fmt_sig(1e3 * x) if isinstance(x, (int, float)) else "–"


def _unique_names(records: Sequence[RunRecord]) -> list[str]:
    # Study runs are all called r1, r2...: add parent folders until the names differ.
    depth = 1
    while True:
        names = ["/".join(r.path.resolve().parts[-depth:]) for r in records]
        if len(set(names)) == len(names) or depth >= 4:
            return names
        depth += 1


def fresh_compare_dir(root: Path) -> Path:
    """A new folder for one comparison, named as runs are: ``ROOT/compare-<UTC time>``
    (``-2``, ``-3``... when that second already has one). Created empty here, so two
    comparisons never share a folder and none writes over an earlier one."""
    from datetime import datetime, timezone

    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    root.mkdir(parents=True, exist_ok=True)
    for k in range(1, 1000):
        path = root / (f"compare-{stamp}" if k == 1 else f"compare-{stamp}-{k}")
        try:
            path.mkdir()  # exclusive: a folder someone else made this second is skipped
        except FileExistsError:
            continue
        return path
    raise TrainscopeError(f"no free compare-{stamp}-N folder in {root}: give --out")


def build_comparison(
    run_dirs: Sequence[str | os.PathLike[str]], out_dir: str | os.PathLike[str] | None = None
) -> Comparison:
    """Load the runs and write compare.md, compare.html and compare.tex into ``out_dir``
    (a folder trainscope wrote before is replaced; without one, a new folder under the
    output root, see :func:`fresh_compare_dir`)."""
    records = [load_run(p) for p in run_dirs]
    if out_dir is None:
        out_dir = fresh_compare_dir(output_root())
    table = comparison_table(records)
    files = ("compare.md", "compare.html", "compare.tex", "report.md", "report.html")
    with report_dir(out_dir, "compare", files):
        return _write_comparison(records, table, Path(out_dir))


def _write_comparison(records: Sequence[RunRecord], table: Table, out: Path) -> Comparison:
    doc = Document(f"Comparison of {len(records)} runs")
    doc.table(table)
    found = verdicts(table.columns[1:], records)
    if found:
        doc.heading("Step time", 2)
        doc.paragraph(
            "Steady-state step time of each run against the first (warm-up steps left "
            "out), median of its steps with their interquartile range; a ratio is given only "
            "where the two ranges do not overlap."
        )
        doc.bullets([escape_inline(f) for f in found])
    # Named as in the table's header (r1 alone is ambiguous among study runs), escaped:
    # a directory name is text, not markup.
    failed = [
        escape_inline(name)
        for name, r in zip(table.columns[1:], records)
        if r.view.status != "completed"
    ]
    if failed:
        doc.note("Not completed (numbers are partial): " + ", ".join(failed))
    for r in records:  # summary fields that do not fit their schema: said, not shown
        for line in r.left_out:
            doc.note(escape_inline(f"Damaged record: {line}"))
    md_html = write_document(doc, out)
    files = []
    for p in md_html:  # write_document names its files report.*; here they are compare.*
        target = p.with_name("compare" + p.suffix)
        p.replace(target)
        files.append(target)
    tex = out / "compare.tex"
    needs = LATEX_NEEDS.replace("tables.tex", "compare.tex")
    tex.write_text(f"% Generated by trainscope compare.\n{needs}\n\n{table.to_latex()}", "utf-8")
    files.append(tex)
    return Comparison(out_dir=out, table=table, files=files, findings=found)


def print_comparison(comparison: Comparison) -> None:
    """The table on the console, then where the files are."""
    console = make_console()
    print_table(console, comparison.table)
    for line in comparison.findings:
        print_line(console, "• " + line)
    print_line(console, "written: " + ", ".join(str(p) for p in comparison.files))
