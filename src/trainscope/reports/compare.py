"""``trainscope compare``: several runs side by side, one column per run (torch-free)."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainscope.records.run_dir import STAGE_LABELS, STAGES, RunRecord, load_run
from trainscope.reports.document import Document, escape_inline, write_document
from trainscope.reports.outdir import report_dir
from trainscope.reports.tables import (
    Table,
    fmt_bytes,
    fmt_float,
    fmt_int,
    fmt_pct,
    fmt_rate,
    fmt_seconds,
)


@dataclass
class Comparison:
    """What :func:`build_comparison` produced."""

    out_dir: Path
    table: Table
    files: list[Path] = field(default_factory=list)


def _peak(s: dict[str, Any]) -> str:
    text = fmt_bytes(s.get("peak_memory_bytes"))
    return f"{text} ({s['peak_memory_kind']})" if s.get("peak_memory_kind") else text


def _last_val(s: dict[str, Any]) -> Any:
    epochs = s.get("epochs") or []
    return epochs[-1].get("val_accuracy") if epochs else None


# Row label -> how to read it from a summary. Configuration first, then results.
ROWS: list[tuple[str, Callable[[dict[str, Any]], str]]] = [
    ("Status", lambda s: str(s.get("status", "–"))),
    ("Workload", lambda s: str(s.get("workload", "–"))),
    ("Model", lambda s: str(s.get("model", "–"))),
    ("Device", lambda s: str(s.get("device", "–"))),
    ("Precision", lambda s: str(s.get("precision", "–"))),
    ("Loader", lambda s: str(s.get("loader", "torch"))),
    ("Workers", lambda s: str(s.get("num_workers", "–"))),
    ("Batch size", lambda s: fmt_int(s.get("batch_size"))),
    ("Epochs", lambda s: str(len(s.get("epochs") or []))),
    ("Steps", lambda s: fmt_int(s.get("steps"))),
    ("Final val accuracy", lambda s: fmt_pct(_last_val(s), 2)),
    ("Test accuracy", lambda s: fmt_pct(s.get("test_accuracy"), 2)),
    ("Test loss", lambda s: fmt_float(s.get("test_loss"))),
    ("Wall time (s)", lambda s: fmt_seconds(s.get("wall_time_s"))),
    ("Train time (s)", lambda s: fmt_seconds(s.get("train_time_s"))),
    ("Samples/s", lambda s: fmt_rate(s.get("samples_per_s"))),
    ("Peak memory", _peak),
    ("Skipped steps", lambda s: fmt_int(s.get("skipped_steps"))),
]


def _stage_cell(s: dict[str, Any], stage: str) -> str:
    secs = (s.get("stages_s") or {}).get(stage)
    wall = s.get("wall_time_s")
    if secs is None:
        return "–"
    share = f" ({fmt_pct(secs / wall)})" if wall else ""
    return fmt_seconds(secs) + share


def comparison_table(records: Sequence[RunRecord]) -> Table:
    """One column per run (named by its directory), one row per fact, then per stage."""
    names = _unique_names(records)
    rows: list[list[object]] = []
    for label, read in ROWS:
        rows.append([label, *(read(r.summary) for r in records)])
    for stage in STAGES:
        if any(stage in (r.summary.get("stages_s") or {}) for r in records):
            rows.append(
                [f"{STAGE_LABELS[stage]} (s)", *(_stage_cell(r.summary, stage) for r in records)]
            )
    return Table(
        ["", *names],
        rows,
        "Runs side by side; stage rows give seconds and share of wall time.",
        "tab:compare",
        "l" + "r" * len(records),
    )


def _unique_names(records: Sequence[RunRecord]) -> list[str]:
    # Study runs are all called r1, r2...: add parent folders until the names differ.
    depth = 1
    while True:
        names = ["/".join(r.path.resolve().parts[-depth:]) for r in records]
        if len(set(names)) == len(names) or depth >= 4:
            return names
        depth += 1


def build_comparison(
    run_dirs: Sequence[str | os.PathLike[str]], out_dir: str | os.PathLike[str]
) -> Comparison:
    """Load the runs and write compare.md, compare.html and compare.tex into ``out_dir``."""
    records = [load_run(p) for p in run_dirs]
    table = comparison_table(records)
    files = ("compare.md", "compare.html", "compare.tex", "report.md", "report.html")
    with report_dir(out_dir, "compare", files):
        return _write_comparison(records, table, Path(out_dir))


def _write_comparison(records: Sequence[RunRecord], table: Table, out: Path) -> Comparison:
    doc = Document(f"Comparison of {len(records)} runs")
    doc.table(table)
    # Named as in the table's header (r1 alone is ambiguous among study runs), escaped:
    # a directory name is text, not markup.
    failed = [
        escape_inline(name)
        for name, r in zip(table.columns[1:], records)
        if r.summary.get("status") != "completed"
    ]
    if failed:
        doc.note("Not completed (numbers are partial): " + ", ".join(failed))
    md_html = write_document(doc, out)
    files = []
    for p in md_html:  # write_document names its files report.*; here they are compare.*
        target = p.with_name("compare" + p.suffix)
        p.replace(target)
        files.append(target)
    tex = out / "compare.tex"
    tex.write_text(table.to_latex(), encoding="utf-8")
    files.append(tex)
    return Comparison(out_dir=out, table=table, files=files)


def print_comparison(comparison: Comparison) -> None:
    """The table on the console, then where the files are."""
    from rich.console import Console

    from trainscope.reports.console import print_line, table_to_rich

    console = Console()
    console.print(table_to_rich(comparison.table))
    print_line(console, "written: " + ", ".join(str(p) for p in comparison.files))
