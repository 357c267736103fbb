"""Tables built from a run summary (the report's, the console's end-of-run summary).

Everything here is a pure function of the run record's dictionaries: no torch, no
training code, no file I/O.
"""

from __future__ import annotations

from typing import Any

from trainscope.analysis.cpu import cpu_rows
from trainscope.analysis.memory import MEMORY_COMPONENTS
from trainscope.records.run_dir import STAGE_LABELS, STAGES
from trainscope.records.source import (
    SCRIPT_WALL,
    is_script_record,
    other_holds,
    script_argv,
    stage_labels,
)
from trainscope.records.view import SummaryView
from trainscope.render.table import (
    MISSING,
    Table,
    cell_text,
    fmt_bytes,
    fmt_float,
    fmt_int,
    fmt_pct,
    fmt_rate,
    fmt_seconds,
    is_number,
)
from trainscope.util.numfmt import fmt_sig

# ---------------------------------------------------------------------------------------
# Tables from a summary
# ---------------------------------------------------------------------------------------


WALL_DEFINITION = (
    "Wall time runs from the start of the run (after interpreter start-up and imports) to "
    "the end of its last evaluation; the stages partition it. Process time adds the "
    "process's start-up before the run; saving the weights and the summary come after both."
)


def run_title(summary: dict[str, Any]) -> str:
    """Workload / model, and how it ran: the strategy and world size."""
    parts = [str(summary[k]) for k in ("workload", "model") if summary.get(k)]
    title = " / ".join(parts) or "run"
    if summary.get("strategy"):
        title += f" ({_strategy(summary)})"
    return title


def _strategy(summary: dict[str, Any]) -> str:
    strategy, world = summary.get("strategy"), summary.get("world_size") or 1
    if not strategy:
        return MISSING
    return f"{strategy}, {world} process{'es' if world != 1 else ''}"


def _loader(summary: dict[str, Any]) -> str:
    loader, workers = summary.get("loader"), summary.get("num_workers")
    if loader is None:
        return MISSING
    return f"{loader}, {workers} workers" if loader == "torch" else str(loader)


def _parameters(summary: dict[str, Any]) -> str:
    """Total parameters, and how many were trained where the workload froze some (LoRA)."""
    info = SummaryView(summary).section("workload_info")
    trainable, total = info.get("trainable_parameters"), info.get("total_parameters")
    if is_number(trainable) and is_number(total) and total:
        return (
            f"{fmt_int(trainable)} trainable of {fmt_int(total)} ({fmt_pct(trainable / total, 2)})"
        )
    return fmt_int(summary.get("num_parameters"))


def _process_time(summary: dict[str, Any]) -> str:
    """Process time including start-up, or why it is not this run's own."""
    proc = SummaryView(summary).process
    if not is_number(proc.get("time_s")):
        return MISSING
    before = proc.get("runs_before") or 0
    if before:
        return f"n/a (the process ran {before} run(s) before this one)"
    return f"{fmt_seconds(proc['time_s'])} (start-up {fmt_seconds(proc.get('startup_s'))})"


def _steady_rows(summary: dict[str, Any]) -> list[list[object]]:
    """Steady-state step time and throughput, the warm-up steps apart."""
    st = SummaryView(summary).steady_state
    if not st:
        return []
    k = st.get("warmup_steps")
    step = st.get("step_s") or {}
    rows: list[list[object]] = [
        ["Warm-up steps (apart)", f"{fmt_int(k)} ({fmt_seconds(st.get('warmup_time_s'))} s)"]
    ]
    if is_number(step.get("median")):
        ms = 1e3 * step["median"]
        low, high = fmt_sig(1e3 * step["low"]), fmt_sig(1e3 * step["high"])
        spread = f"{step.get('kind', 'IQR')} {low}–{high}, n={fmt_int(st.get('steps'))}"
        # The label is the same for every run (n is in the cell), so `compare` puts every
        # run's steady step time on one row.
        rows.append(["Step time, steady (ms)", f"{fmt_sig(ms)} ({spread})"])
        rows.append(["Samples/s, steady", fmt_rate(st.get("samples_per_s"))])
    elif st.get("note"):
        rows.append(["Step time, steady (ms)", cell_text(st["note"])])
    return rows


