"""The report of a ``trainscope collectives`` sweep: how its processes ran, what each
collective did on its example, the two identities, a table per op (size, count, time,
algbw, busbw, #wrong) and busbw against message size, one line per op.

Built from study.json alone (no run records, no torch); every value from it is record
text, escaped where it is rendered (:mod:`trainscope.util.textsafe`).
"""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path
from typing import Any

from trainscope.analysis.stats import fmt_sig
from trainscope.comm.cost_model import fit_sweep, fits_from_dict
from trainscope.comm.record import planned_keys, results_by_key, wrong_results
from trainscope.records.study_dir import StudyRecord
from trainscope.render.document import Document, escape_inline, inline_code
from trainscope.render.plots import new_figure, plain_text_figure
from trainscope.render.study_plots import error_line, write_figure
from trainscope.reports.collectives_tables import (
    example_table,
    identities_table,
    size_text,
    sweep_table,
)
from trainscope.reports.cost_model_tables import fit_table
from trainscope.reports.section import Section
from trainscope.util.spread import spread
from trainscope.util.textsafe import plot_text

# A fixed colour per op (tab10 order), so an op looks the same in every report.
OP_ORDER = ("all_reduce", "broadcast", "reduce", "all_gather", "reduce_scatter", "all_to_all")

BUSBW_TEXT = (
    "**What busbw means.** algbw is the size over the time: how fast one rank's buffer "
    "went through the collective. busbw is algbw times the op's factor, as nccl-tests "
    "defines it: all_reduce 2(n-1)/n; reduce_scatter, all_gather and all_to_all (n-1)/n; "
    "broadcast and reduce 1. The factor is the share of the buffer that each rank must "
    "send over its link in the bandwidth-optimal algorithm (a ring all_reduce is a "
    "reduce-scatter then an all-gather, each moving (n-1)/n of it), so busbw does not "
    "depend on n and compares across ops and with the link's own bandwidth: an op whose "
    "busbw reaches the link's peak uses the link fully. Small messages are bound by "
    "latency (a fixed cost per call), so busbw rises with size until the link or the "
    "memory copies limit it."
)


def _number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _status(study: StudyRecord, doc: Document) -> None:
    meta = study.meta
    status = str(study.status)
    done, planned = meta.get("done", "?"), meta.get("planned", "?")
    again = "Rerun the same `trainscope collectives` command to finish it (saved measurements "
    again += "are kept)."
    if status == "running":
        doc.note(
            f"The sweep was cut off (study.json still says running: its launcher was killed) "
            f"after {escape_inline(str(done))} of {escape_inline(str(planned))} measurements; "
            f"the tables show those. {again}"
        )
    elif status == "failed":
        doc.note(
            f"Sweep **failed** after {escape_inline(str(done))} of "
            f"{escape_inline(str(planned))} measurements: "
            f"{escape_inline(str(meta.get('error')))}. {again}"
        )
    elif status != "completed":
        doc.note(
            f"Sweep **{escape_inline(status)}** after {escape_inline(str(done))} of "
            f"{escape_inline(str(planned))} measurements; the tables show those. {again}"
        )


def _hosts(machine: dict[str, Any]) -> list[tuple[str, int, int | None]]:
    """(host, processes on it, CPUs one of them may use) per host, in rank order."""
    ranks = [r for r in machine.get("ranks") or [] if isinstance(r, dict)]
    count = Counter(str(r.get("host")) for r in ranks)
    cpus: dict[str, int | None] = {}
    for r in ranks:
        c = r.get("cpus")
        cpus.setdefault(str(r.get("host")), c if isinstance(c, int) else None)
    return [(h, count[h], cpus[h]) for h in cpus]


def execution_text(options: dict[str, Any], machine: dict[str, Any]) -> str:
    """How the processes ran, and what sharing the CPU cores means for the figures."""
    world, nnodes = options.get("world_size"), options.get("nnodes")
    backend, device = options.get("backend"), options.get("device")
    text = (
        f"{escape_inline(str(world))} processes ({escape_inline(str(options.get('nproc')))} "
        f"per node on {escape_inline(str(nnodes))} node(s)), started through torchrun, "
        f"backend {inline_code(str(backend))}, {inline_code(str(options.get('dtype')))} "
        f"tensors on {inline_code(str(device))}."
    )
    hosts = _hosts(machine)
    threads = {r.get("torch_threads") for r in machine.get("ranks") or [] if isinstance(r, dict)}
    each = (
        f" and {escape_inline(str(next(iter(threads))))} torch thread(s)"
        if len(threads) == 1
        else ""
    )
    for host, procs, cpus in hosts:
        text += (
            f" On host {inline_code(host)}: {procs} process(es), each allowed "
            f"{escape_inline(str(cpus if cpus is not None else '?'))} CPU(s){each}."
        )
        if isinstance(cpus, int) and procs > cpus:
            text += (
                f" **Oversubscribed:** {procs} processes shared {cpus} CPU core(s), so a "
                "process at times waited for a core; the times include that wait, and the "
                "bandwidths are what this machine gives that many processes at once, not "
                "what its memory or network could carry."
            )
    if len(hosts) == 1 and backend == "gloo":
        text += (
            " Every process ran on this one machine, so gloo's messages went over TCP on "
            "the loopback interface: the figures measure memory copies and the kernel's "
            "TCP stack, not a network link."
        )
    return text


