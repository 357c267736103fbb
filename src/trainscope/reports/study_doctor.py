"""The doctor study's report (``trainscope doctor RUN_DIR --apply``): each fix against the
baseline, step time and memory with their spread and n, called better only beyond the
noise, and the best proven command line (torch-free)."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from trainscope.analysis.cpu import load_findings
from trainscope.analysis.stats import fmt_spread, step_losses, step_ms
from trainscope.injections import as_arguments
from trainscope.records.jsonio import try_json_object
from trainscope.records.run_dir import RunRecord
from trainscope.records.study_dir import StudyRecord
from trainscope.records.view import SummaryView
from trainscope.render.document import Document, escape_inline, inline_code
from trainscope.render.table import MISSING, Table, fmt_bytes
from trainscope.reports.section import Section, each_config
from trainscope.util.spread import Spread, differ, no_difference_text, spread

BASELINE = "baseline"  # the name studies.doctor gives the run as it was


def _loss(record: RunRecord) -> float | None:
    """The run's last training loss: its last epoch's, or (a script's run, which has no
    epochs) the last step record's."""
    epochs = record.view.epochs
    loss = epochs[-1].get("train_loss") if epochs else None
    if loss is None:
        _, losses = step_losses(record)
        loss = losses[-1] if losses else None
    return loss if isinstance(loss, (int, float)) else None


MEASURES = ("step", "wall", "memory", "sample")
"""What a fix saves: steady-state step time (ms), the run's wall time (s), the tensor
bytes a step holds (the memory probe's count: exact, the same on every repeat), or the
step time per sample (a fix that changes the batch size)."""
_BETTER = {"step": ("faster", "slower"), "wall": ("faster", "slower"),
           "memory": ("less memory", "more memory"), "sample": ("faster", "slower")}  # fmt: skip


def verdict(step: Spread, base: Spread, measure: str = "step") -> str:
    """Better or worse than the baseline beyond the noise (the studies' rule), or not."""
    if not step.ok or not base.ok:
        return "not measured"
    if differ(step, base):
        better, worse = _BETTER.get(measure, _BETTER["step"])
        ratio = base.median / step.median if step.median else float("inf")
        return f"{ratio:.2f}x {better}" if ratio > 1 else f"{1 / ratio:.2f}x {worse}"
    return no_difference_text(step, base)


def _number(value: Any) -> float | None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    return float(value) if ok else None


def _counted_bytes(summary: dict[str, Any]) -> float | None:
    return _number(SummaryView(summary).memory.get("total_bytes"))


def _per_sample_ms(summary: dict[str, Any]) -> float | None:
    step, batch = step_ms(summary), SummaryView(summary).local_batch_size
    return step / batch if step is not None and batch is not None and batch > 0 else None


def measured(c: Any) -> str:
    """What a configuration's fix saves: ``step``, ``wall``, ``memory`` or ``sample``."""
    m = c.planned.labels.get("measure")
    return m if m in MEASURES else "step"


def baseline_key(measure: str) -> str:
    """The name of the baseline's figure on ``measure``."""
    return BASELINE if measure == "step" else f"{BASELINE}/{measure}"


def doctor_rows(study: StudyRecord) -> tuple[list[list[object]], dict[str, Spread]]:
    """One row per configuration, and each one's figure on what its fix saves (step ms,
    wall s or counted bytes; the baseline's under ``baseline``, ``baseline/wall`` and
    ``baseline/memory``)."""
    configs = each_config(study, "")
    read = {"step": step_ms, "wall": lambda s: SummaryView(s).wall_time_s,
            "memory": _counted_bytes, "sample": _per_sample_ms}  # fmt: skip
    fig = {m: {c.name: spread(read[m](r.summary) for r in c.runs) for c in configs}
           for m in MEASURES}  # fmt: skip
    judged = {c.name: fig[measured(c)][c.name] for c in configs}
    for m in MEASURES:
        judged[baseline_key(m)] = fig[m].get(BASELINE, spread([]))
    rows: list[list[object]] = []
    for c in configs:
        loss = spread(_loss(r) for r in c.runs)
        m = measured(c)
        vs = "–" if c.name == BASELINE else verdict(fig[m][c.name], judged[baseline_key(m)], m)
        counted = fig["memory"][c.name]
        rows.append([
            c.name, str(c.planned.labels.get("fix", "")), fmt_spread(fig["step"][c.name]),
            fmt_spread(fig["wall"][c.name]), f"{vs} ({m})" if c.name != BASELINE else vs,
            fmt_bytes(counted.median) if counted.ok else MISSING,
            f"{loss.median:.4g}" if loss.ok else MISSING,
            "yes" if c.planned.labels.get("numerics") else "no",
        ])  # fmt: skip
    return rows, judged


