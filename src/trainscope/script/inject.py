"""``--inject``'s settings applied to an unchanged script, for the time of its run.

Each is put in place by :meth:`Injector.install` and taken out by :meth:`Injector.remove`,
through public APIs; what each changed (or could not change) is in :meth:`Injector.record`
and :meth:`Injector.notes`.

DataLoader keys (``num_workers``, ``pin_memory``, ``persistent_workers``,
``prefetch_factor``) override what every DataLoader the script builds was given, its
own explicit values included: ``DataLoader.__init__`` is wrapped for the run and put
back after it, and each loader's own values are kept for the record. Settings torch
accepts only with worker processes (``prefetch_factor``, ``persistent_workers``) are left
off a loader that ends up with none, and the record says so rather than letting torch
raise in the script.

Optimizer keys (``optimizer_impl``): the ``__init__`` of every torch optimizer class that
takes ``foreach``/``fused`` is wrapped, so each optimizer the script builds (a subclass's
too) gets ``foreach=True`` or ``fused=True``; a class without the option is left as it is,
and said.

Model keys act on the outermost model the script trains, found by the hooks at its first
training forward (:class:`trainscope.script.model_inject.ModelSettings`).

Process keys: ``matmul_precision`` and ``cudnn_benchmark`` are set at the start and put
back at the end; ``threads`` is the session's
(:class:`trainscope.script.session.ProfileSession`).
"""

from __future__ import annotations

import inspect
from typing import Any

import torch
from torch.utils.data import DataLoader

from trainscope.injections import INJECTIONS
from trainscope.script.model_inject import InjectRefused, ModelSettings

MAX_LOADERS = 16
"""DataLoaders whose own settings the record keeps, at most."""
WORKERS_ONLY = ("prefetch_factor", "persistent_workers")
"""Keys torch refuses on a DataLoader without worker processes."""
_DEFAULTS = {"num_workers": 0, "pin_memory": False, "persistent_workers": False,
             "prefetch_factor": None}  # fmt: skip


class LoaderSettings:
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

    def install(self) -> LoaderSettings:
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


class OptimizerSettings:
    """``optimizer_impl``: every torch optimizer the script builds, built with
    ``foreach=True`` or ``fused=True`` (see module docs)."""

    def __init__(self, impl: str | None) -> None:
        self.impl = impl
        self.optimizers: list[dict[str, Any]] = []
        """Each optimizer built: its class and ``{"had": ..., "now": ...}``."""
        self.left_off: set[str] = set()
        self._original: list[tuple[type, Any]] = []
        self._depth = 0

    def install(self) -> OptimizerSettings:
        if self.impl is None or self._original:
            return self
        for cls in vars(torch.optim).values():
            if isinstance(cls, type) and issubclass(cls, torch.optim.Optimizer):
                init = cls.__dict__.get("__init__")
                if init is not None and cls is not torch.optim.Optimizer:
                    self._original.append((cls, init))
                    cls.__init__ = self._wrapped(cls, init)  # type: ignore[misc]
        return self

    def remove(self) -> None:
        for cls, init in reversed(self._original):
            cls.__init__ = init  # type: ignore[misc]
        self._original.clear()

    def _wrapped(self, cls: type, original: Any) -> Any:
        signature = inspect.signature(original)
        takes = "foreach" in signature.parameters and "fused" in signature.parameters

        def __init__(opt: Any, *args: Any, **kwargs: Any) -> None:
            if self._depth:  # a torch class's __init__ calling its parent's: once only
                return original(opt, *args, **kwargs)
            self._depth += 1
            try:
                return _init(opt, *args, **kwargs)
            finally:
                self._depth -= 1

        def _init(opt: Any, *args: Any, **kwargs: Any) -> None:
            if not takes:
                self.left_off.add(type(opt).__name__)
                return original(opt, *args, **kwargs)
            try:
                bound = signature.bind(opt, *args, **kwargs)
            except TypeError:  # the script's own mistake: torch says it, as without us
                return original(opt, *args, **kwargs)
            had = {k: bound.arguments.get(k) for k in ("foreach", "fused")}
            now = {"foreach": self.impl == "foreach", "fused": self.impl == "fused"}
            bound.arguments.update({k: v or None for k, v in now.items()})
            if len(self.optimizers) < MAX_LOADERS:
                self.optimizers.append({"class": type(opt).__name__, "had": had, "now": now})
            return original(*bound.args, **bound.kwargs)

        __init__.__wrapped__ = original  # type: ignore[attr-defined]
        return __init__

    def notes(self) -> list[str]:
        notes = []
        if self.impl is not None and not self.optimizers:
            notes.append(f"--inject optimizer_impl={self.impl}: the script built no torch "
                         "optimizer that takes it, nothing changed")  # fmt: skip
        if self.left_off:
            names = ", ".join(sorted(self.left_off))
            notes.append(f"--inject optimizer_impl={self.impl}: left off {names} "
                         "(torch's class has no foreach/fused option)")  # fmt: skip
        return notes


