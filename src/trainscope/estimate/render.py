"""The estimate as a table (one column per sharding) and the measured comparison, printed
as every command prints tables (:mod:`trainscope.reports.console`: drawn on a terminal,
plain lines whole in a pipe or a file)."""

from __future__ import annotations

from typing import Any

from trainscope.estimate.core import COMPONENTS, Estimate, dominant_line
from trainscope.estimate.measure import Row
from trainscope.estimate.states import SHARDING_TITLES, per_parameter
from trainscope.render.console import print_line, print_table
from trainscope.render.table import Table

ONE_DEVICE_NOTE = (
    "world size 1: ZeRO-1/2/3 shard the model states over one device, so they hold what "
    "DDP holds; one column is shown (--world-size N for the shardings, --json for all four); "
    "one process exchanges no gradients, so no communication allowance is counted"
)


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


def shown_columns(est: Estimate) -> list[str]:
    """The shardings the table shows: all four, or DDP alone at world size 1 (where the
    others shard over one device: see :data:`ONE_DEVICE_NOTE`)."""
    keys = list(est.columns)
    return keys[:1] if est.setup.world_size == 1 else keys


def estimate_table(est: Estimate) -> Table:
    """Components down, shardings across, per-device bytes."""
    keys = shown_columns(est)
    cols = [est.columns[k] for k in keys]
    comps = [c.components() for c in cols]
    rows: list[list[object]] = []
    for key, name in COMPONENTS.items():
        values = [cc.get(key) for cc in comps]
        if all(not v for v in values):
            continue  # a component this setup does not have (master copy in fp32, ...)
        rows.append([name, *(fmt_bytes(v) for v in values)])
    rows.append(["model states", *(fmt_bytes(c.model_states) for c in cols)])
    rows.append(["total", *(fmt_bytes(c.total) for c in cols)])
    return Table(
        ["per device", *(SHARDING_TITLES[k] for k in keys)], rows, "", align="l" + "r" * len(keys)
    )


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


def compare_table(rows: list[Row], title: str) -> Table:
    """Estimated beside measured, component by component, with the error."""
    cells: list[list[object]] = [
        [
            r.component,
            f"{r.estimated:,}",
            "-" if r.measured is None else f"{r.measured:,}",
            "-" if r.error_pct is None else f"{r.error_pct:+.2f}%",
        ]
        for r in rows
    ]
    return Table(["component", "estimated", "measured", "error"], cells, title, align="lrrr")


def print_estimate(est: Estimate, console: Any) -> None:
    """The setup, the table, the dominant component and the notes."""
    print_line(console, header(est))
    print_table(console, estimate_table(est))
    print_line(console, _caption(est), newlines=True)
    print_line(console, dominant_line(est, shown_columns(est)))
    if est.setup.world_size == 1:
        print_line(console, f"note: {ONE_DEVICE_NOTE}")
    for note in est.notes:
        print_line(console, f"note: {note}")


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
    "ONE_DEVICE_NOTE",
    "compare_table",
    "estimate_table",
    "fmt_bytes",
    "header",
    "print_estimate",
    "rows_to_dict",
    "shown_columns",
]


def split_table(ranks: list[Any], args: Any) -> Table:
    """Per rank of a split model: parameters, model states, activations held at once."""
    rows = []
    for r in ranks:
        act = r.activations
        if act is None:
            flight = "not estimated"
        elif r.peak is not None:  # two stages of different sizes: a peak, not a product
            flight = f"{fmt_bytes(act)} (peak: {r.in_flight} stage-microbatches)"
        else:
            flight = f"{fmt_bytes(act)} ({r.in_flight} x {fmt_bytes(r.activations_per_microbatch)})"
        total = "-" if act is None else fmt_bytes(r.states.total + act)
        rows.append([r.label, f"{r.parameters:,}", fmt_bytes(r.states.total), flight, total])
    if args.pp_stages is not None:
        what = (f"pipeline of {args.pp_stages} stages, {args.microbatches} microbatches, "
                f"{args.pp_schedule}")  # fmt: skip
    else:
        what = f"tensor parallelism over {args.tp_size} ranks"
        if getattr(args, "sequence_parallel", False):
            what += ", sequence parallel"
    return Table(
        ["Rank", "Parameters", "Model states", "Activations in flight", "Total"],
        rows,
        f"Per rank, {what} (strategies.pipeline / strategies.tensor_parallel's split): "
        "weights, gradients and optimizer states of what the rank keeps, and the most "
        "saved activations held at once (microbatches x one microbatch's).",
        "tab:estimate-split",
        "lrrrr",
    )