def best_proven(study: StudyRecord, figures: dict[str, Spread]) -> str | None:
    """The configuration with the largest proven saving (each judged on what its fix
    saves, against the baseline's same figure), or None where none is proven."""
    ratios: dict[str, float] = {}
    for c in each_config(study, ""):
        base, sp = figures.get(baseline_key(measured(c))), figures.get(c.name)
        if c.name == BASELINE or base is None or sp is None or not (sp.ok and base.ok):
            continue
        if differ(sp, base) and sp.median < base.median:
            ratios[c.name] = base.median / sp.median if sp.median else float("inf")
    return max(ratios, key=lambda n: ratios[n]) if ratios else None


def _command(study: StudyRecord, name: str) -> str:
    """The run's own command line with the configuration's fix flags (for a script's
    run, the same script re-profiled with the fix injected, from the folder it ran in)."""
    run_dir = Path(str(study.plan.options.get("run_dir", "RUN_DIR")))
    cfg = next(c for c in study.configs() if c.config == name)
    spec = study.plan.base_config.get("script")
    if isinstance(spec, dict):
        return _script_command(spec, cfg.overrides, run_dir.parent / f"{run_dir.name}-{name}")
    flags = cfg.labels.get("flags")
    flags = [str(x) for x in flags] if isinstance(flags, list) else []
    return shlex.join(["trainscope", "run", "--config", str(run_dir / "config.yaml"), *flags])


def _script_command(spec: dict[str, Any], overrides: dict[str, Any], out: Path) -> str:
    """``cd DIR && trainscope profile --out OUT [--threads N] --inject ... -- COMMAND``."""
    inject = dict(spec.get("inject") or {})
    for key, value in overrides.items():
        if key.startswith("script.inject."):
            inject[key.removeprefix("script.inject.")] = value
    threads = spec.get("threads")
    words = [str(a) for a in spec.get("argv") or []]
    if words and words[0].startswith("-m "):
        words = ["-m", words[0][3:], *words[1:]]
    line = shlex.join(["trainscope", "profile", "--out", str(out),
                       *(["--threads", str(threads)] if threads else []),
                       *as_arguments(inject), "--", *words])  # fmt: skip
    cwd = spec.get("cwd")
    return f"cd {shlex.quote(str(cwd))} && {line}" if isinstance(cwd, str) and cwd else line