def _machine_bullets(machine: dict[str, Any]) -> list[str]:
    env = machine.get("env") if isinstance(machine.get("env"), dict) else {}

    def val(key: str) -> str:
        return escape_inline(str(env.get(key, "?")))

    out = [
        f"host {inline_code(str(env.get('hostname', '?')))}, CPUs: {val('cpu_count')}, "
        f"device {inline_code(str(env.get('device', '?')))} ({val('device_name')})",
        f"python {val('python')}, torch {val('torch')}, {val('platform')}",
    ]
    if env.get("git_sha"):
        out.append(f"trainscope git {inline_code(str(env['git_sha'])[:12])}")
    return out


def _when(meta: dict[str, Any]) -> str:
    start, end = meta.get("started_at"), meta.get("finished_at")
    text = f"started {escape_inline(str(start))}" if start else "start unknown"
    return text + (f", ended {escape_inline(str(end))} (UTC)" if end else " (UTC)")


def _method_text(options: dict[str, Any]) -> str:
    return (
        f"Per op and size: {escape_inline(str(options.get('warmup')))} untimed iteration(s), "
        f"then {escape_inline(str(options.get('repeats')))} timed ones. Before each, the "
        "buffers are refilled (untimed) and every rank meets at a barrier; a repeat's time "
        "is the slowest rank's (the collective is done when every rank has its result). "
        "Shown: the median over repeats with its spread (min–max, or the interquartile "
        "range from 5 repeats on). The size is the bytes of the largest buffer on one rank "
        "(all_gather's output, reduce_scatter's input, each rank's buffer otherwise), "
        "rounded down to a multiple of n elements for the chunked ops."
    )


