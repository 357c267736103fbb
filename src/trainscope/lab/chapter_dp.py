"""Chapter 4: DataParallel vs DistributedDataParallel, shown as code and measured.

Three small plain-PyTorch scripts (``examples/dp_ddp``: single.py, dp.py, ddp.py) train
the same model on the same batches; the chapter shows the diffs from the single-process
script to each, counts the lines they change, and runs the three alternately (each
repeat's median step time; a comparison only beyond the noise). The scripts are copied
into the chapter's folder first, so the diffs shown are those of the code that ran. Each
repeat's record gets the other load it ran beside; a loaded repeat is run again (bounded,
as studies do) and never compared.
"""

from __future__ import annotations

import difflib
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil

from trainscope.analysis.stats import compare_text, fmt_spread
from trainscope.config import available_cpus
from trainscope.errors import TrainscopeError
from trainscope.lab.steps import MakeContext, read_json
from trainscope.records.jsonio import atomic_write_json
from trainscope.render.document import Document, escape_inline, inline_code
from trainscope.render.table import Table, fmt_float, fmt_rate
from trainscope.reports.section import Section
from trainscope.runtime.threads import LoadReading
from trainscope.studies.remeasure import DEFAULT_ATTEMPTS as REMEASURE
from trainscope.studies.remeasure import MIN_SECONDS
from trainscope.util.load import loaded, not_a_finding
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
    t0 = time.perf_counter()
    for k in range(1, repeats + 1):
        for s in SCRIPTS:
            if k == 1:
                ctx.commands.append(f"python examples/dp_ddp/{s}.py --steps {steps}")
            _repeat(ctx, s, k, steps)
    _remeasure(ctx, steps, repeats, time.perf_counter() - t0)


def _repeat(ctx: MakeContext, script: str, k: int, steps: str) -> None:
    """Repeat ``k`` of ``script`` (kept where a resumed lab already has it)."""
    record = ctx.folder / f"{script}-r{k}.json"
    if record.is_file():
        return
    # Absolute: the script runs with the chapter's folder as its working directory, where
    # a relative path (lab --out runs/lab, the README's) would name a folder inside itself.
    folder = ctx.folder.absolute()
    argv = [sys.executable, str(folder / "scripts" / f"{script}.py"), "--steps", steps,
            "--json", str(folder / record.name)]  # fmt: skip
    other = _run_script(ctx, argv, ctx.folder / f"{script}-r{k}.log")
    _add_load(record, other)


def _remeasure(ctx: MakeContext, steps: str, repeats: int, took_s: float) -> None:
    """Run a script again where other load contaminated its repeats, round-robin across
    the scripts, until each has ``repeats`` clean ones: at most REMEASURE more runs of
    each, and no longer than the planned runs took (at least MIN_SECONDS), as studies do
    (trainscope.studies.remeasure)."""
    deadline = time.perf_counter() + max(took_s, MIN_SECONDS)
    for _ in range(REMEASURE):
        short = [s for s in SCRIPTS if len(_records(ctx.folder, s, clean=True)) < repeats
                 and _records(ctx.folder, s)]  # fmt: skip
        if not short:
            return
        for s in short:
            if time.perf_counter() > deadline:
                ctx.say(f"  re-measuring stopped at its time bound ({took_s:.0f} s)")
                return
            k = 1 + max(_repeat_index(p) for p in ctx.folder.glob(f"{s}-r*.json"))
            ctx.say(f"  {s}.py ran under other load: repeat {k}")
            _repeat(ctx, s, k, steps)


def _repeat_index(path: Path) -> int:
    tail = path.stem.rsplit("-r", 1)[-1]
    return int(tail) if tail.isdigit() else 0


def _add_load(record: Path, other: float | None) -> None:
    """Put the other load the script ran beside into its record, in the ``cpu`` section
    runs have, so the load rule (trainscope.util.load) reads it."""
    data = read_json(record)
    if not isinstance(data, dict):
        return
    data["cpu"] = {
        "other_cores": None if other is None else round(other, 3),
        "threads": data.get("threads_per_process"),
        "processes_on_node": data.get("world_size"),
        "cores": available_cpus(),
        "method": "busy CPU time on the lab's cores minus the script's processes', over "
        "the script's wall time (measured by the lab around it)",
    }
    atomic_write_json(record, data)


def _run_script(ctx: MakeContext, argv: list[str], log: Path) -> float | None:
    """Run one script; the cores other processes kept busy meanwhile (None: unreadable)."""
    ctx.say("  " + " ".join(shlex.quote(a) for a in argv))
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    me = psutil.Process()
    start = LoadReading.take(me, None)
    with log.open("w", encoding="utf-8") as f:
        try:
            proc = subprocess.run(argv, stdout=f, stderr=subprocess.STDOUT, env=env,
                                  cwd=ctx.folder, timeout=TIMEOUT_S, check=False)  # fmt: skip
        except subprocess.TimeoutExpired:
            raise TrainscopeError(f"{argv[1]} ran past {TIMEOUT_S} s (log: {log})") from None
    if proc.returncode != 0:
        raise TrainscopeError(f"{argv[1]} exited with status {proc.returncode} (log: {log})")
    return LoadReading.take(me, None).other_since(start)


def _records(folder: Path, script: str, *, clean: bool = False) -> list[dict[str, Any]]:
    """The script's repeat records, in repeat order; ``clean``: only those measured
    without other load (trainscope.util.load)."""
    out = []
    for path in sorted(folder.glob(f"{script}-r*.json"), key=_repeat_index):
        data = read_json(path)
        if isinstance(data, dict) and isinstance(data.get("step_times_s"), list):
            if not (clean and loaded(data)):
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
    blind = []  # scripts whose every repeat was loaded: no figure to compare
    for s in SCRIPTS:
        every = _records(folder, s)
        recs = [r for r in every if not loaded(r)]  # a loaded repeat is no evidence
        if every and not recs:
            blind.append(not_a_finding(f"all {len(every)} repeat(s) of {s}.py", every))
        lines = len((folder / "scripts" / f"{s}.py").read_text(encoding="utf-8").splitlines())
        changed = diff_text(folder, s)[1] if s != "single" else 0
        st = {"step": spread(_median_ms(r) for r in recs),
              "rate": spread(_throughput(r) for r in recs),
              "loss": spread(r.get("loss_last") for r in recs)}  # fmt: skip
        stats[s] = st
        first = every[0] if every else {}
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
    out.findings += blind
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
