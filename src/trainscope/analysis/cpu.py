"""How a run shared the CPU, as report rows and a warning (torch-free).

Reads the ``cpu`` section a run records (``trainscope.runtime.threads``): the intra-op
threads per process, the cores it could use, the load others put on them, and whether
the two together oversubscribed the CPU. Records written before the section existed
simply show nothing.
"""

from __future__ import annotations

from typing import Any

from trainscope.records.view import SummaryView
from trainscope.util.load import LOADED_OTHER_CORES, load_of, not_a_finding
from trainscope.util.load import loaded as is_loaded
from trainscope.util.numfmt import cores_text


def _num(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and x == x


def cpu_section(summary: dict[str, Any]) -> dict[str, Any]:
    """The run's ``cpu`` section, or {} when it has none (or a damaged one)."""
    return SummaryView(summary).cpu


def threads_text(cpu: dict[str, Any]) -> str | None:
    """``2 x 1 process on 2 cores`` (threads per process x processes on the node)."""
    threads, procs, cores = (cpu.get(k) for k in ("threads", "processes_on_node", "cores"))
    if not (_num(threads) and _num(procs) and _num(cores)):
        return None
    return f"{threads:g} x {procs:g} process{'es' * (procs != 1)} on {cores_text(cores)}"


def cpu_rows(summary: dict[str, Any]) -> list[list[object]]:
    """Overview rows: threads (and why that many), other load, and the verdict."""
    cpu = cpu_section(summary)
    text = threads_text(cpu)
    if text is None:
        return []
    source = cpu.get("threads_source")
    rows: list[list[object]] = [
        ["CPU threads", f"{text} ({source})" if isinstance(source, str) else text]
    ]
    if _num(cpu.get("other_cores")):
        text = f"{cpu['other_cores']:.1f}"
        sampled = cpu.get("other_cores_sampled")
        if isinstance(sampled, dict) and _num(sampled.get("min")) and _num(sampled.get("max")):
            text += f" (samples: {sampled['min']:.1f}–{sampled['max']:.1f})"
        if _num(cpu.get("other_cores_at_start")):
            text += f"; {cpu['other_cores_at_start']:.1f} at start"
        rows.append(["Other load (cores busy)", text])
    if isinstance(cpu.get("oversubscribed"), bool):
        rows.append(["CPU oversubscribed", "yes" if cpu["oversubscribed"] else "no"])
    return rows


def oversubscribed_note(summary: dict[str, Any]) -> str | None:
    """The run's one-sentence warning when its CPU was oversubscribed, else None."""
    cpu = cpu_section(summary)
    if cpu.get("oversubscribed") is not True:
        return None
    note = cpu.get("note")
    return note if isinstance(note, str) else "CPU oversubscribed while this run ran"


def load_change_note(summary: dict[str, Any]) -> str | None:
    """The run's sentence when the other load changed while it ran, else None."""
    note = cpu_section(summary).get("load_change")
    return note if isinstance(note, str) and note else None


def budget_kept(labels: dict[str, Any]) -> bool:
    """False for a study configuration planned without the study's core budget (its
    processes do not divide it); older plans, which had no budget, count as kept."""
    return labels.get("budget_kept") is not False


def study_cpu_lines(study: Any) -> list[str]:
    """Plain-text lines for a study's header: the core budget every configuration shared,
    the configurations that could not keep it, and the runs whose CPU was oversubscribed
    (``study`` is a :class:`~trainscope.records.study_dir.StudyRecord`)."""
    lines: list[str] = []
    budget = study.plan.options.get("core_budget")
    if _num(budget):
        lines.append(
            f"Core budget: {cores_text(budget)} per configuration, shared out as intra-op "
            "threads x processes and set explicitly for every run, so that timings compare "
            "like with like (--threads sets it; auto: the cores this machine lets a process use)."
        )
    missed = [
        f"{c.config} ({c.labels.get('threads')} x {c.labels.get('processes')})"
        for c in study.configs()
        if c.applicable and not budget_kept(c.labels)
    ]
    if missed:
        lines.append(
            "Not within the core budget, so compared in no finding: " + ", ".join(missed) + "."
        )
    crowded = [
        r.id
        for r in study.plan.runs
        if (rec := study.completed(r)) is not None and oversubscribed_note(rec.summary)
    ]
    if crowded:
        more = f" and {len(crowded) - 8} more" if len(crowded) > 8 else ""
        shown = ", ".join(crowded[:8]) + more
        lines.append(
            f"CPU oversubscribed during {len(crowded)} run(s) ({shown}): other processes kept "
            "cores busy, or threads x processes exceeded the cores; their timings carry thread "
            "contention. Rerun on a quiet machine before trusting a small difference."
        )
    return lines


def study_load_lines(study: Any) -> list[str]:
    """Plain-text lines for a study's header: the repeats measured under other load (left
    out of every comparison), and what re-measuring them did."""
    lines: list[str] = []
    loaded = [
        (r.id, rec.summary)
        for r in study.plan.runs
        if not r.warmup and (rec := study.completed(r)) is not None and is_loaded(rec.summary)
    ]
    kept = study.meta.get("remeasure") if isinstance(study.meta.get("remeasure"), dict) else {}
    tried = kept.get("attempts") if isinstance(kept.get("attempts"), dict) else {}
    bound = kept.get("bound") if isinstance(kept.get("bound"), dict) else {}
    if tried:
        recovered = len([k for k in tried if k not in (kept.get("still_loaded") or [])])
        lines.append(
            f"Re-measured under other load: {len(tried)} repeat(s) ran again (at most "
            f"{bound.get('attempts', '?')} more runs each, {bound.get('seconds', '?')} s in "
            f"all{'; ran out of time' if kept.get('out_of_time') else ''}); {recovered} "
            "then ran without other load."
        )
    if loaded:
        shown = ", ".join(f"{rid} ({load_of([s])})" for rid, s in loaded[:8])
        more = f" and {len(loaded) - 8} more" if len(loaded) > 8 else ""
        lines.append(
            f"Measured under other load, so left out of every comparison: {shown}{more} "
            f"(a repeat counts as loaded from {LOADED_OTHER_CORES:g} cores kept busy by "
            "other processes, or when its threads and the other load did not fit on the "
            "cores)."
        )
    return lines


def load_findings(study: Any) -> list[str]:
    """A "not a finding" sentence for each configuration whose every repeat was measured
    under other load: it has no figure any comparison may use."""
    out = []
    for c in study.configs():
        every = study.loaded(c.config)
        if every and not study.measured(c.config):
            what = f"all {len(every)} repeat(s) of {c.config}"
            out.append(not_a_finding(what, [r.summary for r in every]))
    return out


def threads_per_process(labels: dict[str, Any], records: list[Any]) -> str:
    """A study table's threads cell: what the runs recorded (their ``cpu`` section, else
    env.json), ``*`` marking a configuration outside the study's core budget."""
    seen = {cpu_section(r.summary).get("threads") for r in records}
    seen.discard(None)
    if not seen:
        seen = {r.env.get("torch_num_threads") for r in records} - {None}
    text = "/".join(str(t) for t in sorted(seen, key=str)) if seen else "?"
    return text if budget_kept(labels) else text + "*"