class ProcessSettings:
    """``matmul_precision`` and ``cudnn_benchmark``: set for the run, put back after it."""

    def __init__(self, injected: dict[str, Any]) -> None:
        self.injected = injected
        self._before: dict[str, Any] = {}

    def install(self) -> ProcessSettings:
        if "matmul_precision" in self.injected:
            self._before["matmul_precision"] = torch.get_float32_matmul_precision()
            torch.set_float32_matmul_precision(self.injected["matmul_precision"])
        if "cudnn_benchmark" in self.injected:
            self._before["cudnn_benchmark"] = torch.backends.cudnn.benchmark
            torch.backends.cudnn.benchmark = bool(self.injected["cudnn_benchmark"])
        return self

    def remove(self) -> None:
        if "matmul_precision" in self._before:
            torch.set_float32_matmul_precision(self._before.pop("matmul_precision"))
        if "cudnn_benchmark" in self._before:
            torch.backends.cudnn.benchmark = self._before.pop("cudnn_benchmark")


class Injector:
    """Every part of ``--inject`` (see module docs): :meth:`install`, then :meth:`remove`.
    A setting that cannot apply to this process is refused here, before the script runs
    (ConfigError)."""

    def __init__(self, injected: dict[str, Any]) -> None:
        self.injected = injected
        self.loader = LoaderSettings(injected)
        self.optimizer = OptimizerSettings(injected.get("optimizer_impl"))
        self.process = ProcessSettings(injected)
        self.model = ModelSettings(injected)

    @property
    def for_loaders(self) -> dict[str, Any]:
        return self.loader.for_loaders

    @property
    def loaders(self) -> list[dict[str, Any]]:
        return self.loader.loaders

    def install(self) -> Injector:
        self.process.install()
        self.loader.install()
        self.optimizer.install()
        return self

    def remove(self, device: torch.device | None = None) -> None:
        """Everything put back; ``device``: the one the script trained on (None: none
        seen), for the notes on settings with no effect there."""
        self.model.remove()
        self.optimizer.remove()
        self.loader.remove()
        self.process.remove()
        self.device = device

    def notes(self) -> list[str]:
        """What the record and the console say of the injection, beyond the keys."""
        notes = self.loader.notes() + self.optimizer.notes() + self.model.notes()
        device = getattr(self, "device", None)
        if self.injected.get("cudnn_benchmark") and (device is None or device.type != "cuda"):
            notes.append("--inject cudnn_benchmark: no effect, the script used no CUDA device")
        return notes

    def record(self) -> dict[str, Any]:
        """The ``script`` section's account of what each injected setting reached."""
        out: dict[str, Any] = {}
        if self.loader.for_loaders:
            out["injected_loaders"] = self.loader.loaders
        if self.optimizer.impl is not None:
            out["injected_optimizers"] = self.optimizer.optimizers
        out.update(self.model.record())
        return out


__all__ = ["MAX_LOADERS", "InjectRefused", "Injector", "LoaderSettings"]
