"""What every table of the registry shares: a read-only view, add, remove, and ``load``."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


def load(target: str) -> Any:
    """The object a ``"package.module:attribute"`` string names (imported now)."""
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


class Table(Mapping[K, V], Generic[K, V]):
    """Key -> entry, in registration order: read as a mapping, changed only through
    :meth:`add` (which may check the entry first) and :meth:`remove`."""

    def __init__(self, key: Callable[[V], K], check: Callable[[V], None] | None = None):
        self._entries: dict[K, V] = {}
        self._key = key
        self._check = check

    def add(self, entry: V) -> V:
        """Add (or replace) an entry, after its check (a ValueError refuses it)."""
        if self._check is not None:
            self._check(entry)
        self._entries[self._key(entry)] = entry
        return entry

    def remove(self, key: K) -> None:
        """Remove an entry if present (a test's toy cleans up with this)."""
        self._entries.pop(key, None)

    def __getitem__(self, key: K) -> V:
        return self._entries[key]

    def __iter__(self) -> Iterator[K]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)
