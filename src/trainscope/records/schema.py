"""What every reader of a record file may rely on, checked in one place (torch-free).

A record file (a run's ``summary.json``, a checkpoint's ``trainer.json`` and
``COMPLETE.json``, a study's ``study.json``, the α–β cost model a collectives study
keeps) is valid JSON, but not always the JSON its readers expect: a field can be
missing, of another type (``"epochs": {}``), or a number no run produces (``1e308``
seconds, a world of 2**63 ranks, the non-standard ``NaN`` token Python's parser
accepts). Readers index into these files (``summary["epochs"][-1]``, ``secs / wall``,
``range(world_size)``), so such a field must stop at the door, named in one line,
instead of surfacing as a KeyError, an OverflowError or a hang deep inside a report.

Each record kind is an :class:`Obj` of field specs (declared in
:mod:`trainscope.records.record_specs`): a type, a range for numbers (finite always;
non-negative, bounded where the field is a count, a size, seconds or a world size) and
which fields the readers cannot do without (``required``). Two checks:

- :func:`validate` (strict): the record, or a :class:`~trainscope.errors.RecordError`
  naming the file and the first bad field, e.g. ``runs/a/summary.json: field
  'stages_s' should be an object of numbers, got a list``;
- :func:`check` (lenient): a bad *optional* field is left out and its line returned, so
  the caller can say so and report the rest; a bad *required* one is still an error.

The caller decides what a bad record means: ``--resume`` falls back to an earlier
checkpoint, a report leaves an optional field out with a note or refuses a record
whose required fields are bad, ``--cost-model`` refuses the sweep. Fields a schema does
not name are kept as they are (a newer trainscope may write more): a schema states what
the readers rely on, not every key, and never changes the JSON a record holds.

Why a small hand-written validator, not a library: the specs are a few types, ranges
and nestings, and the messages must be one line naming the file and the dotted field
in words a user reads. pydantic would bring pydantic-core (a compiled extension of
several MB) into the torch-free reader path (``trainscope report`` on a laptop) and
models that coerce (``"3"`` becomes 3) rather than refuse; jsonschema brings
``referencing``/``rpds-py`` and multi-line error trees that would be rewritten anyway.
Neither leaves out a bad optional field and keeps the rest, which is what a report of
a partly damaged record needs. The validator is this module (a few hundred lines,
no dependency); the specs of the records are data in ``record_specs``.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainscope.errors import RecordError
from trainscope.records.jsonio import read_json_object

# Ranges of what a run can produce; beyond them a value is damage, not a measurement.
MAX_WORLD = 1 << 20
"""World sizes (ranks) a record may name: 1..2**20 (as ``collectives --predict --world``)."""
MAX_COUNT = (1 << 63) - 1
"""Steps, samples, parameters, bytes: what a signed 64-bit counter holds."""
MAX_SECONDS = 1e9
"""About 32 years: no stage, epoch or run lasts longer."""
MAX_REAL = 1e200
"""Any other measured number (a loss, a rate): finite and far from overflowing when a
report multiplies, adds or plots it."""


class Bad(Exception):
    """One field that does not fit its spec (turned into a RecordError by the caller)."""

    def __init__(self, at: str, expect: str, got: str) -> None:
        super().__init__(at, expect, got)
        self.at, self.expect, self.got = at, expect, got

    def problem(self) -> str:
        """What is wrong, naming the field: ``field 'kind' should be a string, got 3``."""
        if self.got == "missing":
            return f"required field '{self.at}' is missing"
        where = f"field '{self.at}'" if self.at else "the record"
        return f"{where} should be {self.expect}, got {self.got}"

    def line(self, path: str | os.PathLike[str]) -> str:
        """The one-line message naming the file and the field."""
        return f"{path}: {self.problem()}"

    def error(self, path: str | os.PathLike[str]) -> RecordError:
        """As the error a reader raises."""
        return RecordError(self.line(path), Path(path), self.at, self.problem())


def got(value: Any) -> str:
    """What a value is, as a message shows it: ``a list``, ``null``, ``-1``, ``nan``."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value) if abs(value) < 10**30 else f"an integer of {len(str(abs(value)))} digits"
    if isinstance(value, float):
        return "NaN" if math.isnan(value) else repr(value)
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


Dropped = list[tuple[str, Bad]] | None
"""Where the lenient check collects the optional fields it leaves out (None: strict)."""


