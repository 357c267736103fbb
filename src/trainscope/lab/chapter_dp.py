"""Chapter 4: DataParallel vs DistributedDataParallel, shown as code and measured.

Three small plain-PyTorch scripts (``examples/dp_ddp``: single.py, dp.py, ddp.py) train
the same model on the same batches; the chapter shows the diffs from the single-process
script to each, counts the lines they change, and runs the three alternately (each
repeat's median step time; a comparison only beyond the noise). The scripts are copied
into the chapter's folder first, so the diffs shown are those of the code that ran.
"""

from __future__ import annotations

import difflib
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from trainscope.errors import TrainscopeError
from trainscope.lab.steps import MakeContext, read_json
from trainscope.reports.document import Document, escape_inline, inline_code
from trainscope.reports.section import Section
from trainscope.reports.stats import compare_text, fmt_spread
from trainscope.reports.tables import Table, fmt_float, fmt_rate
from trainscope.util.spread import Spread, spread

SCRIPTS = ("single", "dp", "ddp")
BUDGET = {True: ("60", 3), False: ("200", 5)}
"""Steps per script run and repeats of each, under --quick (True) and the full budget."""
TIMEOUT_S = 600


def examples_dir() -> Path | None:
    """``examples/dp_ddp`` of the source checkout trainscope runs from, if there is one
    (the scripts are examples for people to read, not part of the installed package)."""
    here = Path(__file__).resolve().parents[3] / "examples" / "dp_ddp"
    return here if all((here / f"{s}.py").is_file() for s in SCRIPTS) else None


def needs() -> str | None:
    """What this machine lacks for chapter 4, or None."""
    if examples_dir() is None:
        return "needs examples/dp_ddp/ of a trainscope source checkout"
    return None


def make(ctx: MakeContext) -> None:
    """Copy the scripts, then run each ``repeats`` times, alternating."""
    src = examples_dir()
    if src is None:
        raise TrainscopeError(str(needs()))
    scripts = ctx.folder / "scripts"
    scripts.mkdir(parents=True, exist_ok=True)
    for s in SCRIPTS:
        if not (scripts / f"{s}.py").is_file():  # resumed: keep the code that already ran
            shutil.copyfile(src / f"{s}.py", scripts / f"{s}.py")
    steps, repeats = BUDGET[ctx.quick]
    for k in range(1, repeats + 1):
        for s in SCRIPTS:
            record = ctx.folder / f"{s}-r{k}.json"
            argv = [sys.executable, str(scripts / f"{s}.py"), "--steps", steps, "--json",
                    str(record)]  # fmt: skip
            if k == 1:
                ctx.commands.append(f"python examples/dp_ddp/{s}.py --steps {steps}")
            if not record.is_file():
                _run_script(ctx, argv, ctx.folder / f"{s}-r{k}.log")


def _run_script(ctx: MakeContext, argv: list[str], log: Path) -> None:
    ctx.say("  " + " ".join(shlex.quote(a) for a in argv))
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    with log.open("w", encoding="utf-8") as f:
        try:
            proc = subprocess.run(argv, stdout=f, stderr=subprocess.STDOUT, env=env,
                                  cwd=ctx.folder, timeout=TIMEOUT_S, check=False)  # fmt: skip
        except subprocess.TimeoutExpired:
            raise TrainscopeError(f"{argv[1]} ran past {TIMEOUT_S} s (log: {log})") from None
    if proc.returncode != 0:
        raise TrainscopeError(f"{argv[1]} exited with status {proc.returncode} (log: {log})")


def _records(folder: Path, script: str) -> list[dict[str, Any]]:
    out = []
    for path in sorted(folder.glob(f"{script}-r*.json")):
        data = read_json(path)
        if isinstance(data, dict) and isinstance(data.get("step_times_s"), list):
            out.append(data)
    return out


def _median_ms(record: dict[str, Any]) -> float | None:
    times = [t for t in record["step_times_s"] if isinstance(t, (int, float))]
    return 1e3 * sorted(times)[len(times) // 2] if times else None


def _throughput(record: dict[str, Any]) -> float | None:
    """Samples per second over the timed steps: total work over total time."""
    times = [t for t in record["step_times_s"] if isinstance(t, (int, float))]
    batch = record.get("global_batch")
    return batch * len(times) / sum(times) if times and sum(times) > 0 and batch else None


def diff_text(folder: Path, script: str) -> tuple[str, int]:
    """The unified diff from single.py to ``script``.py as it ran, and its changed lines."""
    a = (folder / "scripts" / "single.py").read_text(encoding="utf-8").splitlines()
    b = (folder / "scripts" / f"{script}.py").read_text(encoding="utf-8").splitlines()
    lines = list(difflib.unified_diff(a, b, "single.py", f"{script}.py", lineterm=""))
    changed = sum(1 for x in lines[2:] if x[:1] in "+-")
    return "\n".join(lines), changed


def section(folder: Path, doc: Document, plots: Path) -> Section:
    """The diffs, the lines they change, the measured step times and the findings."""
    out = Section()
    stats: dict[str, dict[str, Spread]] = {}
    rows = []
    for s in SCRIPTS:
        recs = _records(folder, s)
        lines = len((folder / "scripts" / f"{s}.py").read_text(encoding="utf-8").splitlines())
        changed = diff_text(folder, s)[1] if s != "single" else 0
        st = {"step": spread(_median_ms(r) for r in recs),
              "rate": spread(_throughput(r) for r in recs),
              "loss": spread(r.get("loss_last") for r in recs)}  # fmt: skip
        stats[s] = st
        first = recs[0] if recs else {}
        procs = f"{first.get('world_size', '–')} x {first.get('threads_per_process', '–')}"
        rows.append([f"{s}.py", str(lines), str(changed), procs, str(st["step"].n),
                     fmt_spread(st["step"]), fmt_spread(st["rate"], fmt_rate),
                     fmt_spread(st["loss"], fmt_float)])  # fmt: skip
    table = Table(
        ["Script", "Lines", "Changed vs single", "Processes x threads", "n", "Step (ms)",
         "Samples/s", "Final loss"],
        rows,
        "The three scripts, run alternately: each repeat's median step time (warm-up steps "
        "left out), median (min–max) over repeats; samples/s: the timed steps' samples over "
        "their time. Changed: lines added or removed by the diff from single.py.",
        "tab:dp-ddp", "lrrrrrrr",
    )  # fmt: skip
    out.add_table(doc, "dp-ddp", table)
    for s in ("dp", "ddp"):
        text, changed = diff_text(folder, s)
        doc.paragraph(f"From {inline_code('single.py')} to {inline_code(s + '.py')}: "
                      f"{changed} lines changed.")  # fmt: skip
        doc.code(text)
    for s in ("dp", "ddp"):
        if stats[s]["step"].ok and stats["single"]["step"].ok:
            ref = stats["single"]["step"]
            text = compare_text(f"{s}.py", stats[s]["step"], "single.py", ref, "step time",
                                unit=" ms")  # fmt: skip
            out.findings.append(text)
    notes = {str(r["note"]) for r in _records(folder, "dp") if r.get("note")}
    for n in sorted(notes):
        out.findings.append(f"dp.py on this machine: {n}.")
    for f in out.findings:
        doc.paragraph(escape_inline(f))
    return out


__all__ = ["diff_text", "examples_dir", "make", "needs", "section"]
