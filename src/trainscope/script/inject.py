"""``--inject``'s settings applied to an unchanged script, for the time of its run.

DataLoader keys (``num_workers``, ``pin_memory``, ``persistent_workers``,
``prefetch_factor``) override what every DataLoader the script builds was given, its
own explicit values included: ``DataLoader.__init__`` is wrapped for the run and put
back after it, and each loader's own values are kept for the record. Settings torch
accepts only with worker processes (``prefetch_factor``, ``persistent_workers``) are left
off a loader that ends up with none, and the record says so rather than letting torch
raise in the script. The process keys (``threads``) are the session's
(:class:`trainscope.script.session.ProfileSession`).
"""

from __future__ import annotations

import inspect
from typing import Any

from torch.utils.data import DataLoader

from trainscope.injections import INJECTIONS

MAX_LOADERS = 16
"""DataLoaders whose own settings the record keeps, at most."""
WORKERS_ONLY = ("prefetch_factor", "persistent_workers")
"""Keys torch refuses on a DataLoader without worker processes."""
_DEFAULTS = {"num_workers": 0, "pin_memory": False, "persistent_workers": False,
             "prefetch_factor": None}  # fmt: skip


class Injector:
    """The DataLoader part of ``--inject`` (see module docs): :meth:`install`, then
    :meth:`remove`; :attr:`loaders` and :meth:`notes` say what happened."""

    def __init__(self, injected: dict[str, Any]) -> None:
        self.for_loaders = {
            k: v for k, v in injected.items() if INJECTIONS[k].needs == "dataloader"
        }
        self.loaders: list[dict[str, Any]] = []
        """Each DataLoader built: ``{"had": its own settings, "now": what it got}``."""
        self.built = 0
        self._left_off: dict[str, int] = {}
        self._original: Any = None

    def install(self) -> Injector:
        if self.for_loaders and self._original is None:
            self._original = DataLoader.__dict__["__init__"]
            DataLoader.__init__ = self._wrapped(self._original)  # type: ignore[method-assign]
        return self

    def remove(self) -> None:
        if self._original is not None:
            DataLoader.__init__ = self._original  # type: ignore[method-assign]
            self._original = None

    def _wrapped(self, original: Any) -> Any:
        signature = inspect.signature(original)

        def __init__(loader: Any, *args: Any, **kwargs: Any) -> None:
            try:
                bound = signature.bind(loader, *args, **kwargs)
            except TypeError:  # the script's own mistake: torch says it, as without us
                return original(loader, *args, **kwargs)
            had = {k: bound.arguments.get(k, _DEFAULTS[k]) for k in _DEFAULTS}
            now = self._settings(had)
            bound.arguments.update(now)
            self.built += 1
            if len(self.loaders) < MAX_LOADERS:
                self.loaders.append({"had": had, "now": now})
            return original(*bound.args, **bound.kwargs)

        __init__.__wrapped__ = original  # type: ignore[attr-defined]
        return __init__

    def _settings(self, had: dict[str, Any]) -> dict[str, Any]:
        """What a loader that was given ``had`` gets: the injected keys over its own."""
        now = {**had, **self.for_loaders}
        if not now["num_workers"]:  # no workers: torch refuses these two, so they go
            for key in WORKERS_ONLY:
                if key in self.for_loaders:
                    self._left_off[key] = self._left_off.get(key, 0) + 1
            now["prefetch_factor"], now["persistent_workers"] = None, False
        return now

    def notes(self) -> list[str]:
        """What the record and the console say of the injection, beyond the keys."""
        notes = []
        if self.for_loaders and not self.built:
            keys = ", ".join(f"{k}={v}" for k, v in self.for_loaders.items())
            notes.append(f"--inject {keys}: the script built no DataLoader, nothing changed")
        for key, n in self._left_off.items():
            notes.append(f"--inject {key}: left off {n} DataLoader(s) with no worker "
                         "processes (torch accepts it only with workers)")  # fmt: skip
        return notes


__all__ = ["MAX_LOADERS", "Injector"]