def _join(at: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{at}[{key}]"
    return f"{at}.{key}" if at else key


@dataclass(frozen=True)
class Spec:
    """A value's type (and range); ``null`` allows JSON null as well."""

    null: bool = field(default=False, kw_only=True)

    @property
    def expect(self) -> str:
        """What the value should be, in words (where null is allowed too, it goes unsaid)."""
        raise NotImplementedError

    def fits(self, value: Any, at: str, dropped: Dropped) -> Any:
        """``value`` if it fits (an object with bad optional fields left out where
        ``dropped`` collects them), else raise :class:`Bad`."""
        if value is None and self.null:
            return None
        return self._fits(value, at, dropped)

    def _fits(self, value: Any, at: str, dropped: Dropped) -> Any:
        raise NotImplementedError


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class Num(Spec):
    """A finite number (an integer with ``integer``) within [low, high]."""

    low: float = -MAX_REAL
    high: float = MAX_REAL
    integer: bool = False

    @property
    def expect(self) -> str:
        what = "an integer" if self.integer else "a number"
        if self.low == 0 and self.high == MAX_COUNT:
            return f"{what} >= 0"
        if self.low == self.high:
            return _num_text(self.low)
        return f"{what} in {_num_text(self.low)}..{_num_text(self.high)}"

    def _fits(self, value: Any, at: str, dropped: Dropped) -> Any:
        number = _is_int(value) or (isinstance(value, float) and not self.integer)
        # NaN and infinities are not numbers a record holds (trainscope writes null); the
        # comparison is exact for integers however large (no float conversion).
        finite = number and (not isinstance(value, float) or math.isfinite(value))
        if not finite or not self.low <= value <= self.high:
            raise Bad(at, self.expect, got(value))
        return value


def _num_text(x: float) -> str:
    """A bound as a message shows it: 0, 1, 2**20, 2**63-1, 1e9, -1e200."""
    if x == MAX_COUNT:
        return "2**63-1"
    if x == MAX_WORLD:
        return "2**20"
    if isinstance(x, float) and x.is_integer() and abs(x) >= 1e6:
        mantissa, exponent = f"{x:e}".split("e")
        return f"{float(mantissa):g}e{int(exponent)}"
    return f"{x:g}" if isinstance(x, float) else str(x)


def Int(low: int = 0, high: int = MAX_COUNT, *, null: bool = False) -> Num:  # noqa: N802
    """An integer in [low, high] (counts by default: 0..2**63-1)."""
    return Num(low, high, integer=True, null=null)


@dataclass(frozen=True)
class Text(Spec):
    """A string (one of ``choices`` when given)."""

    choices: tuple[str, ...] = ()

    @property
    def expect(self) -> str:
        return "one of " + ", ".join(self.choices) if self.choices else "a string"

    def _fits(self, value: Any, at: str, dropped: Dropped) -> Any:
        if not isinstance(value, str):
            raise Bad(at, self.expect, got(value))
        if self.choices and value not in self.choices:
            raise Bad(at, self.expect, repr(value[:40]))
        return value


@dataclass(frozen=True)
class Bool(Spec):
    """true or false."""

    expect = "true or false"  # type: ignore[assignment]  (a constant: no property needed)

    def _fits(self, value: Any, at: str, dropped: Dropped) -> Any:
        if not isinstance(value, bool):
            raise Bad(at, self.expect, got(value))
        return value


@dataclass(frozen=True)
class Anything(Spec):
    """Any JSON value (a field that only has to be there, or one not looked into)."""

    expect = "any value"  # type: ignore[assignment]

    def _fits(self, value: Any, at: str, dropped: Dropped) -> Any:
        return value


@dataclass(frozen=True)
class ListOf(Spec):
    """A list whose items all fit ``item`` (``min_items``..``max_items`` of them)."""

    item: Spec = field(default_factory=Anything)
    min_items: int = 0
    max_items: int | None = None

    @property
    def expect(self) -> str:
        count = ""
        if self.max_items is not None and self.min_items == self.max_items:
            count = f"{self.max_items} "
        noun = _plural(self.item)
        return f"a list of {count}{noun}"

    def _fits(self, value: Any, at: str, dropped: Dropped) -> Any:
        if not isinstance(value, list):
            raise Bad(at, self.expect, got(value))
        if len(value) < self.min_items or (
            self.max_items is not None and len(value) > self.max_items
        ):
            raise Bad(at, self.expect, f"a list of {len(value)}")
        # An item that does not fit makes the list bad: indexes mean something (ranks,
        # epochs), so one is never silently removed.
        return [self.item.fits(v, _join(at, i), None) for i, v in enumerate(value)]


@dataclass(frozen=True)
class Tuple(Spec):
    """A list of fixed length whose items fit ``items`` in order (e.g. an RNG state)."""

    items: tuple[Spec, ...] = ()

    @property
    def expect(self) -> str:
        return f"a list of {len(self.items)} ({', '.join(s.expect for s in self.items)})"

    def _fits(self, value: Any, at: str, dropped: Dropped) -> Any:
        if not isinstance(value, list) or len(value) != len(self.items):
            shown = f"a list of {len(value)}" if isinstance(value, list) else got(value)
            raise Bad(at, self.expect, shown)
        return [s.fits(v, _join(at, i), None) for i, (s, v) in enumerate(zip(self.items, value))]


@dataclass(frozen=True)
class MapOf(Spec):
    """An object with any keys (matching ``keys``, a regex, when given), every value
    fitting ``value``: e.g. ``stages_s``, stage name -> seconds."""

    value: Spec = field(default_factory=Anything)
    keys: str | None = None

    @property
    def expect(self) -> str:
        return f"an object of {_plural(self.value)}"

    def _fits(self, value: Any, at: str, dropped: Dropped) -> Any:
        if not isinstance(value, dict):
            raise Bad(at, self.expect, got(value))
        out = {}
        for k, v in value.items():
            if self.keys is not None and not re.fullmatch(self.keys, k):
                raise Bad(at, f"{self.expect} (keys matching {self.keys})", f"key {k[:40]!r}")
            out[k] = self.value.fits(v, _join(at, k), None)
        return out


@dataclass(frozen=True)
class Obj(Spec):
    """An object with named fields (others are kept as they are); ``required`` names
    the fields its readers cannot do without."""

    fields: Mapping[str, Spec] = field(default_factory=dict)
    required: tuple[str, ...] = ()
    name: str = "an object"
    vital: tuple[str, ...] = ()
    """Optional fields that, present, must fit: a bad one is the record's fault, never
    left out (a study's ``runs``: without them it is another study)."""

    @property
    def expect(self) -> str:
        return self.name

    def _fits(self, value: Any, at: str, dropped: Dropped) -> Any:
        if not isinstance(value, dict):
            raise Bad(at, self.expect, got(value))
        out = dict(value)
        for key in self.required:
            if key not in value:
                raise Bad(_join(at, key), "", "missing")
        for key, spec in self.fields.items():
            if key not in value:
                continue
            try:
                out[key] = spec.fits(value[key], _join(at, key), dropped)
            except Bad as bad:
                if key in self.required or key in self.vital or dropped is None:
                    raise
                dropped.append((_join(at, key), bad))  # optional: left out, the rest kept
                del out[key]
        return out


@dataclass(frozen=True)
class OneOf(Spec):
    """A value that fits one of ``options`` (tried in order)."""

    options: tuple[Spec, ...] = ()

    @property
    def expect(self) -> str:
        return " or ".join(s.expect for s in self.options)

    def _fits(self, value: Any, at: str, dropped: Dropped) -> Any:
        for spec in self.options:
            try:
                return spec.fits(value, at, None)
            except Bad:
                continue
        raise Bad(at, self.expect, got(value))


def _plural(spec: Spec) -> str:
    if isinstance(spec, Num):
        return "integers" if spec.integer else "numbers"
    if isinstance(spec, Text):
        return "strings"
    if isinstance(spec, Bool):
        return "true/false values"
    if isinstance(spec, (Obj, MapOf)):
        return "objects"
    if isinstance(spec, (ListOf, Tuple)):
        return "lists"
    return "values"


# ---------------------------------------------------------------------------------------
# The two checks
# ---------------------------------------------------------------------------------------


def validate(data: Any, spec: Spec, path: str | os.PathLike[str]) -> Any:
    """``data`` (read from ``path``) if every field fits ``spec``, else a RecordError
    naming the file and the first field that does not."""
    try:
        return spec.fits(data, "", None)
    except Bad as bad:
        raise bad.error(path) from None


def check(data: Any, spec: Spec, path: str | os.PathLike[str]) -> tuple[Any, list[str]]:
    """``data`` without its bad optional fields, and one line per field left out; a
    RecordError (one line) when the record itself or a required field is bad."""
    dropped: list[tuple[str, Bad]] = []
    try:
        out = spec.fits(data, "", dropped)
    except Bad as bad:
        raise bad.error(path) from None
    return out, [
        f"{bad.line(path)}; left out" if at == bad.at else f"{bad.line(path)}; '{at}' left out"
        for at, bad in dropped
    ]


def read(path: str | os.PathLike[str], spec: Spec) -> Any:
    """The JSON object in ``path`` after :func:`validate` (one line for anything wrong:
    unreadable, not JSON, not an object, a field that does not fit)."""
    return validate(read_json_object(Path(path)), spec, path)


# ---------------------------------------------------------------------------------------
# Field kinds shared by the records
# ---------------------------------------------------------------------------------------

COUNT = Int()
COUNT_OR_NULL = Int(null=True)
BYTES = Int(null=True)
RANK = Int(0, MAX_WORLD - 1)
SECONDS = Num(0.0, MAX_SECONDS, null=True)
"""A duration (null where it was not measured)."""
SIGNED_SECONDS = Num(-MAX_SECONDS, MAX_SECONDS, null=True)
"""A duration that may be slightly negative (``other`` when GPU timings overlap)."""
CLOCK = Num(-MAX_SECONDS, 1e11, null=True)
"""A time on a run's clock or the calendar (Unix seconds until about the year 5000)."""
REAL = Num(null=True)
"""A finite measured number (a loss; null where it was not finite)."""
RATE = Num(0.0, MAX_REAL, null=True)
FRACTION = Num(0.0, 1.0, null=True)
TEXT = Text(null=True)
TEXTS = ListOf(Text(), null=True)
