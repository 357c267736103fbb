"""Where a run's memory went: the ``memory`` section of its summary as a table and a
stacked bar (torch-free; reads records only).

The figures are tensor bytes counted on one training step (see
``trainscope.profiling.memory``): parameters, gradients, optimizer states and the
activations saved for backward. Unlike a process's peak RSS they belong to the run alone,
so runs that shared a process still compare.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from trainscope.records.view import SummaryView
from trainscope.render.plots import new_figure, plain_text_figure, save_figure
from trainscope.render.table import Table, fmt_bytes, fmt_pct
from trainscope.util.textsafe import plot_text

_COLORS = {
    "parameters_bytes": "tab:blue",
    "gradients_bytes": "tab:orange",
    "optimizer_states_bytes": "tab:green",
    "activations_bytes": "tab:red",
}


MEMORY_NOTE = (
    "Activations and model states (parameters, gradients, optimizer states): tensor bytes "
    "counted on one training step of each run, its own even where runs shared a process; "
    "CUDA peak: max_memory_allocated, on a GPU only."
)

MEMORY_COMPONENTS = (  # the summary's memory keys and how reports name them
    ("parameters_bytes", "parameters"),
    ("gradients_bytes", "gradients"),
    ("optimizer_states_bytes", "optimizer states"),
    ("activations_bytes", "activations"),
)


def cuda_peak(summaries: Sequence[dict[str, Any]]) -> bool:
    """Whether these runs' peak memory is CUDA's allocator peak (per run, comparable),
    rather than a process's RSS high-water mark."""
    return bool(summaries) and all(
        s.get("peak_memory_kind") == "cuda_max_allocated" for s in summaries
    )


def memory_of(summary: dict[str, Any]) -> dict[str, Any]:
    """The summary's memory section when it holds counted figures, else {}."""
    mem = SummaryView(summary).memory
    if not isinstance(mem.get("parameters_bytes"), int):
        return {}
    return mem


def memory_table(summary: dict[str, Any]) -> Table:
    """Component | bytes | share of the counted total (no rows without a memory section)."""
    mem = memory_of(summary)
    rows: list[list[object]] = []
    if mem:
        parts = [(label, mem.get(key)) for key, label in MEMORY_COMPONENTS]
        extra = [
            ("buffers", mem.get("buffers_bytes")),
            (
                "autocast weight copies",
                (mem.get("activations") or {}).get("autocast_weight_copies_bytes"),
            ),
        ]
        parts += [(label, v) for label, v in extra if isinstance(v, int) and v > 0]
        total = sum(v for _, v in parts if isinstance(v, int))
        for label, v in parts:
            share = fmt_pct(v / total) if isinstance(v, int) and total else "–"
            rows.append([label, fmt_bytes(v), share])
        rows.append(["total counted", fmt_bytes(total), fmt_pct(1.0) if total else "–"])
        cuda = mem.get("cuda") or {}
        for stage, peak in (cuda.get("stage_peak_allocated_bytes") or {}).items():
            rows.append([f"CUDA peak allocated in {stage}", fmt_bytes(peak), "–"])
    ckpt = (mem.get("checkpointing") or {}) if mem else {}
    policy = ckpt.get("policy")
    how = f" Activation checkpointing: {policy}." if policy and policy != "none" else ""
    step = mem.get("step") if mem else None
    return Table(
        ["Component", "Bytes", "Share"],
        rows,
        f"Memory by component, counted from the tensors on step {step if step else '–'} "
        "(each storage once; activations: what forward and loss keep for backward)." + how,
        "tab:memory",
        "lrr",
    )


@plain_text_figure
def memory_bars(
    labels: Sequence[str],
    summaries: Sequence[dict[str, Any]],
    path_png: str | Path,
    path_svg: str | Path | None = None,
) -> list[Path]:
    """One horizontal stacked bar per run: parameters, gradients, optimizer states and
    activations in MiB. Runs without counted memory are left out; [] when none has it."""
    rows = [(label, memory_of(s)) for label, s in zip(labels, summaries)]
    rows = [(label, m) for label, m in rows if m]
    if not rows:
        return []
    fig = new_figure(7.0, 1.6 + 0.45 * len(rows))
    ax = fig.add_subplot()
    names = [plot_text(label) for label, _ in rows]
    left = [0.0] * len(rows)
    for key, label in MEMORY_COMPONENTS:
        values = [(m.get(key) or 0) / 2**20 for _, m in rows]
        ax.barh(names, values, left=left, color=_COLORS[key], label=label)
        left = [a + b for a, b in zip(left, values)]
    ax.set_xlabel("MiB (tensor bytes counted on one step)")
    ax.invert_yaxis()  # the first run on top
    # Below the axes, never over a bar.
    fig.legend(loc="outside lower center", ncols=len(MEMORY_COMPONENTS), fontsize="small")
    ax.set_title("Memory by component")
    return save_figure(fig, path_png, path_svg)


__all__ = ["MEMORY_NOTE", "cuda_peak", "memory_bars", "memory_of", "memory_table"]