def _mfu(summary: dict[str, Any]) -> str:
    if is_number(summary.get("mfu")):
        return fmt_pct(summary["mfu"], 2)
    return f"n/a ({summary['mfu_note']})" if summary.get("mfu_note") else MISSING


def stage_table(summary: dict[str, Any]) -> Table:
    """Stage | Seconds | Share of wall time, in ``STAGES`` order, then a total row.

    Stages not in ``STAGES`` (written by a newer trainscope) follow under their raw name,
    so the rows still add up to the wall time.
    """
    view = SummaryView(summary)
    stages, wall = view.section("stages_s"), view.wall_time_s
    has_wall = wall is not None and wall > 0
    names = [s for s in STAGES if s in stages] + [s for s in stages if s not in STAGES]
    labels = stage_labels(summary, STAGE_LABELS)
    rows: list[list[object]] = []
    for name in names:
        secs = stages[name]
        share = secs / wall if has_wall and is_number(secs) else None
        rows.append([labels.get(name, name), fmt_seconds(secs), fmt_pct(share)])
    if rows or has_wall:
        rows.append(["total (wall)", fmt_seconds(wall), fmt_pct(1.0 if has_wall else None)])
    where = ", ".join(str(summary[k]) for k in ("device", "precision") if summary.get(k))
    caption = f"Where the wall time went: {run_title(summary)}"
    caption += f" ({where})." if where else "."
    caption += " 'other' is wall time minus the measured stages"
    holds = other_holds(summary)
    caption += f": for a script, {holds}." if holds else "."
    return Table(["Stage", "Seconds", "Share"], rows, caption, "tab:stages", "lrr")


def epoch_table(summary: dict[str, Any]) -> Table:
    """One row per epoch: losses, validation accuracy, duration and throughput."""
    rows: list[list[object]] = []
    for ep in SummaryView(summary).epochs:
        rows.append(
            [
                cell_text(ep.get("epoch")),
                fmt_float(ep.get("train_loss")),
                fmt_float(ep.get("val_loss")),
                fmt_pct(ep.get("val_accuracy"), 2),
                fmt_seconds(ep.get("duration_s")),
                fmt_rate(ep.get("samples_per_s")),
            ]
        )
    return Table(
        ["Epoch", "Train loss", "Val loss", "Val accuracy", "Duration (s)", "Samples/s"],
        rows,
        f"Per-epoch results: {run_title(summary)}.",
        "tab:epochs",
        "rrrrrr",
    )


def attempts_table(summary: dict[str, Any]) -> Table:
    """A resumed run's attempts: when each started, where it went on from, how it ended
    and how many steps it did again (empty for a run that never resumed)."""
    rows: list[list[object]] = []
    for a in SummaryView(summary).rows("attempts"):
        if not isinstance(a, dict):
            continue
        start = a.get("from_step") or 0
        inside = a.get("epoch_step") or 0
        where = "the beginning" if not a.get("checkpoint") else f"step {cell_text(start)}"
        if a.get("checkpoint"):
            where += f" (epoch {cell_text(a.get('from_epoch'))}"
            where += f" + {cell_text(inside)} steps)" if inside else " end)"
        rows.append(
            [
                cell_text(a.get("attempt")),
                cell_text(a.get("started_at")),
                where if a.get("attempt") != 1 else "the beginning",
                cell_text(a.get("by") or "run"),
                cell_text(a.get("ended") or "running"),
                cell_text(a.get("steps_redone") if a.get("attempt") != 1 else "–"),
            ]
        )
    return Table(
        ["Attempt", "Started (UTC)", "Went on from", "Started by", "Ended", "Steps redone"],
        rows,
        f"Attempts: {run_title(summary)}. Each resume goes on from the last complete "
        "checkpoint; steps an attempt took after it are done again and counted once.",
        "tab:attempts",
        "rlllll",
    )


