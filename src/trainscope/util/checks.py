"""Checks behind the config's validation (torch-free): each value is in range or one clear
error, and a message shows a value without printing a 4,000-digit integer."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from trainscope.errors import ConfigError

INT_LIMIT = 2**63  # integer settings end up in int64s (torch, numpy, C libraries)
# Seeds: 0 <= seed < 2**63. torch takes unsigned 64-bit seeds and the loaders add the epoch
# or the rank to a seed, so the lower half keeps every derived seed valid.
SEED_LIMIT = 2**63


def gib(n_bytes: float) -> str:
    """A byte count as GiB for messages, e.g. '11.5 GiB'."""
    return f"{n_bytes / 2**30:.3g} GiB"


def show(value: Any) -> str:
    """A value for a one-line message: its repr, cut short, and a huge integer by its size
    (Python refuses to print one of more than 4300 digits)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return f"an integer of {int(value.bit_length() * math.log10(2)) + 1} digits"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def need_integer(name: str, value: Any) -> None:
    """An int (not a bool) below INT_LIMIT in size, or one clear error."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise ConfigError(f"{name} must be an integer, got {show(value)}")
    if abs(value) >= INT_LIMIT:
        raise ConfigError(f"{name} must be below 2**63 in size, got {show(value)}")


def need_positive(name: str, value: Any, limit: int = INT_LIMIT - 1) -> None:
    """A positive int of at most ``limit``, or one clear error."""
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ConfigError(f"{name} must be a positive integer, got {show(value)}")
    if value > limit:
        bound = "2**63 - 1" if limit == INT_LIMIT - 1 else str(limit)
        raise ConfigError(f"{name} must be at most {bound}, got {show(value)}")


def need_seed(name: str, value: Any) -> None:
    """A seed torch and numpy accept: 0 <= seed < 2**63 (see SEED_LIMIT)."""
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < SEED_LIMIT:
        raise ConfigError(f"{name} must be an integer in 0..2**63 - 1, got {show(value)}")


def need_number(
    name: str, value: Any, *, low: float, low_open: bool = False, high: float | None = None
) -> None:
    """A finite number in range, or one clear error (NaN and infinity are refused: NaN
    compares false with everything and would slip through a plain range check)."""
    try:
        x = float(value) if isinstance(value, (int, float)) else math.nan
    except OverflowError:  # an int past 1e308
        x = math.nan
    ok = math.isfinite(x) and (x > low if low_open else x >= low) and (high is None or x <= high)
    if isinstance(value, bool) or not ok:
        bound = f"> {low:g}" if low_open else f">= {low:g}"
        bound = f"a finite number {bound}" if high is None else f"{bound} and <= {high:g}"
        raise ConfigError(f"{name} must be {bound}, got {show(value)}")


def check_types(cls: type, values: dict[str, Any], where: str) -> None:
    """Reject unknown keys and wrong types before the dataclass sees them.

    Annotations are strings here (``from __future__ import annotations``), so the check
    reads them as text; it covers every annotation the config dataclasses use.
    """
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for key, value in values.items():
        if key not in fields:
            raise ConfigError(f"unknown config key {where}.{key}")
        kind = str(fields[key].type)
        if value is None:
            if "None" not in kind:
                raise ConfigError(f"{where}.{key} must not be null")
        elif kind == "int | str":  # a count or a keyword such as "auto" (checked later)
            if isinstance(value, bool) or not isinstance(value, (int, str)):
                raise ConfigError(f"{where}.{key} must be an integer or a word, got {value!r}")
        elif kind.startswith("bool") and not isinstance(value, bool):
            raise ConfigError(f"{where}.{key} must be true or false, got {value!r}")
        elif kind.startswith("int") and (isinstance(value, bool) or not isinstance(value, int)):
            raise ConfigError(f"{where}.{key} must be an integer, got {value!r}")
        elif kind.startswith("float") and (
            isinstance(value, bool) or not isinstance(value, (int, float))
        ):
            raise ConfigError(f"{where}.{key} must be a number, got {value!r}")
        elif kind.startswith("str") and not isinstance(value, str):
            raise ConfigError(f"{where}.{key} must be a string, got {value!r}")
        elif kind.startswith("tuple[int") and not (
            isinstance(value, (list, tuple))
            and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
        ):
            raise ConfigError(f"{where}.{key} must be a list of integers, got {value!r}")
        elif kind.startswith("list[str]") and not (
            isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value)
        ):
            raise ConfigError(f"{where}.{key} must be a list of names, got {value!r}")
        elif kind.startswith("dict") and not isinstance(value, dict):
            raise ConfigError(f"{where}.{key} must be a mapping, got {value!r}")
