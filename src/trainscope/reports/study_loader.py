"""Sections of the loader study's report: the num_workers sweep and the per-iteration view."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trainscope.analysis.bounds import beyond, invalid_text, recorded_cores, workers_bound
from trainscope.analysis.stats import (
    COMPUTE_STAGES,
    SPREAD_NOTE,
    epoch_seconds,
    error_bar,
    fmt_sig,
    fmt_spread,
    loader_start_seconds,
    per_step_stages,
    rate,
)
from trainscope.records.study_dir import PlannedRun, StudyRecord
from trainscope.render.document import Document, escape_inline
from trainscope.render.study_plots import per_iteration_plot, workers_sweep_plot
from trainscope.render.table import Table, fmt_pct, fmt_rate
from trainscope.reports.section import Section
from trainscope.util.numfmt import cores_text
from trainscope.util.spread import (
    MIN_N_TO_CLAIM,
    Spread,
    differ,
    indistinguishable_from_best,
    no_difference_text,
    spread,
)

VARIANT_LABELS = {
    "default": "DataLoader",
    "persistent_workers": "DataLoader, persistent_workers",
    "pin_memory": "DataLoader, pin_memory",
    "fast": "fast path (tensors on device)",
}


def _sweep(study: StudyRecord, doc: Document, plots: Path, section: Section) -> None:
    doc.heading("Loading time per epoch vs num_workers", 2)
    # Options, labels and reasons come from study.json: text, escaped where it meets markup.
    sweep_epochs = escape_inline(str(study.plan.options.get("sweep_epochs")))
    doc.paragraph(
        f"Data-only runs: every batch of the training set is fetched and copied to the "
        f"device, with no model, for {sweep_epochs} epoch(s) per run. Time per epoch "
        "includes starting the DataLoader's worker processes (except with "
        "persistent_workers, which start once per run)."
    )
    rows: list[list[object]] = []
    points: dict[str, list[tuple[int, float, tuple[float, float] | None]]] = {}
    stats: dict[str, tuple[Spread, PlannedRun]] = {}
    for cfg in study.configs("sweep"):
        if not cfg.applicable:
            continue
        sp = spread(epoch_seconds(r) for r in study.measured(cfg.config))
        if sp.median is not None:
            stats[cfg.config] = (sp, cfg)
    base = stats.get("w0")
    cores = recorded_cores(
        r.summary for c in study.configs("sweep") for r in study.measured(c.config)
    )
    for name, (sp, cfg) in stats.items():
        variant = cfg.labels.get("variant", "default")
        w = _count(cfg.labels.get("num_workers"))
        if variant != "fast":
            points.setdefault(variant, []).append((w, sp.median, error_bar(sp)))  # type: ignore[arg-type]
        recs = study.measured(name)
        start = spread(loader_start_seconds(r) for r in recs)
        rows.append(
            [
                VARIANT_LABELS.get(variant, variant),
                "–" if variant == "fast" else str(w),
                str(sp.n),
                fmt_spread(sp),
                fmt_spread(spread(rate(r.summary) for r in recs), fmt_rate),
                fmt_sig(start.median),
                _speedup(base[0], sp, _bound(cfg, cores)) if base else "–",
            ]
        )
    na = sorted({c.reason for c in study.configs("sweep") if not c.applicable and c.reason})
    table = Table(
        ["Loader", "Workers", "n", "s/epoch", "Samples/s", "Start-up s/epoch", "Speed-up vs 0"],
        rows,
        f"Data-only epoch time by DataLoader setting, {SPREAD_NOTE}; speed-up is relative to "
        "PyTorch's default num_workers=0, given only where the two spreads do not overlap "
        "('≈': no measurable difference).",
        "tab:loader-sweep",
        "lrrrrrr",
    )
    section.tables["sweep"] = table
    fast = stats.get("fast")
    dl = {k: v[0] for k, v in stats.items() if v[1].labels.get("variant") != "fast"}
    best, tied = indistinguishable_from_best(dl)
    winner = None
    if best is not None and len(tied) == 1:
        bcfg = stats[best][1]
        winner = (
            str(bcfg.labels.get("variant", "default")),
            _count(bcfg.labels.get("num_workers")),
        )
    files = workers_sweep_plot(
        points,
        plots / "loader_sweep.png",
        default_workers=0,
        fast=(fast[0].median, error_bar(fast[0])) if fast else None,  # type: ignore[arg-type]
        fastest=winner,
        tied=len(tied),
        title="Data-only epoch time vs num_workers (median, spread)",
    )
    if files:
        doc.figure(files[0], "Seconds per data-only epoch vs num_workers", None)
    doc.table(table)
    for reason in na:
        doc.note(f"pin_memory variants not run: {escape_inline(reason)}.")
    if best is not None and base:
        text = _fastest_text(best, tied, stats, base[0], cores)
        section.findings.append(text)
        doc.paragraph(escape_inline(text))
    if fast and base:
        sp = fast[0]
        if differ(sp, base[0]):
            text = (
                f"The fast path (tensors on the device, batches by indexing): "
                f"{fmt_sig(sp.median, 4)} s/epoch, "
                f"{base[0].median / sp.median:.1f}x faster than the "  # type: ignore[operator]
                f"default DataLoader ({fmt_sig(base[0].median, 4)} s/epoch), data only."
            )
        else:
            text = (
                f"The fast path (tensors on the device): {fmt_sig(sp.median, 4)} s/epoch against "
                f"{fmt_sig(base[0].median, 4)} s/epoch for the default DataLoader: "
                f"{no_difference_text(sp, base[0])}."
            )
        section.findings.append(text)
        doc.paragraph(escape_inline(text))


def _setting(cfg: PlannedRun) -> str:
    variant = cfg.labels.get("variant", "default")
    extra = f" ({VARIANT_LABELS.get(variant, variant)})" if variant != "default" else ""
    return f"{cfg.labels.get('num_workers')} workers{extra}"


def _bound(cfg: PlannedRun, cores: float | None) -> float | None:
    """The most a DataLoader setting's workers can gain over num_workers=0 (None: the fast
    path, which is another method, not more workers)."""
    if cfg.labels.get("variant", "default") == "fast":
        return None
    return workers_bound(_count(cfg.labels.get("num_workers")), cores)


def _speedup(base: Spread, sp: Spread, bound: float | None = None) -> str:
    """Default time over this setting's, only where the spreads do not overlap; "invalid"
    beyond what its workers can give."""
    if sp is base:
        return "1.00x"
    if bound is not None and beyond(base, sp, bound) is not None:
        return "invalid"
    if differ(base, sp) and sp.median:
        return f"{base.median / sp.median:.2f}x"  # type: ignore[operator]
    return "≈"


def _fastest_text(
    best: str,
    tied: list[str],
    stats: dict[str, tuple[Spread, PlannedRun]],
    base: Spread,
    cores: float | None = None,
) -> str:
    """The fastest DataLoader setting, or the group that the noise cannot separate; an
    invalid measurement where its speed-up is beyond what its workers can give."""
    sp, cfg = stats[best]
    bound = _bound(cfg, cores)
    floor = beyond(base, sp, bound) if bound is not None and best != "w0" else None
    if floor is not None and bound is not None:
        why = f"{_setting(cfg)}" + (f" on {cores_text(cores)}" if cores else "") + " can give"
        return (
            f"{_setting(cfg)} vs num_workers=0: "
            + invalid_text("the speed-up", floor, bound, why)
            + f" ({fmt_sig(sp.median, 4)} vs {fmt_sig(base.median, 4)} s/epoch, "
            f"n={sp.n} and {base.n})."
        )
    if len(tied) > 1 and min(stats[k][0].n for k in tied) < MIN_N_TO_CLAIM:
        return (
            f"No fastest DataLoader setting named: too few repeats to conclude "
            f"(n={min(stats[k][0].n for k in tied)}; {MIN_N_TO_CLAIM} each needed); the lowest "
            f"median is {_setting(cfg)}, {fmt_sig(sp.median, 4)} s/epoch."
        )
    if len(tied) > 1:
        names = ", ".join(_setting(stats[k][1]) for k in tied)
        return (
            f"No single fastest DataLoader setting: {names} are within noise of each other "
            f"(overlapping spreads at n={sp.n}); the lowest median is {_setting(cfg)}, "
            f"{fmt_sig(sp.median, 4)} s/epoch. Fewer workers cost less memory; more repeats may "
            "separate them."
        )
    if best == "w0":
        return (
            f"The fastest DataLoader setting is PyTorch's default, num_workers=0 "
            f"({fmt_sig(sp.median, 4)} s/epoch), beyond the noise of every other: on this "
            "data set, "
            "worker processes cost more to start and feed than they save."
        )
    return (
        f"Fastest DataLoader setting: {_setting(cfg)}, {fmt_sig(sp.median, 4)} s/epoch, "
        f"{base.median / sp.median:.2f}x faster than the default num_workers=0 "  # type: ignore[operator]
        f"({fmt_sig(base.median, 4)} s/epoch), beyond the noise of every other setting."
    )


def _per_iteration(study: StudyRecord, doc: Document, plots: Path, section: Section) -> None:
    configs = [c for c in study.configs("per_iteration") if c.applicable]
    if not configs:
        return
    doc.heading("Data wait vs compute per iteration (real training)", 2)
    opts = study.plan.options
    doc.paragraph(
        f"Short training runs ({escape_inline(str(opts.get('iter_epochs')))} epoch(s) of at "
        f"most {escape_inline(str(opts.get('iter_steps')))} steps) with augmentation off and "
        "on. Per-iteration means come from the step records (steady state); each epoch's "
        "worker start-up is shown apart. Compute = host-to-device copy + forward + "
        "loss/backward + optimizer."
    )
    rows: list[list[object]] = []
    bars: list[tuple[str, float, Any, float, Any]] = []
    by_key: dict[tuple[str, int, bool], Spread] = {}
    for cfg in configs:
        recs = study.measured(cfg.config)
        if not recs:
            continue
        per = [per_step_stages(r) for r in recs]
        dw = spread(p["data_wait"] for p in per).scaled(1e3)
        cp = spread(sum(p[k] for k in COMPUTE_STAGES) for p in per).scaled(1e3)
        start = spread(loader_start_seconds(r) for r in recs).median
        dw_m, cp_m = dw.median, cp.median
        loader = cfg.labels.get("loader", "torch")
        w = _count(cfg.labels.get("num_workers"))
        aug = bool(cfg.labels.get("augment"))
        name = "fast path" if loader == "fast" else f"{w} workers"
        label = f"{name}, aug {'on' if aug else 'off'}"
        share = dw_m / (dw_m + cp_m) if dw_m is not None and cp_m else None
        rows.append(
            [
                name,
                "on" if aug else "off",
                str(dw.n),
                fmt_spread(dw, _fmt_ms),
                fmt_spread(cp, _fmt_ms),
                fmt_pct(share),
                fmt_sig(start),
            ]
        )
        if dw_m is not None and cp_m is not None:
            bars.append((label, dw_m, error_bar(dw), cp_m, error_bar(cp)))
            by_key[(loader, w, aug)] = dw
    table = Table(
        [
            "Loader",
            "Augment",
            "n",
            "Data wait ms/iter",
            "Compute ms/iter",
            "Data share",
            "Start-up s",
        ],
        rows,
        "Data-wait and compute time per training iteration: each repeat's mean over its "
        f"steady-state steps (warm-up steps left out), then the {SPREAD_NOTE}; start-up is "
        "the per-epoch worker start-up, outside the step records.",
        "tab:loader-per-iteration",
        "llrrrrr",
    )
    section.tables["per_iteration"] = table
    files = per_iteration_plot(
        bars, plots / "loader_per_iteration.png", title="Data wait vs compute per iteration"
    )
    if files:
        doc.figure(files[0], "Data wait and compute per iteration", None)
    doc.table(table)
    costs = []
    for (loader, w, aug), on in sorted(by_key.items()):
        if aug and (loader, w, False) in by_key:
            off = by_key[(loader, w, False)]
            name = "the fast path" if loader == "fast" else f"{w} workers"
            if differ(on, off):
                diff = on.median - off.median  # type: ignore[operator]
                costs.append(f"{name}: {diff:+.3f} ms of data wait per iteration")
            else:
                costs.append(f"{name}: {no_difference_text(on, off)}")
    if costs:
        text = "Cost of augmentation (on minus off): " + "; ".join(costs) + "."
        section.findings.append(text)
        doc.paragraph(escape_inline(text))


def _fmt_ms(x: float | None) -> str:
    return "–" if x is None else f"{x:.3f}"


def loader_sections(study: StudyRecord, doc: Document, plots: Path) -> Section:
    """Add the sweep and per-iteration sections; return their tables and findings."""

    section = Section()
    _sweep(study, doc, plots, section)
    _per_iteration(study, doc, plots, section)
    return section


def _count(label: object) -> int:
    """A worker-count label as an int (0 for anything else: labels are record text)."""
    try:
        return int(label)  # type: ignore[call-overload]
    except (TypeError, ValueError, OverflowError):
        return 0
