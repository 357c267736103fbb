"""``study loader``: how the input pipeline's settings change loading time.

Two parts:

* **sweep** — data-only runs (every training batch fetched and copied to the device, no
  model) for each ``num_workers`` value, plus the ``pin_memory`` and
  ``persistent_workers`` variants and the fast in-memory path; time per epoch.
* **per_iteration** — short real training runs for a few ``num_workers`` values and the
  fast path, with augmentation off and on: mean data-wait vs compute time per iteration.
"""

from __future__ import annotations

from typing import Any

import torch

from trainscope.errors import ConfigError
from trainscope.records.study_dir import PlannedRun, StudyPlan
from trainscope.studies.base import finish_plan, positive, repeats_of

DEFAULT_WORKERS = list(range(0, 11))
DEFAULT_ITER_WORKERS = [0, 2, 4]
PIN_CPU_REASON = "pin_memory only speeds up copies to a CUDA device; this run is on the CPU"


def parse_int_list(text: str) -> list[int]:
    """'0-10' -> 0..10, '0,2,4' -> [0, 2, 4], '0-4,8' -> [0, 1, 2, 3, 4, 8]."""
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        lo, sep, hi = part.partition("-")
        try:
            if sep:
                a, b = int(lo), int(hi)
                if b < a:
                    raise ValueError
                out.extend(range(a, b + 1))
            else:
                out.append(int(part))
        except ValueError:
            raise ValueError(f"expected a list like 0-10 or 0,2,4, got {text!r}") from None
    if any(v < 0 for v in out):
        raise ValueError(f"worker counts must be >= 0, got {text!r}")
    return sorted(set(out))


def plan(
    base_config: dict[str, Any],
    device: torch.device,
    *,
    repeats: int = 3,
    warmup: bool = True,
    workers: list[int] | None = None,
    sweep_epochs: int = 3,
    iter_workers: list[int] | None = None,
    iter_epochs: int = 2,
    iter_steps: int = 50,
) -> StudyPlan:
    """The loader study's runs for ``base_config`` (plain config data) on ``device``."""
    workers = DEFAULT_WORKERS if workers is None else workers
    iter_workers = DEFAULT_ITER_WORKERS if iter_workers is None else iter_workers
    cpu = device.type != "cuda"
    sweep = {"train.data_only": True, "train.epochs": sweep_epochs, "data.loader": "torch"}
    off = {"data.pin_memory": False, "data.persistent_workers": False, "data.prefetch_factor": None}
    runs: list[PlannedRun] = []
    for w in workers:
        common = {**sweep, **off, "data.num_workers": w}
        runs += repeats_of(
            f"w{w}",
            repeats,
            group="sweep",
            labels={"num_workers": w, "variant": "default"},
            overrides=common,
        )
        runs += repeats_of(
            f"w{w}-pin",
            repeats,
            group="sweep",
            labels={"num_workers": w, "variant": "pin_memory"},
            overrides={**common, "data.pin_memory": True},
            applicable=not cpu,
            reason=PIN_CPU_REASON if cpu else None,
        )
        if w > 0:  # persistent workers need workers
            runs += repeats_of(
                f"w{w}-persistent",
                repeats,
                group="sweep",
                labels={"num_workers": w, "variant": "persistent_workers"},
                overrides={**common, "data.persistent_workers": True},
            )
    runs += repeats_of(
        "fast",
        repeats,
        group="sweep",
        labels={"num_workers": 0, "variant": "fast"},
        overrides={**sweep, **off, "data.num_workers": 0, "data.loader": "fast"},
    )
    train = {"train.data_only": False, "train.epochs": iter_epochs}
    train["train.max_steps_per_epoch"] = iter_steps
    for aug in (False, True):
        for w in iter_workers:
            runs += repeats_of(
                f"iter-w{w}-aug{int(aug)}",
                repeats,
                group="per_iteration",
                labels={"num_workers": w, "loader": "torch", "augment": aug},
                overrides={
                    **train,
                    **off,
                    "data.loader": "torch",
                    "data.num_workers": w,
                    "workload.augment": aug,
                },
            )
        runs += repeats_of(
            f"iter-fast-aug{int(aug)}",
            repeats,
            group="per_iteration",
            labels={"num_workers": 0, "loader": "fast", "augment": aug},
            overrides={
                **train,
                **off,
                "data.loader": "fast",
                "data.num_workers": 0,
                "workload.augment": aug,
            },
        )
    options = {
        "repeats": repeats,
        "warmup": warmup,
        "workers": workers,
        "sweep_epochs": sweep_epochs,
        "iter_workers": iter_workers,
        "iter_epochs": iter_epochs,
        "iter_steps": iter_steps,
        "device": str(device),
    }
    return finish_plan("loader", base_config, options, runs, warmup)


def options_from_args(args: Any, overrides: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The loader study's flags as :func:`plan`'s keyword arguments (registry hook)."""
    try:
        options: dict[str, Any] = {
            "workers": parse_int_list(args.workers),
            "iter_workers": parse_int_list(args.iter_workers),
        }
    except ValueError as e:
        raise ConfigError(str(e)) from None
    options["sweep_epochs"] = positive("sweep-epochs", args.sweep_epochs)
    options["iter_epochs"] = positive("iter-epochs", args.iter_epochs)
    options["iter_steps"] = positive("iter-steps", args.iter_steps)
    return options, []
