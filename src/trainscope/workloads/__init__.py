"""Workloads: built-ins by name, or the user's own as ``package.module:factory``."""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import io
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainscope import registry
from trainscope.errors import ConfigError, TrainscopeError

if TYPE_CHECKING:
    from trainscope.config import WorkloadConfig
    from trainscope.workloads.base import Workload


# Each built-in workload's parts (factory, option check, layout, data check, recipe) are
# its registry entry (trainscope.registry.WorkloadEntry), imported only when chosen, so a
# workload with optional dependencies (text-cls: transformers) costs nothing otherwise.


def workload_layout(cfg: WorkloadConfig) -> dict[str, Any] | None:
    """A registered workload's layout from its options ({"blocks": 0} for one without
    blocks); None for a user's ``pkg.module:factory``, whose model alone knows."""
    entry = registry.WORKLOADS.get(cfg.name)
    if entry is None:
        return None
    if entry.layout is None:
        return {"blocks": 0}
    return registry.load(entry.layout)(cfg.options)


def check_data(cfg: WorkloadConfig) -> None:
    """Refuse a registered workload's ``data_dir`` that cannot hold its data, before the
    run folder exists and before torch is imported (torch-free): a folder lacking files
    fails in a moment, not after the start-up and a failed run."""
    entry = registry.WORKLOADS.get(cfg.name)
    if entry is None or entry.data_check is None or cfg.data_dir is None:
        return  # without a folder the workload downloads (or says how to) in setup
    registry.load(entry.data_check)(cfg.data_dir)


def check_options(cfg: WorkloadConfig) -> None:
    """Refuse bad ``workload.options`` of a registered workload before anything is
    written, and a data folder that lacks its files (:func:`check_data`).

    A user's ``pkg.module:factory`` reads its own options, so they are left to it; its
    module must import, though (a misspelt name is refused here, not as a failed run).
    """
    check_data(cfg)
    if ":" in cfg.name:
        load_factory(cfg.name)
        return
    entry = registry.WORKLOADS.get(cfg.name)
    if entry is None or entry.options is None:
        if cfg.options:
            raise ConfigError(
                f"workload {cfg.name} takes no options, got {', '.join(map(str, cfg.options))}"
            )
        return
    registry.load(entry.options)(cfg.options)


def _builtin(name: str) -> Callable[..., Workload]:
    return registry.load(registry.WORKLOADS[name].factory)


def load_factory(spec: str) -> Callable[..., Workload]:
    """Import ``package.module:factory`` (one clear error for each way it can fail).

    Where the module is looked for, the same with one process and under ``--nproc``:
    first where Python finds installed packages (site-packages, ``PYTHONPATH``), then, only
    if it is not found there, in the current directory. The current directory is added at
    the *end* of ``sys.path`` for that import only (what the module imports as it loads
    comes from there too), so a file there never replaces an installed package (a
    ``./yaml.py`` cannot stand in for PyYAML) and nothing imported later looks there.
    """
    module_name, _, attr = spec.partition(":")
    top = module_name.split(".")[0]
    added = None
    try:
        if importlib.util.find_spec(top) is None and os.getcwd() not in sys.path:
            added = os.getcwd()
            sys.path.append(added)
        module = _import(spec, module_name)
    finally:
        # Only for this import: a later lazy import (of an optional package that is not
        # installed, say) must not find a file of the same name in the current directory.
        if added is not None and added in sys.path:
            sys.path.remove(added)
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise ConfigError(f"workload {spec!r}: {module_name} has no callable {attr!r}")
    return factory


def _import(spec: str, module_name: str) -> Any:
    """Import a factory's module; any way its own code fails as it loads (a script that
    trains, parses the command line or exits when imported) is one line, said as the
    module's. What it prints meanwhile is held back: shown as it was where the import
    works, and its last line of stderr quoted in the error where it does not."""
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            module = importlib.import_module(module_name)
    except ImportError as e:
        raise ConfigError(
            f"workload {spec!r}: cannot import {module_name!r} ({e}); it is looked for among "
            "installed packages and PYTHONPATH, then in the current directory"
        ) from None
    except (Exception, SystemExit) as e:
        text = " ".join(str(e).split())
        what = f"{type(e).__name__}: {text}" if text else type(e).__name__
        said = [line for line in err.getvalue().splitlines() if line.strip()]
        printed = f"; it printed: {' '.join(said[-1].split())[:200]}" if said else ""
        raise ConfigError(
            f"workload {spec!r}: importing {module_name!r} raised {what[:300]}{printed} (a "
            "factory's module must import without running anything; TRAINSCOPE_DEBUG=1 shows "
            "the traceback)"
        ) from e
    sys.stdout.write(out.getvalue())
    sys.stderr.write(err.getvalue())
    return module


