"""Workloads: built-ins by name, or the user's own as ``package.module:factory``."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from trainscope.errors import ConfigError

if TYPE_CHECKING:
    from trainscope.config import WorkloadConfig
    from trainscope.workloads.base import Workload


def _builtin(name: str) -> Callable[..., Workload]:
    from trainscope.workloads import builtin

    return getattr(builtin, name)


def load_factory(spec: str) -> Callable[..., Workload]:
    """Import ``package.module:factory`` (one clear error for each way it can fail)."""
    module_name, _, attr = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ConfigError(f"workload {spec!r}: cannot import {module_name!r} ({e})") from None
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise ConfigError(f"workload {spec!r}: {module_name} has no callable {attr!r}")
    return factory


def build_workload(cfg: WorkloadConfig, cache_dir: Path) -> Workload:
    """Make the workload a config names; user factories are called with the WorkloadConfig."""
    from trainscope.workloads.base import Workload

    if ":" in cfg.name:
        wl = load_factory(cfg.name)(cfg)
        if not isinstance(wl, Workload):
            raise ConfigError(
                f"workload factory {cfg.name!r} returned {type(wl).__name__}, not a Workload"
            )
        return wl
    return _builtin(cfg.name)(cfg, cache_dir)
