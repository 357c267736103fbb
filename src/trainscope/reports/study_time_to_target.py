"""Sections of the time-to-target study's report: the search (one seed per candidate),
the finals (time to target over new seeds: median, spread, n), the target metric against
wall time per finalist, and the winning command line."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from trainscope.analysis.stats import SPREAD_NOTE, fmt_spread
from trainscope.records.run_dir import RunRecord
from trainscope.records.study_dir import PlannedRun, StudyRecord
from trainscope.render.document import Document, escape_inline
from trainscope.render.plots import new_figure
from trainscope.render.study_plots import write_figure
from trainscope.render.table import Table, fmt_float
from trainscope.reports.section import Section
from trainscope.util.load import load_of, loaded, not_a_finding
from trainscope.util.spread import Spread, differ, spread
from trainscope.util.textsafe import plot_text

DEFAULT = "default"  # studies.time_to_target.DEFAULT (reports do not import studies)


def _target(rec: RunRecord | None) -> dict[str, Any]:
    return rec.view.target if rec is not None else {}


def _outcome_text(rec: RunRecord | None, planned: PlannedRun) -> str:
    """A search run's outcome in words."""
    if not planned.applicable:
        return f"not applicable: {planned.reason}"
    if rec is None:
        return "no record"
    if rec.view.status != "completed":
        return f"{rec.summary.get('status')}: {rec.summary.get('error') or 'no error text'}"
    if loaded(rec.summary):
        return f"measured under other load ({load_of([rec.summary])} busy): " + _met(rec)
    return _met(rec)


def _met(rec: RunRecord) -> str:
    t = _target(rec)
    if t.get("reached"):
        proc = t.get("process_time_s")
        after = f", {fmt_float(proc, 1)} s of process time" if proc is not None else ""
        train = fmt_float(t.get("train_time_s"), 1)
        return f"met at step {t.get('step')}: {train} s of training{after}"
    best = t.get("best") or {}
    why = (f"within {fmt_float(t.get('time_limit_s'), 0)} s of training"
           if t.get("stopped_by") == "time_limit"
           else f"by the end of training ({rec.summary.get('steps')} steps)")  # fmt: skip
    return (f"not met {why}: best {fmt_float(best.get('value'), 4)} at step "
            f"{best.get('step')}")  # fmt: skip


def search_table(study: StudyRecord) -> Table:
    """One row per search candidate, in the order they were tried."""
    rows = []
    for r in study.plan.runs:
        if r.group != "search" or r.warmup:
            continue
        rec = study.records.get(r.id)
        rows.append([r.config, r.labels.get("flags") or "(the study's settings)",
                     str(r.labels.get("seed")), _outcome_text(rec, r)])  # fmt: skip
    return Table(
        ["Candidate", "Flags", "Seed", "Outcome"], rows,
        "The search: each candidate once, on one seed, in the order tried; it only "
        "chooses the finalists (one seed proves nothing). Training time excludes setup, "
        "compilation and evaluation; process time runs from the interpreter's start to "
        "the end of the evaluation that met the target.",
        "tab:ttt-search", "llrl",
    )  # fmt: skip


def final_stats(study: StudyRecord) -> dict[str, dict[str, Any]]:
    """Per finalist: its runs, how many met the target, and the spreads of the training
    and process times of those that did (never extrapolated for those that did not)."""
    out: dict[str, dict[str, Any]] = {}
    for r in study.plan.runs:
        if r.group != "final":
            continue
        entry = out.setdefault(r.config, {"flags": r.labels.get("flags"), "runs": [],
                                          "loaded": []})  # fmt: skip
        rec = study.completed(r)
        if rec is not None:  # a seed measured under other load is evidence of nothing
            entry["loaded" if loaded(rec.summary) else "runs"].append(rec)
        entry["planned"] = entry.get("planned", 0) + 1
    for entry in out.values():
        met = [_target(rec) for rec in entry["runs"] if _target(rec).get("reached")]
        entry["met"] = len(met)
        entry["train"] = spread(t.get("train_time_s") for t in met)
        entry["process"] = spread(t.get("process_time_s") for t in met)
        entry["best"] = spread((_target(rec).get("best") or {}).get("value")
                               for rec in entry["runs"])  # fmt: skip
    return out