PART_KEYS = ("model", "train_set", "val_set", "loss_fn", "test_set", "task", "num_classes",
             "metrics_factory", "collate_fn", "class_names", "description",
             "tokens_per_sample")  # fmt: skip


def wrap_parts(spec: str, parts: Any) -> Workload:
    """A factory's plain parts as a Workload, without subclassing anything: a
    ``(model, train_set, val_set, loss_fn)`` tuple, or a dict with those keys and any of
    ``test_set``, ``task`` ("classification" by default, "regression" or
    "language-modelling"), ``num_classes`` (classification: read off the model's last
    Linear layer if not given), ``metrics_factory``, ``collate_fn``, ``class_names``,
    ``description``.

    ``model`` may also be a ``transformers`` model, or its hub name or local folder (a
    string), loaded for the task with its head: either is called with the batch's named
    tensors (or token ids) and gives its logits."""
    from torch import nn

    from trainscope.workloads.base import Workload
    from trainscope.workloads.hf import HFModel, is_hf_model, load_by_name

    if isinstance(parts, (tuple, list)):
        if len(parts) != 4:
            raise ConfigError(
                f"workload factory {spec!r} returned {len(parts)} parts; a tuple is "
                "(model, train_set, val_set, loss_fn)"
            )
        parts = dict(zip(("model", "train_set", "val_set", "loss_fn"), parts))
    keys = ("metrics_factory", "collate_fn", "class_names", "tokens_per_sample")
    extra = {k: parts[k] for k in keys if parts.get(k)}
    unknown = sorted(set(parts) - set(PART_KEYS))
    missing = [k for k in ("model", "train_set") if k not in parts]
    if unknown or missing:
        raise ConfigError(
            f"workload factory {spec!r}: "
            + (f"unknown key(s) {', '.join(map(str, unknown))}; " if unknown else "")
            + (f"missing {', '.join(missing)}; " if missing else "")
            + f"allowed: {', '.join(PART_KEYS)}"
        )
    task = parts.get("task", "classification")
    num_classes = parts.get("num_classes")
    model = parts["model"]
    notes = []
    if isinstance(model, str):  # a transformers model by name
        model, note = load_by_name(model, task, num_classes, f"workload factory {spec!r}")
        notes.append(note)
    if is_hf_model(model):
        if task == "classification":
            num_classes = num_classes or getattr(model.config, "num_labels", None)
        model = HFModel(model)
    if not isinstance(model, nn.Module):
        raise ConfigError(
            f"workload factory {spec!r}: model is {type(model).__name__}, not a nn.Module "
            "(nor a transformers model name)"
        )
    if num_classes is None:
        linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
        num_classes = linears[-1].out_features if task == "classification" and linears else 0
    if task == "language-modelling" and "tokens_per_sample" not in parts:
        extra["tokens_per_sample"] = _tokens_in_first_sample(parts["train_set"])
    if parts.get("loss_fn") is not None:
        extra["loss_fn"] = parts["loss_fn"]
    return Workload(
        name=spec,
        model=model,
        train_set=parts["train_set"],
        val_set=parts.get("val_set"),
        test_set=parts.get("test_set"),
        num_classes=num_classes,
        task=task,
        description=parts.get("description")
        or f"{type(getattr(model, 'net', model)).__name__} from {spec}",
        notes=notes,
        **extra,
    )


def _tokens_in_first_sample(train_set: Any) -> int | None:
    """Tokens per training sample of a language-modelling set: its first target's size
    (every window of a corpus has the same length). None if the set cannot say."""
    try:
        target = train_set[0][1]
        return int(target.numel())
    except Exception:  # an iterable or unusual set: tokens/s is left out, not guessed
        return None


def build_workload(cfg: WorkloadConfig, cache_dir: Path) -> Workload:
    """Make the workload a config names; user factories are called with the WorkloadConfig."""
    from trainscope.workloads.base import Workload

    if ":" in cfg.name:
        factory = load_factory(cfg.name)
        try:
            wl = factory(cfg)
        except TrainscopeError:
            raise  # already one line of trainscope's (a data file it read, say)
        except Exception as e:  # the user's code failed: said as theirs, not as ours
            text = " ".join(str(e).split())
            raise ConfigError(
                f"workload factory {cfg.name!r} raised {type(e).__name__}: {text}"
                " (set TRAINSCOPE_DEBUG=1 for the traceback)"
            ) from e
        if isinstance(wl, (dict, tuple, list)):
            wl = wrap_parts(cfg.name, wl)
        if not isinstance(wl, Workload):
            raise ConfigError(
                f"workload factory {cfg.name!r} returned {type(wl).__name__}, not a Workload "
                "(nor a dict or a (model, train_set, val_set, loss) tuple)"
            )
        return wl
    return _builtin(cfg.name)(cfg, cache_dir)
