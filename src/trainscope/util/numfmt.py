"""Numbers as trainscope shows them: plain digits, never an exponent (torch-free).

One function for every table, finding, console line and plot label: ``fmt_sig`` rounds to
a number of significant digits and writes the result as plain digits, so a cell reads
``1010`` or ``1670 ms`` or ``0.00123``, never ``1.01e+03``. Digits left of the decimal
point are all kept (``123456``): a count or a rate is never shortened.
"""

from __future__ import annotations

import math
from typing import Any

MISSING = "–"
"""What is shown for a missing or non-finite value (an en dash)."""


def fmt_sig(x: Any, digits: int = 3, *, trim: bool = False) -> str:
    """``x`` rounded to ``digits`` significant digits, in plain digits: 0.00420, 75.3, 1670.

    ``trim`` drops trailing zeros (``1`` rather than ``1.00``): for settings someone typed,
    where the zeros would claim a precision nobody measured. Missing, non-numeric or
    non-finite values (and bools) show as an en dash.
    """
    if not isinstance(x, (int, float)) or isinstance(x, bool) or not math.isfinite(x):
        return MISSING
    if x == 0:
        return "0"
    # The decimals follow the value once rounded (0.0009996 -> 0.00100, not 0.001000).
    rounded = float(f"{x:.{digits}g}")
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(rounded))))
    text = f"{x:.{decimals}f}"
    return text.rstrip("0").rstrip(".") if trim and "." in text else text


__all__ = ["MISSING", "cores_text", "fmt_sig", "size_text"]


# Binary units, as bandwidth.parse_size reads them (1K = 1024).
_UNITS = (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10))


def fmt_bytes(n: Any) -> str:
    """Binary (1024-based) units: ``350000000`` -> ``"333.8 MiB"``."""
    if isinstance(n, bool) or not isinstance(n, (int, float)) or not math.isfinite(n):
        return MISSING
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def size_text(size: Any) -> str:
    """1024 -> ``"1K"``, 67108864 -> ``"64M"``, 1000 -> ``"1000"`` (the inverse of
    :func:`trainscope.collectives.bandwidth.parse_size`); not an int -> ``MISSING``."""
    if not isinstance(size, int) or isinstance(size, bool):
        return MISSING
    for unit, scale in _UNITS:
        if size >= scale and size % scale == 0:
            return f"{size // scale}{unit}"
    return str(size)


def cores_text(n: Any) -> str:
    """``"1 core"``, ``"2 cores"``, ``"1.5 cores"``: a count of cores with its noun."""
    if not isinstance(n, (int, float)) or isinstance(n, bool) or not math.isfinite(n):
        return f"{MISSING} cores"
    return f"{n:g} core" + ("" if n == 1 else "s")
