"""A generated corpus of damaged records, and what checks a reader against it (test
helper for test_damaged_records.py; torch-free).

A record is damaged field by field (:func:`corpus`): each field found by walking the
record (:func:`field_paths`) is dropped, given another type, or an extreme number
(``-1``, ``1e308``, ``2**63`` and the bare ``NaN`` token, which Python's JSON parser takes
although strict JSON has no such thing). :func:`accepted_everywhere` builds the records a
schema lets through, each damage at once in every field that takes it.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import shutil
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from trainscope.errors import RecordError, TrainscopeError
from trainscope.records.run_dir import RecordWarning

DROP = object()
DAMAGES: dict[str, Any] = {
    "dropped": DROP,
    "a string": "x",
    "a list": [1, "x"],
    "an object": {"k": 1},
    "null": None,
    "true": True,
    "-1": -1,
    "1e308": 1e308,
    "2**63": 2**63,
    "NaN": math.nan,  # written as the bare token
}
Path_ = tuple[Any, ...]


def field_paths(record: dict[str, Any], depth: int = 3) -> list[Path_]:
    """Every field to damage: each key, the keys of the objects inside (``depth`` levels),
    and the first item of a list (its keys too, for a list of objects)."""
    out: list[Path_] = []

    def walk(value: Any, at: Path_, left: int) -> None:
        if at:
            out.append(at)
        if left == 0:
            return
        if isinstance(value, dict):
            for k, v in value.items():
                walk(v, (*at, k), left - 1)
        elif isinstance(value, list) and value:
            walk(value[0], (*at, 0), left - 1)

    walk(record, (), depth)
    return out


def damaged(record: dict[str, Any], at: Path_, value: Any) -> dict[str, Any]:
    """A copy of ``record`` with field ``at`` dropped or set to ``value`` (only the objects
    on the way to it are copied: the RNG states' long lists are shared)."""
    out = copy.copy(record)
    parent = out
    for key in at[:-1]:
        parent[key] = copy.copy(parent[key])
        parent = parent[key]
    if value is DROP:
        del parent[at[-1]]
    else:
        parent[at[-1]] = copy.deepcopy(value)
    return out


def dotted(at: Path_) -> str:
    text = ""
    for key in at:
        text += f"[{key}]" if isinstance(key, int) else (f".{key}" if text else key)
    return text


def corpus(
    record: dict[str, Any], depth: int = 3, opaque: tuple[Path_, ...] = ()
) -> Iterator[tuple[str, Path_, str]]:
    """(what was done, to which field, the damaged file's text) for every field and damage;
    inside an ``opaque`` field (a saved config, which readers compare but never index)
    only the field itself is damaged."""
    for at in field_paths(record, depth):
        if any(len(at) > len(o) and at[: len(o)] == o for o in opaque):
            continue
        for name, value in DAMAGES.items():
            yield name, at, json.dumps(damaged(record, at, value))  # NaN as the bare token


def names_it(text: str, path: Path, at: Path_) -> bool:
    """Whether a message names the file and the damaged field (or a field inside it; for
    an item of a list, the list may be named: one of a fixed length is the list's fault)."""
    fields = [at, at[:-1]] if isinstance(at[-1], int) else [at]
    return str(path) in text and any(f"'{dotted(f)}" in text for f in fields)


def one_line(e: BaseException) -> bool:
    return isinstance(e, TrainscopeError) and "\n" not in str(e) and bool(str(e))


class Failures(list):
    """Cases that broke a reader, reported together at the end."""

    def add(self, reader: str, case: str, what: object) -> None:
        self.append(f"{reader} on {case}: {what}")

    def check(self) -> None:
        shown = "\n".join(self[:25])
        assert not self, f"{len(self)} failures, e.g.\n{shown}"


def run_reader(fn: Callable[[], Any], reader: str, case: str, failures: Failures) -> Any:
    """``fn()``'s result, its RecordWarnings' lines and trainscope's error if any; any
    other exception is a failure."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            return fn(), [str(w.message) for w in caught if w.category is RecordWarning], None
        except TrainscopeError as e:
            if not one_line(e):
                failures.add(reader, case, f"a message of several lines: {e!r}")
            return None, [], e
        except Exception as e:  # noqa: BLE001 - exactly what the corpus looks for
            failures.add(reader, case, f"{type(e).__name__}: {e}")
            return None, [], None


def copy_run(src: Path, dst: Path, checkpoints: bool = False) -> Path:
    ignore = [".trainscope.lock", "report"] + ([] if checkpoints else ["checkpoints"])
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns(*ignore))
    return dst


PNG = b"\x89PNG\r\n\x1a\n"


def takes(record: dict[str, Any], at: Path_, value: Any, spec: Any) -> bool:
    """Whether the schema lets ``value`` through in field ``at`` (nothing left out there)."""
    from trainscope.records.schema import check

    try:
        _, lines = check(damaged(record, at, value), spec, "x")
    except RecordError:
        return False
    return not any(f"'{dotted(at)}" in line for line in lines)


def accepted_everywhere(
    record: dict[str, Any], value: Any, spec: Any, deepest: bool, keep: tuple[Path_, ...] = ()
) -> dict[str, Any]:
    """``record`` with ``value`` put in every field whose schema lets it through, all at
    once: the deepest such fields (a leaf rather than the object holding it), or the
    shallowest; fields in ``keep`` (and inside them) are left as they are."""
    ok = [
        at
        for at in field_paths(record)
        if not any(at[: len(k)] == k for k in keep) and takes(record, at, value, spec)
    ]

    def inside(a: Path_, b: Path_) -> bool:  # a lies inside b
        return len(a) > len(b) and a[: len(b)] == b

    if deepest:
        chosen = [at for at in ok if not any(inside(o, at) for o in ok)]
    else:
        chosen = [at for at in ok if not any(inside(at, o) for o in ok)]
    out = record
    for at in chosen:
        out = damaged(out, at, value)
    return out


def at_the_edge(value: Any, spec: Any, side: str) -> Any:
    """``value`` with every number the schema bounds put at its ``side`` ("low"/"high")."""
    from trainscope.records import schema

    if isinstance(spec, schema.OneOf):
        spec = next((o for o in spec.options if _fits(value, o)), None)
    if isinstance(spec, schema.Num) and value is not None and not isinstance(value, bool):
        x = getattr(spec, side)
        return int(x) if spec.integer else float(x)
    if isinstance(spec, schema.Obj) and isinstance(value, dict):
        return {k: at_the_edge(v, spec.fields.get(k), side) for k, v in value.items()}
    if isinstance(spec, schema.MapOf) and isinstance(value, dict):
        return {k: at_the_edge(v, spec.value, side) for k, v in value.items()}
    if isinstance(spec, schema.ListOf) and isinstance(value, list):
        return [at_the_edge(v, spec.item, side) for v in value]
    return value


def _fits(value: Any, spec: Any) -> bool:
    from trainscope.records.schema import Bad

    try:
        spec.fits(value, "", None)
        return True
    except Bad:
        return False


def rehash(ckpt: Path, name: str) -> None:
    """The manifest made to match ``name`` again: damage that checksums cannot catch."""
    data = (ckpt / name).read_bytes()
    manifest = json.loads((ckpt / "COMPLETE.json").read_text())
    manifest["files"][name] = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    (ckpt / "COMPLETE.json").write_text(json.dumps(manifest))