def _met_text(entry: dict[str, Any]) -> str:
    done = len(entry["runs"]) + len(entry["loaded"])
    notes = [f"{entry['planned'] - done} did not complete"] if entry["planned"] > done else []
    if entry["loaded"]:
        notes.append(f"{len(entry['loaded'])} measured under other load, left out")
    return f"{entry['met']} of {len(entry['runs'])}" + (f" ({'; '.join(notes)})" if notes else "")


def finals_table(stats: dict[str, dict[str, Any]]) -> Table:
    """One row per finalist: seeds that met the target, time to it, the best figure."""
    rows = []
    for name, e in stats.items():
        all_met = e["met"] == len(e["runs"]) and e["runs"]
        mark = "" if all_met else " (of those that met it)"
        rows.append([name, e["flags"] or "(the study's settings)", _met_text(e),
                     fmt_spread(e["train"]) + (mark if e["met"] else ""),
                     fmt_spread(e["process"]) + (mark if e["met"] else ""),
                     fmt_spread(e["best"], lambda x: fmt_float(x, 4))])  # fmt: skip
    return Table(
        ["Recipe", "Flags", "Met the target", "Training time to target (s)",
         "Process time to target (s)", "Best figure"], rows,
        f"The finals: each finalist on new seeds (the search's run is not counted); "
        f"{SPREAD_NOTE}. A seed that did not meet the target within the time limit is "
        "counted as such and given no time.",
        "tab:ttt-finals", "llrrrr",
    )  # fmt: skip


def findings(stats: dict[str, dict[str, Any]]) -> tuple[str | None, list[str]]:
    """The winner (the fastest median training time among recipes every seed of which met
    the target) and sentences against ``default``, claiming only beyond the noise."""
    blind = [not_a_finding(f"all {len(e['loaded'])} seed(s) of {n}",
                           [r.summary for r in e["loaded"]])
             for n, e in stats.items() if e["loaded"] and not e["runs"]]  # fmt: skip
    full = {n: e for n, e in stats.items() if e["runs"] and e["met"] == len(e["runs"])}
    if not full:
        return None, [*blind, "No finalist met the target on every seed within the time "
                      "limit" + (" measured without other load." if blind else ".")]  # fmt: skip
    if blind:  # no winner among the rest: the loaded recipe might have been faster
        return None, [*blind, "No winner is named: a finalist measured only under load "
                      "might have been the fastest."]  # fmt: skip
    winner = min(full, key=lambda n: full[n]["train"].median or float("inf"))
    out = [f"Fastest to the target: {winner}, median {fmt_float(full[winner]['train'].median, 1)} "
           f"s of training over {full[winner]['train'].n} seeds."]  # fmt: skip
    ref = stats.get(DEFAULT)
    if winner != DEFAULT and ref is not None:
        out.append(_against_default(winner, full[winner], ref))
    return winner, out


def _against_default(name: str, entry: dict[str, Any], ref: dict[str, Any]) -> str:
    """The winner against the starting recipe, in training and process time."""
    if ref["met"] < len(ref["runs"]) or not ref["runs"]:
        return (f"default met the target on {_met_text(ref)} seeds: {name} did on every "
                "seed; no time ratio is given for seeds that never met it.")  # fmt: skip
    parts = []
    for key, what in (("train", "training time"), ("process", "process time")):
        a, b = entry[key], ref[key]
        parts.append(_ratio(a, b, what))
    return f"{name} against default: " + "; ".join(parts) + "."


def _ratio(a: Spread, b: Spread, what: str) -> str:
    if a.median is None or b.median is None:
        return f"{what}: not measured"
    both = f"{fmt_float(a.median, 1)} s vs {fmt_float(b.median, 1)} s, n={a.n} and {b.n}"
    if differ(a, b):
        return f"{what} {b.median / a.median:.2f}x shorter ({both})"
    return f"{what} within the noise (spreads overlap; {both})"


