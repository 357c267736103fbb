"""Sections of the loader study's report: the num_workers sweep and the per-iteration view."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from trainscope.records.study_dir import PlannedRun, StudyRecord
from trainscope.reports.document import Document, escape_inline
from trainscope.reports.stats import (
    COMPUTE_STAGES,
    epoch_seconds,
    fmt_mean_std,
    fmt_mean_std_sig,
    fmt_sig,
    loader_start_seconds,
    mean_std,
    per_step_stages,
)
from trainscope.reports.tables import Table, fmt_pct, fmt_rate

if TYPE_CHECKING:
    from trainscope.reports.study_report import Section

VARIANT_LABELS = {
    "default": "DataLoader",
    "persistent_workers": "DataLoader, persistent_workers",
    "pin_memory": "DataLoader, pin_memory",
    "fast": "fast path (tensors on device)",
}


def _ratio(x: float) -> str:
    return f"{x:.2f}x"


def _sweep(study: StudyRecord, doc: Document, plots: Path, section: Section) -> None:
    from trainscope.reports.study_plots import workers_sweep_plot

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
    points: dict[str, list[tuple[int, float, float]]] = {}
    stats: dict[str, tuple[float, float, int, PlannedRun]] = {}
    for cfg in study.configs("sweep"):
        if not cfg.applicable:
            continue
        recs = study.measured(cfg.config)
        m, s, n = mean_std(epoch_seconds(r) for r in recs)
        if m is None:
            continue
        stats[cfg.config] = (m, s or 0.0, n, cfg)
    base = stats.get("w0")
    for name, (m, s, n, cfg) in stats.items():
        variant = cfg.labels.get("variant", "default")
        w = _count(cfg.labels.get("num_workers"))
        if variant != "fast":
            points.setdefault(variant, []).append((w, m, s))
        recs = study.measured(name)
        rate, _, _ = mean_std(r.summary.get("samples_per_s") for r in recs)
        start, _, _ = mean_std(loader_start_seconds(r) for r in recs)
        rows.append(
            [
                VARIANT_LABELS.get(variant, variant),
                "–" if variant == "fast" else str(w),
                fmt_mean_std_sig(m, s, n),
                fmt_rate(rate),
                fmt_sig(start),
                _ratio(base[0] / m) if base else "–",
            ]
        )
    na = sorted({c.reason for c in study.configs("sweep") if not c.applicable and c.reason})
    table = Table(
        ["Loader", "Workers", "s/epoch", "Samples/s", "Start-up s/epoch", "Speed-up vs 0"],
        rows,
        "Data-only epoch time by DataLoader setting (mean ± std over repeats); speed-up is "
        "relative to PyTorch's default num_workers=0.",
        "tab:loader-sweep",
        "lrrrrr",
    )
    section.tables["sweep"] = table
    fast = stats.get("fast")
    files = workers_sweep_plot(
        points,
        plots / "loader_sweep.png",
        default_workers=0,
        fast=(fast[0], fast[1]) if fast else None,
        title="Data-only epoch time vs num_workers",
    )
    if files:
        doc.figure(files[0], "Seconds per data-only epoch vs num_workers", None)
    doc.table(table)
    for reason in na:
        doc.note(f"pin_memory variants not run: {escape_inline(reason)}.")
    dl = {k: v for k, v in stats.items() if v[3].labels.get("variant") != "fast"}
    if dl and base:
        best_name = min(dl, key=lambda k: dl[k][0])
        bm, _, _, bcfg = dl[best_name]
        desc = f"{bcfg.labels.get('num_workers')} workers" + (
            f" ({VARIANT_LABELS[bcfg.labels['variant']]})"
            if bcfg.labels.get("variant") != "default"
            else ""
        )
        if best_name == "w0":
            text = (
                f"The fastest DataLoader setting is PyTorch's default, num_workers=0 "
                f"({base[0]:.4g} s/epoch): on this data set, worker processes cost more to "
                "start and feed than they save."
            )
        else:
            text = (
                f"Fastest DataLoader setting: {desc}, {bm:.4g} s/epoch, "
                f"{base[0] / bm:.2f}x faster than the default num_workers=0 "
                f"({base[0]:.4g} s/epoch)."
            )
        section.findings.append(text)
        doc.paragraph(escape_inline(text))
    if fast and base:
        text = (
            f"The fast path (tensors on the device, batches by indexing): {fast[0]:.4g} s/epoch,"
            f" {base[0] / fast[0]:.1f}x faster than the default DataLoader."
        )
        section.findings.append(text)
        doc.paragraph(escape_inline(text))


def _per_iteration(study: StudyRecord, doc: Document, plots: Path, section: Section) -> None:
    from trainscope.reports.study_plots import per_iteration_plot

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
    bars: list[tuple[str, float, float, float, float]] = []
    by_key: dict[tuple[str, int, bool], tuple[float, float]] = {}
    for cfg in configs:
        recs = study.measured(cfg.config)
        if not recs:
            continue
        per = [per_step_stages(r) for r in recs]
        dw_m, dw_s, n = mean_std(p["data_wait"] for p in per)
        cp_m, cp_s, _ = mean_std(sum(p[k] for k in COMPUTE_STAGES) for p in per)
        start, _, _ = mean_std(loader_start_seconds(r) for r in recs)
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
                fmt_mean_std(dw_m and dw_m * 1e3, dw_s and dw_s * 1e3, _fmt_ms, n),
                fmt_mean_std(cp_m and cp_m * 1e3, cp_s and cp_s * 1e3, _fmt_ms, n),
                fmt_pct(share),
                fmt_sig(start),
            ]
        )
        if dw_m is not None and cp_m is not None:
            bars.append((label, dw_m * 1e3, (dw_s or 0) * 1e3, cp_m * 1e3, (cp_s or 0) * 1e3))
            by_key[(loader, w, aug)] = (dw_m, cp_m)
    table = Table(
        ["Loader", "Augment", "Data wait ms/iter", "Compute ms/iter", "Data share", "Start-up s"],
        rows,
        "Mean data-wait and compute time per training iteration (mean ± std over repeats); "
        "start-up is the per-epoch worker start-up, outside the step records.",
        "tab:loader-per-iteration",
        "llrrrr",
    )
    section.tables["per_iteration"] = table
    files = per_iteration_plot(
        bars, plots / "loader_per_iteration.png", title="Data wait vs compute per iteration"
    )
    if files:
        doc.figure(files[0], "Data wait and compute per iteration", None)
    doc.table(table)
    costs = []
    for (loader, w, aug), (dw, _) in sorted(by_key.items()):
        if aug and (loader, w, False) in by_key:
            off = by_key[(loader, w, False)][0]
            name = "the fast path" if loader == "fast" else f"{w} workers"
            costs.append(f"{name}: {1e3 * (dw - off):+.3f} ms of data wait per iteration")
    if costs:
        text = "Cost of augmentation (on minus off): " + "; ".join(costs) + "."
        section.findings.append(text)
        doc.paragraph(escape_inline(text))


def _fmt_ms(x: float | None) -> str:
    return "–" if x is None else f"{x:.3f}"


def loader_sections(study: StudyRecord, doc: Document, plots: Path) -> Section:
    """Add the sweep and per-iteration sections; return their tables and findings."""
    from trainscope.reports.study_report import Section

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