def _class_key(name: str) -> tuple[int, float | str]:
    # Classes "0".."9" sort numerically ("10" after "9"), names alphabetically after them.
    try:
        return (0, float(name))
    except ValueError:
        return (1, name)


def per_class_table(summary: dict[str, Any]) -> Table:
    """Class | test accuracy, classes in numeric order where they are numbers."""
    per_class = SummaryView(summary).section("per_class_accuracy")
    rows: list[list[object]] = [
        [str(k), fmt_pct(per_class[k], 2)] for k in sorted(per_class, key=_class_key)
    ]
    return Table(
        ["Class", "Accuracy"],
        rows,
        f"Per-class test accuracy: {run_title(summary)}.",
        "tab:per-class",
        "lr",
    )


def _env_get(env: dict[str, Any], *names: str) -> Any:
    for name in names:
        if env.get(name) not in (None, ""):
            return env[name]
    return None


# The components of a run's ``memory`` section, in the order they are shown.
def _memory_rows(summary: dict[str, Any]) -> list[list[object]]:
    """Overview rows of the counted memory (tensor bytes), where the run has them."""
    mem = SummaryView(summary).memory
    if not isinstance(mem.get("parameters_bytes"), int):
        return []
    rows: list[list[object]] = [
        [f"Memory: {label}", fmt_bytes(mem.get(key))] for key, label in MEMORY_COMPONENTS
    ]
    policy = (mem.get("checkpointing") or {}).get("policy")
    if policy and policy != "none":
        rows.append(["Activation checkpointing", cell_text(policy)])
    return rows


SCHEDULER_NAMES = {"slurm": "SLURM", "pytorchjob": "PyTorchJob", "torchrun": "torchrun"}


def _scheduler_rows(sched: Any) -> list[list[object]]:
    """Who placed the ranks (SLURM, a PyTorchJob, torchrun), where the run has it."""
    if not isinstance(sched, dict) or not sched.get("name"):
        return []
    name = str(sched["name"])
    text = SCHEDULER_NAMES.get(name, name)
    if sched.get("job_id"):
        text += f" job {sched['job_id']}"
    tasks, nnodes = sched.get("tasks"), sched.get("nnodes")
    if is_number(tasks) and is_number(nnodes):
        text += f": {int(tasks)} task(s) on {int(nnodes)} node(s)"
    nodes = [str(n) for n in sched.get("nodes") or []]
    if nodes:
        more = f" and {int(nnodes) - 3} more" if is_number(nnodes) and nnodes > 3 else ""
        text += f" ({', '.join(nodes[:3])}{more})"
    return [["Scheduler", cell_text(text)]]


def _optimizer_rows(opt: Any) -> list[list[object]]:
    """Muon's and AdamW's shares of a muon run's parameters, where the run has them."""
    if not isinstance(opt, dict) or opt.get("name") != "muon":
        return []
    parts = []
    for key, label in (("muon", "Muon"), ("adamw", "AdamW")):
        share = opt.get(key) if isinstance(opt.get(key), dict) else {}
        parts.append(f"{label} on {fmt_int(share.get('tensors'))} tensors "
                     f"({fmt_int(share.get('parameters'))} parameters, lr "
                     f"{fmt_float(share.get('lr'))})")  # fmt: skip
    muon = opt.get("muon") if isinstance(opt.get("muon"), dict) else {}
    if muon.get("newton_schulz"):
        steps = muon.get("newton_schulz_steps")
        times = f", {fmt_int(steps)} iterations" if isinstance(steps, int) else ""
        parts.append(f"Newton-Schulz in {cell_text(muon['newton_schulz'])}{times}")
    return [["Optimizer", "; ".join(parts)]]