@plain_text_figure
def busbw_plot(
    series: dict[str, list[tuple[int, float, tuple[float, float]]]], png: Path, title: str
) -> list[Path]:
    """busbw (GB/s) against message size (log scale), one line per op, the repeats'
    spread as error bars."""
    from matplotlib import colormaps
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    series = {op: pts for op, pts in series.items() if pts}
    if not series:
        return []
    fig = new_figure(7.5, 4.6)
    ax = fig.add_subplot()
    palette = colormaps["tab10"]
    for op, pts in series.items():
        color = palette(OP_ORDER.index(op) % 10) if op in OP_ORDER else "0.3"
        error_line(ax, sorted(pts), color, plot_text(op), markersize=4, capsize=2, linewidth=1.4)
    ticks = sorted({x for pts in series.values() for x, _, _ in pts})
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: plot_text(size_text(int(v)))))
    if len(ticks) > 8:
        ax.tick_params(axis="x", labelrotation=45)
    if len(ticks) == 1:
        ax.set_xlim(ticks[0] / 2, ticks[0] * 2)
    ax.set_ylim(bottom=0)
    ax.set_xlabel("message size (bytes of the largest buffer on one rank; log scale)")
    ax.set_ylabel("busbw (GB/s)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, frameon=False)
    fig.suptitle(title, fontsize=11)
    return write_figure(fig, png)


def _points(results: list[dict[str, Any]]) -> list[tuple[int, float, tuple[float, float]]]:
    """(bytes, busbw, (below, above)) per result; the spread from the repeats' times."""
    pts = []
    for r in results:
        size, busbw, factor = r.get("bytes"), r.get("busbw_GBps"), r.get("bus_factor")
        if not (isinstance(size, int) and size > 0 and _number(busbw) and _number(factor)):
            continue
        sp = spread(r.get("times_s") or [])
        err = (0.0, 0.0)
        if sp.n >= 2 and sp.low and sp.high:
            low, high = size / sp.high / 1e9 * factor, size / sp.low / 1e9 * factor
            err = (max(0.0, busbw - low), max(0.0, high - busbw))
        pts.append((size, float(busbw), err))
    return pts


def _findings(by_op: dict[str, list[dict[str, Any]]]) -> list[str]:
    """Per op: where busbw peaked, and what the smallest message cost (its latency)."""
    out = []
    for op, results in by_op.items():
        ok = [r for r in results if _number(r.get("busbw_GBps"))]
        if not ok:
            continue
        best = max(ok, key=lambda r: r["busbw_GBps"])
        small = min(ok, key=lambda r: r.get("bytes") or 0)
        took = small.get("time_s")
        out.append(
            f"{op}: the largest median busbw {fmt_sig(best['busbw_GBps'])} GB/s (at "
            f"{size_text(best.get('bytes'))}); the smallest message, "
            f"{size_text(small.get('bytes'))}, took "
            + (f"{fmt_sig(took * 1e6)} µs." if _number(took) else "an unknown time.")
        )
    return out


def collectives_sections(study: StudyRecord, doc: Document, plots: Path) -> Section:
    """How the sweep ran, the examples and identities, and the bandwidth per op."""
    section = Section()
    meta, options = study.meta, study.plan.options
    machine = meta.get("machine") if isinstance(meta.get("machine"), dict) else {}
    _status(study, doc)
    doc.heading("How it ran", 2)
    doc.paragraph(execution_text(options, machine))
    doc.bullets([*_machine_bullets(machine), _when(meta)])

    doc.heading("What each collective does", 2)
    doc.paragraph(
        "Each collective on a small example, every rank's tensor before and after, checked "
        "on every rank against the expected value (a closed form of n, the rank and the "
        "root, never a re-run of the reduction); — where the collective leaves the result "
        "unspecified (reduce on the ranks other than the root). At 3 ranks these are the "
        "textbook examples; each caption states the rule for any n."
    )
    examples = [e for e in meta.get("examples") or [] if isinstance(e, dict)]
    for ex in examples:
        table = example_table(ex)
        section.tables[f"example_{ex.get('op')}"] = table
        doc.table(table)
    identities = [i for i in meta.get("identities") or [] if isinstance(i, dict)]
    if identities:
        table = identities_table(identities)
        section.tables["identities"] = table
        doc.table(table)
    if not examples:
        doc.note("No examples were recorded (the sweep ended before they ran).")

    doc.heading("Bandwidth", 2)
    doc.paragraph(BUSBW_TEXT)
    doc.paragraph(_method_text(options))
    data = {"options": options, "results": meta.get("results") or []}
    saved = results_by_key(data) if isinstance(options.get("ops"), list) else {}
    by_op: dict[str, list[dict[str, Any]]] = {}
    for key in planned_keys(options) if saved else []:
        if key in saved:
            by_op.setdefault(key[0], []).append(saved[key])
    title = (
        f"busbw by message size: {options.get('world_size')} processes, "
        f"{options.get('backend')} on {options.get('device')}"
    )
    files = busbw_plot(
        {op: _points(rs) for op, rs in by_op.items()}, plots / "collectives_busbw.png", title
    )
    if files:
        doc.figure(files[0], "busbw by message size, one line per op", None)
    for op, results in by_op.items():
        table = sweep_table(op, results)
        section.tables[f"sweep_{op}"] = table
        doc.table(table)
    if not by_op:
        doc.note("No measurement was saved.")
    wrong = wrong_results({**meta, "options": options})
    if wrong:
        doc.note("**Wrong results:** " + escape_inline("; ".join(wrong)) + ".")
        section.findings.append("wrong results: " + "; ".join(wrong))
    elif examples:
        section.findings.append(
            f"every example and identity right; {sum(map(len, by_op.values()))} "
            "measurements with 0 wrong elements"
        )
    for text in _findings(by_op):
        section.findings.append(text)
        doc.paragraph(escape_inline(text))
    _cost_model(meta, options, section, doc)
    return section


def _cost_model(
    meta: dict[str, Any], options: dict[str, Any], section: Section, doc: Document
) -> None:
    """The α–β fit per op (saved with the study, else fitted from its results now) and
    how to predict with it."""

    saved = meta.get("cost_model") if isinstance(meta.get("cost_model"), dict) else {}
    fits = fits_from_dict(saved.get("fits")) or fit_sweep(meta.get("results") or [])
    if not fits:
        return
    doc.heading("Cost model", 2)
    doc.paragraph(
        "Each op's times fitted to the α–β (latency–bandwidth) model: a message of m bytes "
        "between two ranks takes α + m·β, and a collective is a known pattern of such "
        "messages. α is what every call pays however small; 1/β is the bandwidth a large "
        "message approaches. `trainscope collectives --predict --fit DIR` uses these to "
        "predict each strategy's gradient communication (docs/collectives.md)."
    )
    table = fit_table(fits)
    section.tables["cost_model"] = table
    doc.table(table)
    worst = max(fits.values(), key=lambda f: f.max_rel_error)
    section.findings.append(
        f"α–β fit: {', '.join(f'{op} α {fmt_sig(f.alpha_s * 1e6)} µs' for op, f in fits.items())}; "
        f"the worst point is {100 * worst.max_rel_error:.0f}% off ({worst.op})"
    )
