"""The collectives' results as report tables, for the console and the report alike
(torch-free: ``trainscope report`` builds these without importing torch).

Cells are plain text built from the record's numbers; every renderer escapes them for
its output (:mod:`trainscope.util.textsafe`), so a damaged or hostile study.json shows as text.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from trainscope.analysis.stats import fmt_spread
from trainscope.render.console import make_console, print_line, print_table
from trainscope.render.table import Table, fmt_sig
from trainscope.util.numfmt import size_text  # noqa: F401 (re-exported)
from trainscope.util.spread import spread


def letter(code: int) -> str:
    """1 -> A, 26 -> Z, 27 -> AA (spreadsheet columns); 0 or less -> ``·`` (empty)."""
    if code <= 0:
        return "·"
    out = ""
    while code > 0:
        code, rem = divmod(code - 1, 26)
        out = chr(ord("A") + rem) + out
    return out


def value_text(values: Any, letters: bool = False) -> str:
    """``[3]`` -> ``"3"``, ``[1, 2]`` -> ``"[1, 2]"``, None -> ``"—"``; letters (A, B, ...)
    when asked; anything else as text."""
    if values is None:
        return "—"
    if not isinstance(values, list) or not all(_number(v) for v in values):
        return str(values)
    shown = [letter(int(v)) if letters else _num(v) for v in values]
    return shown[0] if len(shown) == 1 else "[" + ", ".join(shown) + "]"


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _num(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else fmt_sig(v, 6)


def _ok(value: Any) -> str:
    return {True: "yes", False: "NO"}.get(value, "—") if isinstance(value, bool) else "—"


def _label(text: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in text)


def example_table(result: dict[str, Any]) -> Table:
    """One collective's example: rank | before | after | expected | ok."""
    op = str(result.get("op"))
    letters = bool(result.get("letters"))
    root = result.get("root")
    head = op + (f" (root {root})" if root is not None else "")
    rows: list[list[object]] = [
        [
            str(row.get("rank")),
            value_text(row.get("before"), letters),
            value_text(row.get("after"), letters),
            value_text(row.get("expected"), letters),
            _ok(row.get("ok")),
        ]
        for row in result.get("rows") or []
        if isinstance(row, dict)
    ]
    return Table(
        ["Rank", "Before", "After", "Expected", "OK"],
        rows,
        f"{head}: {result.get('rule')}.",
        f"tab:collectives-example-{_label(op)}",
        "rllll",
    )


def identities_table(identities: Sequence[dict[str, Any]]) -> Table:
    """Both identities: elements compared, the largest difference and the tolerance."""
    rows: list[list[object]] = [
        [
            str(i.get("identity")),
            str(i.get("numel")),
            str(i.get("dtype")),
            _sci(i.get("max_abs_diff")),
            _sci(i.get("atol")),
            _ok(i.get("ok")),
        ]
        for i in identities
        if isinstance(i, dict)
    ]
    return Table(
        ["Identity", "Elements", "dtype", "Max abs diff", "Tolerance", "OK"],
        rows,
        "The identities on random vectors in [-1, 1) on every rank: the largest difference "
        "from all_reduce over every rank and element, against the bound within which two "
        "correct sums of n values in any order agree (Higham, eq. 4.4).",
        "tab:collectives-identities",
        "lrlrrl",
    )


def _sci(x: Any) -> str:
    return fmt_sig(x)


def _gbps(x: Any) -> str:
    return fmt_sig(x)


def _sweep_row(r: dict[str, Any]) -> list[object]:
    times = spread(r.get("times_s") or []).scaled(1e6)
    return [
        size_text(r.get("bytes")),
        str(r.get("count")),
        str(times.n),
        fmt_spread(times),
        _gbps(r.get("algbw_GBps")),
        _gbps(r.get("busbw_GBps")),
        str(r.get("wrong")),
    ]


SWEEP_COLUMNS = ["Size", "Count", "n", "Time (µs)", "algbw (GB/s)", "busbw (GB/s)", "#wrong"]


def sweep_table(op: str, results: Sequence[dict[str, Any]]) -> Table:
    """One op's measurements by size: count, time (median and spread), algbw, busbw,
    wrong elements."""
    ordered = sorted(results, key=lambda r: r.get("bytes") or 0)
    factor = next((r.get("bus_factor") for r in results if _number(r.get("bus_factor"))), None)
    world = next((r.get("world_size") for r in results if r.get("world_size")), "?")
    fac = fmt_sig(factor)
    return Table(
        SWEEP_COLUMNS,
        [_sweep_row(r) for r in ordered],
        f"{op} on {world} ranks: the slowest rank's time, median (spread) over the repeats; "
        f"algbw = size / time, busbw = algbw x {fac} (nccl-tests' factor); #wrong: output "
        "elements that differed from the expected value (1 GB/s = 1e9 bytes/s).",
        f"tab:collectives-{_label(op)}",
        "lrrrrrr",
    )


def sweep_console_table(results: Sequence[dict[str, Any]]) -> Table:
    """Every measurement in one table (op, then the columns of :func:`sweep_table`), as
    the command prints it at the end."""
    return Table(
        ["Op", *SWEEP_COLUMNS],
        [[str(r.get("op")), *_sweep_row(r)] for r in results],
        "Bandwidth: the slowest rank's time, median (spread) over the repeats; busbw = "
        "algbw x the op's nccl-tests factor; 1 GB/s = 1e9 bytes/s.",
        "tab:collectives-sweep",
        "llrrrrrr",
    )


class Printer:
    """Rank 0's output: tables on stdout (rich on a terminal, plain lines in a pipe),
    progress lines on stderr; every string shown literally (trainscope.util.textsafe)."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        if enabled:
            self.out = make_console()  # whole lines in a file, never cut at 80
            self.err = make_console(stderr=True)

    def table(self, table: Any) -> None:
        """A report Table, as the run summary prints one."""
        if not self.enabled:
            return
        print_table(self.out, table)

    def say(self, text: str) -> None:
        """One progress line on stderr."""
        if self.enabled:
            print_line(self.err, text)