def _target_rows(target: Any) -> list[list[object]]:
    """The stop rule's outcome: when the target was met (training and process time), or
    that it was not and the best figure reached; a time limit that ended the run."""
    if not isinstance(target, dict):
        return []
    text = cell_text(target.get("target"))
    best = target.get("best") if isinstance(target.get("best"), dict) else {}
    if target.get("reached") is True:
        proc = target.get("process_time_s")
        since = (
            f", {fmt_seconds(proc)} s since the process started" if is_number(proc)
            else " (process time: not this run's own)"
        )  # fmt: skip
        value = (f"{text} met at step {fmt_int(target.get('step'))} "
                 f"({fmt_float(target.get('value'))}) after "
                 f"{fmt_seconds(target.get('train_time_s'))} s of training{since}")  # fmt: skip
    elif target.get("reached") is False:
        why = (
            "within the time limit of " + fmt_seconds(target.get("time_limit_s")) + " s"
            if target.get("stopped_by") == "time_limit"
            else "by the end of training"
        )
        value = (f"{text} not met {why}: best {fmt_float(best.get('value'))} at step "
                 f"{fmt_int(best.get('step'))}")  # fmt: skip
    elif target.get("stopped_by") == "time_limit":
        return [["Time limit", f"reached: {fmt_seconds(target.get('time_limit_s'))} s of training"]]
    else:
        return []
    every = target.get("eval_every_steps")
    if is_number(every):
        value += f"; evaluated every {fmt_int(every)} steps"
    return [["Target", value]]


# Rows a script run has no figure for: it has no test split, no epochs trainscope counted,
# no steps a GradScaler skipped that trainscope saw.
_NOT_FOR_SCRIPTS = {
    "Test accuracy", "Test loss", "Val loss (last epoch)", "Val accuracy (last epoch)",
    "Epochs", "Skipped steps",
}  # fmt: skip


def _script_rows(summary: dict[str, Any], rows: list[list[object]]) -> list[list[object]]:
    """A script run's overview: what ran and its optimizers' steps, without the rows of
    figures only trainscope's own loop has."""
    kept = [r for r in rows if r[0] not in _NOT_FOR_SCRIPTS]
    script = SummaryView(summary).script
    counts = script.get("optimizer_steps")
    steps = ", ".join(f"{cell_text(k)} {fmt_int(v)}" for k, v in counts.items()) if isinstance(
        counts, dict) else MISSING  # fmt: skip
    injected = _injected(summary)
    return [[kept[0][0], kept[0][1]], ["Script", cell_text(script_argv(summary))],
            *([["Injected", injected]] if injected else []),
            *kept[1:], ["Optimizer steps", steps or MISSING]]  # fmt: skip


def _injected(summary: dict[str, Any]) -> str | None:
    """``--inject``'s settings as ``key=value``, those that change numerics marked."""
    source = SummaryView(summary).source
    given = source.get("injected")
    if not isinstance(given, dict) or not given:
        return None
    numerics = source.get("injected_numerics") or []
    words = []
    for key, value in given.items():
        text = str(value).lower() if isinstance(value, bool) else str(value)
        mark = " (changes numerics)" if isinstance(numerics, list) and key in numerics else ""
        words.append(f"{key}={text}{mark}")
    return ", ".join(words)


