"""The estimate as a rich table (one column per sharding) and the measured comparison."""

from __future__ import annotations

from typing import Any

from trainscope.estimate.core import COMPONENTS, Estimate, dominant_line
from trainscope.estimate.measure import Row
from trainscope.estimate.states import SHARDING_TITLES, per_parameter


def fmt_bytes(n: float | None) -> str:
    """Bytes in decimal units, three significant figures: '31.4 GB', '527 kB'."""
    if n is None:
        return "-"
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(n) >= size:
            return f"{n / size:#.3g}".rstrip(".") + f" {unit}"
    return f"{n:.0f} B"


def header(est: Estimate) -> str:
    """The setup in one line."""
    s, c = est.setup, est.counts
    trained = "" if c.trainable == c.parameters else f" ({c.trainable:,} trainable)"
    head = (
        f"{s.source or s.arch.name}: {c.parameters:,} parameters{trained}; world size "
        f"{s.world_size}, {s.precision}, {s.optimizer}"
    )
    if s.states_only:
        return head + ", model states only"
    shape = f"micro-batch {s.batch_size}"
    if s.arch.kind != "lenet":
        shape += f" x {est.seq_len} tokens"
    return f"{head}, {shape}, checkpointing {s.checkpointing}, {s.device}"


def estimate_table(est: Estimate) -> Any:
    """A rich Table: components down, shardings across, per-device bytes."""
    from rich.table import Table

    table = Table()
    table.add_column("per device", style="bold")
    for key in est.columns:
        table.add_column(SHARDING_TITLES[key], justify="right")
    cols = list(est.columns.values())
    comps = [c.components() for c in cols]
    for key, name in COMPONENTS.items():
        values = [cc.get(key) for cc in comps]
        if all(not v for v in values):
            continue  # a component this setup does not have (master copy in fp32, ...)
        table.add_row(name, *(fmt_bytes(v) for v in values))
    table.add_row("model states", *(fmt_bytes(c.model_states) for c in cols), style="dim")
    table.add_row("total", *(fmt_bytes(c.total) for c in cols), style="bold")
    return table


def _caption(est: Estimate) -> str:
    s = est.setup
    lines = [per_parameter(s.precision, s.optimizer) + "; GB = 1e9 bytes"]
    act = est.activations
    if act is not None:
        kernel = "no attention" if act.attention == "none" else f"{act.attention} attention kernel"
        lines.append(
            f"activations: {kernel}, {act.checkpointed_blocks} "
            "checkpointed block(s); allowances are stated, not measured (--json for their basis)"
        )
    return "\n".join(lines)


def compare_table(rows: list[Row], title: str) -> Any:
    """Estimated beside measured, component by component, with the error."""
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    table.add_column("component", style="bold")
    for name in ("estimated", "measured", "error"):
        table.add_column(name, justify="right")
    for r in rows:
        err = r.error_pct
        table.add_row(
            r.component,
            f"{r.estimated:,}",
            "-" if r.measured is None else f"{r.measured:,}",
            "-" if err is None else f"{err:+.2f}%",
        )
    return table


def print_estimate(est: Estimate, console: Any) -> None:
    """The setup, the table, the dominant component and the notes."""
    console.print(header(est), highlight=False)
    console.print(estimate_table(est))
    console.print(_caption(est), highlight=False)
    console.print(dominant_line(est), highlight=False)
    for note in est.notes:
        console.print(f"note: {note}", highlight=False)


def rows_to_dict(rows: list[Row]) -> list[dict[str, Any]]:
    """Comparison rows as plain data (``--json``)."""
    return [
        {
            "component": r.component.strip(),
            "estimated_bytes": r.estimated,
            "measured_bytes": r.measured,
            "error_pct": r.error_pct,
        }
        for r in rows
    ]


__all__ = [
    "compare_table",
    "estimate_table",
    "fmt_bytes",
    "header",
    "print_estimate",
    "rows_to_dict",
]