def doctor_sections(study: StudyRecord, doc: Document, plots: Path) -> Section:
    """Before/after per fix, and the recommendation."""
    section = Section()
    options = study.plan.options
    doc.heading("The doctor's fixes, re-measured", 2)
    doc.paragraph(
        f"Run {inline_code(str(options.get('run_dir')))}: the baseline and each fix for "
        f"{escape_inline(str(options.get('steps')))} steps, repeats alternated. Step time is "
        "the steady-state median of each run, wall time the whole run's; each fix is judged "
        "on what it saves (step: the loop; wall: evaluation, checkpoints, compile; memory: "
        "the tensor bytes a step holds, counted on the probe step; sample: step time per "
        "sample, for a larger batch), and is called better "
        "only where its spread and the baseline's do not overlap. Fixes that "
        "change numerics show the training loss over the same steps beside the baseline's."
    )
    rows, steps = doctor_rows(study)
    table = Table(
        ["configuration", "fix", "step (ms)", "wall (s)", "vs baseline", "counted memory",
         "train loss", "changes numerics"],
        rows, caption="Each fix against the baseline", label="tab:doctor",
    )  # fmt: skip
    section.add_table(doc, "doctor", table)
    best = best_proven(study, steps)
    lost = load_findings(study)
    if best is None and lost:
        line = (
            "No verdict: " + "; ".join(lost) + ". Free the cores (or pass --threads 1) and "
            "run --apply again: a fix measured beside other work is not proven or refuted."
        )
    elif best is None:
        line = "No fix is better than the baseline beyond the noise: keep the run as it was."
    else:
        cfg = next(c for c in each_config(study, "") if c.name == best)
        m = measured(cfg)
        what = {"wall": " in wall time", "step": " per step", "memory": "",
                "sample": " per sample"}[m]  # fmt: skip
        said = verdict(steps[best], steps[baseline_key(m)], m)
        line = (
            f"Best proven: {escape_inline(best)}, {said}{what} "
            f"than the baseline. Command: {inline_code(_command(study, best))}"
        )
        if m == "step" and (other := _wall_disagrees(study, steps, best)):
            line += " " + other
    doc.paragraph(line)
    section.findings.append(line)
    return section


def _original_steps(study: StudyRecord) -> int | None:
    """Steps of the run the doctor re-measured (its own record, where it is readable)."""
    path = Path(str(study.plan.options.get("run_dir", ""))) / "summary.json"
    summary = try_json_object(path) if path.name and path.is_file() else None
    steps = SummaryView(summary).steps
    return steps if steps is not None and steps > 0 else None


def _wall_disagrees(study: StudyRecord, figures: dict[str, Spread], best: str) -> str | None:
    """When a fix proven faster per step took longer in wall time over the re-runs: both
    figures, and which one counts for the run as recorded, with the reason."""
    configs = {c.name: c for c in each_config(study, "")}
    wall = {name: spread(r.view.wall_time_s for r in configs[name].runs)
            for name in (best, BASELINE) if name in configs}  # fmt: skip
    fix_w, base_w = wall.get(best), wall.get(BASELINE)
    fix_s, base_s = figures.get(best), figures.get(BASELINE)
    if not (fix_w and base_w and fix_w.ok and base_w.ok and fix_s and base_s):
        return None
    if fix_w.median <= base_w.median:  # type: ignore[operator]
        return None
    steps = _int(study.plan.options.get("steps"))
    saved_ms = (base_s.median or 0.0) - (fix_s.median or 0.0)  # per step
    # The wall difference of the short re-runs less what their steps saved: the fix's
    # fixed cost (start-up, compile, allocation), paid once per run whatever its length.
    fixed_s = (fix_w.median - base_w.median) + steps * saved_ms / 1e3  # type: ignore[operator]
    n = _original_steps(study) or steps
    gain_s = n * saved_ms / 1e3 - fixed_s
    shown = (
        f"Its wall time over the {steps}-step re-runs was {fmt_spread(fix_w)} s against "
        f"the baseline's {fmt_spread(base_w)} s ({verdict(fix_w, base_w, 'wall')})."
    )
    if gain_s > 0:
        return (
            shown + f" The per-step figure is the one that counts for the run as "
            f"recorded ({n} steps): it saves about {n * saved_ms / 1e3:.3g} s there "
            f"against about {fixed_s:.3g} s of fixed cost the re-runs show."
        )
    return (
        shown + f" The wall time is the one that counts for the run as recorded ({n} "
        f"steps): its steps save about {n * saved_ms / 1e3:.3g} s, less than the "
        f"{fixed_s:.3g} s of fixed cost the fix adds; it pays off only in longer runs."
    )


def _int(value: Any) -> int:
    ok = isinstance(value, int) and not isinstance(value, bool) and value > 0
    return value if ok else 0