def _curve(rec: RunRecord, split: str, figure: str) -> tuple[list[float], list[float]]:
    """(seconds since the process started, or on the run's clock; the target's figure)
    at each evaluation of the run."""
    process = rec.view.process
    start, own = process.get("startup_s"), not process.get("runs_before")
    offset = float(start) if own and isinstance(start, (int, float)) else 0.0
    xs, ys = [], []
    for e in rec.events("eval"):
        t, value = e.get("t"), e.get(figure)
        if (
            e.get("split") == split
            and isinstance(t, (int, float))
            and isinstance(value, (int, float))
        ):
            xs.append(offset + t + float(e.get("seconds") or 0.0))
            ys.append(float(value))
    return xs, ys


def curves_figure(study: StudyRecord, stats: dict[str, dict[str, Any]], doc: Document,
                  plots: Path) -> None:  # fmt: skip
    """The target's figure against wall time, one colour per finalist, one line per seed."""
    target = str(study.plan.options.get("target") or "")
    metric = next((m for m in ("val_", "test_") if target.startswith(m)), None)
    if metric is None:
        return
    split, rest = metric[:-1], target[len(metric) :]
    figure = rest.split("<")[0].split(">")[0]
    try:
        threshold = float(rest[len(figure) :].lstrip("<>="))
    except ValueError:
        threshold = None
    fig = new_figure(7.0, 4.2)
    ax = fig.add_subplot()
    for i, (name, e) in enumerate(stats.items()):
        for j, rec in enumerate(e["runs"]):
            xs, ys = _curve(rec, split, figure)
            ax.plot(xs, ys, color=f"C{i % 10}", alpha=0.8, lw=1.2,
                    label=plot_text(name) if j == 0 else None)  # fmt: skip
    if threshold is not None:
        ax.axhline(threshold, color="black", ls="--", lw=1, label=plot_text(f"target {target}"))
    ax.set_xlabel("wall time since the process started (s)")
    ax.set_ylabel(plot_text(f"{split} {figure}"))
    ax.set_title(plot_text(f"{split} {figure} against wall time, every finalist seed"))
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    files = write_figure(fig, plots / "time_to_target.png")
    doc.figure(
        files[0],
        f"{split} {figure} against wall time per finalist",
        "The target's figure at every evaluation against wall time since the process "
        "started (imports, setup and evaluations included), one line per seed.",
    )


def time_to_target_sections(study: StudyRecord, doc: Document, plots: Path) -> Section:
    """The search, the finals and their findings, the curves, the winning command."""
    section = Section()
    opts, train = study.plan.options, study.plan.base_config.get("train") or {}
    doc.heading("Time to target", 2)
    doc.paragraph(escape_inline(
        f"Target {opts.get('target')}: each run trains until an evaluation meets it (every "
        f"{train.get('eval_every_steps')} steps unless a recipe's flags say otherwise, and "
        "at the end of each epoch, on the same fixed evaluation batches) or until "
        f"{fmt_float(train.get('time_limit_s'), 0)} s of training. Search: "
        f"{opts.get('search')}; finals: {opts.get('repeats')} new seeds per finalist."
    ))  # fmt: skip
    section.add_table(doc, "search", search_table(study))
    stats = final_stats(study)
    if not stats:
        doc.note("The finals have not run yet: rerun the same command to continue the study.")
        return section
    section.add_table(doc, "finals", finals_table(stats))
    winner, texts = findings(stats)
    for text in texts:
        section.findings.append(text)
        doc.paragraph(escape_inline(text))
    curves_figure(study, stats, doc, plots)
    if winner is not None:
        _winning_command(study, winner, stats[winner], doc)
    return section


def _winning_command(study: StudyRecord, name: str, entry: dict[str, Any], doc: Document) -> None:
    """The winner's flags on top of the study's settings, and a command that reruns one
    of its runs exactly (its own config.yaml)."""
    rec = entry["runs"][0]
    doc.paragraph(escape_inline(
        f"Winning recipe: {name} ({entry['flags'] or 'the study settings as they were'}). "
        "To train with it, give these flags with the study's run flags, or rerun one of "
        "its runs exactly from its saved config:"
    ))  # fmt: skip
    config = rec.path / "config.yaml"
    doc.code(f"trainscope run --config {shlex.quote(str(config))} --out runs/{shlex.quote(name)}")


__all__ = ["final_stats", "findings", "time_to_target_sections"]