def overview_table(summary: dict[str, Any], env: dict[str, Any] | None = None) -> Table:
    """Key facts of one run as Field | Value rows; missing values show as an en dash.

    Everything the record measured is here: the console summary, the run report and
    ``compare`` all show these rows, so no figure is recorded and then never shown.
    """
    env = env or {}
    view = SummaryView(summary)
    device = summary.get("device") or env.get("device")
    device_name = summary.get("device_name") or env.get("device_name")
    if device and device_name and device_name != device:
        device = f"{device} ({device_name})"
    peak = fmt_bytes(view.peak_memory_bytes)
    if peak != MISSING and summary.get("peak_memory_kind"):
        peak += f" ({summary['peak_memory_kind']})"
    status = summary.get("status")
    last = (view.epochs or [{}])[-1]
    rows: list[list[object]] = [
        ["Status", cell_text(status)],
        ["Workload", cell_text(summary.get("workload"))],
        ["Model", cell_text(summary.get("model"))],
        ["Parameters", _parameters(summary)],
        ["Strategy", _strategy(summary)],
        ["Device", cell_text(device)],
        ["Precision", cell_text(summary.get("precision"))],
        ["Loader", _loader(summary)],
        ["Test accuracy", fmt_pct(view.number("test_accuracy"), 2)],
        ["Test loss", fmt_float(summary.get("test_loss"))],
        ["Val loss (last epoch)", fmt_float(last.get("val_loss"))],
        ["Val accuracy (last epoch)", fmt_pct(last.get("val_accuracy"), 2)],
        ["Process time (s)", _process_time(summary)],
        ["Wall time (s)", fmt_seconds(view.wall_time_s)],
        ["Train time (s)", fmt_seconds(view.train_time_s)],
        ["Epochs", str(len(view.epochs))],
        ["Steps", fmt_int(summary.get("steps"))],
        ["Batch size", fmt_int(summary.get("batch_size"))],
        ["Samples/s", fmt_rate(view.samples_per_s)],
        *_steady_rows(summary),
        ["MFU", _mfu(summary)],
        ["Peak memory", peak],
        *_memory_rows(summary),
        ["Skipped steps", fmt_int(summary.get("skipped_steps"))],
        ["Timing mode", cell_text(summary.get("timing_mode"))],
        ["torch", cell_text(_env_get(env, "torch", "torch_version"))],
    ]
    rows += _provenance_rows(env)
    rows += _where_they_apply(summary, last)  # several processes, a sequence workload...
    wall = WALL_DEFINITION
    if is_script_record(summary):
        rows, wall = _script_rows(summary, rows), SCRIPT_WALL
    return Table(
        ["Field", "Value"],
        rows,
        f"Run overview: {run_title(summary)}. {wall} Memory in binary units "
        "(1 MiB = 1024 x 1024 bytes).",
        "tab:overview",
        "ll",
    )


def _provenance_rows(env: dict[str, Any]) -> list[list[object]]:
    """Provenance that only some runs have: shown when present, not as rows of dashes."""
    optional = [
        ("CUDA", _env_get(env, "cuda", "cuda_version")),
        ("Python", _env_get(env, "python", "python_version")),
        ("git", _env_get(env, "git_sha")),
    ]
    return [[k, str(v)] for k, v in optional if v is not None]


def _where_they_apply(summary: dict[str, Any], last: dict[str, Any]) -> list[list[object]]:
    """Overview rows of figures only some runs have (several processes, a sequence or
    regression workload, a scheduler, muon, a stop rule): none where they do not apply."""
    view = SummaryView(summary)
    rows: list[list[object]] = []
    if summary.get("peak_memory_bytes_max_rank") is not None:
        rows.append(["Peak memory, largest rank", fmt_bytes(summary["peak_memory_bytes_max_rank"])])
    if (tokens := view.number("tokens_per_s")) is not None:
        rows.append(["Tokens/s", fmt_rate(tokens)])
    test_metrics = view.section("test_metrics")
    for key, label in (("mse", "Test MSE"), ("mae", "Test MAE"), ("r2", "Test R^2")):
        if is_number(test_metrics.get(key)):  # a regression workload's figures
            rows.append([label, fmt_float(test_metrics[key])])
    if is_number(last.get("perplexity")):
        rows.append(["Val perplexity (last epoch)", fmt_float(last["perplexity"])])
    system = view.section("system")
    if is_number(system.get("cpu_percent_mean")):
        rows.append(["CPU use (mean)", f"{system['cpu_percent_mean']:.0f}%"])
    rows += cpu_rows(summary)  # threads, other load, oversubscribed or not
    rows += _scheduler_rows(view.section("scheduler"))
    rows += _optimizer_rows(view.section("optimizer"))
    rows += _target_rows(view.target)
    return rows
