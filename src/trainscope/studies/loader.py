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

from trainscope.errors import ConfigError
from trainscope.records.study_dir import PlannedRun
from trainscope.studies.base import PlanRequest, PlanResult, positive, repeats_of, study_planner

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


@study_planner("loader")
def plan(
    request: PlanRequest,
    *,
    workers: list[int] | None = None,
    sweep_epochs: int = 3,
    iter_workers: list[int] | None = None,
    iter_epochs: int = 2,
    iter_steps: int = 50,
) -> PlanResult:
    """The loader study's runs for ``base_config`` (plain config data) on ``device``."""
    workers = DEFAULT_WORKERS if workers is None else workers
    iter_workers = DEFAULT_ITER_WORKERS if iter_workers is None else iter_workers
    cpu = request.device.type != "cuda"
    runs = _sweep_runs(workers, request.repeats, sweep_epochs, cpu=cpu)
    runs += _per_iteration_runs(iter_workers, request.repeats, iter_epochs, iter_steps)
    return runs, {
        "workers": workers,
        "sweep_epochs": sweep_epochs,
        "iter_workers": iter_workers,
        "iter_epochs": iter_epochs,
        "iter_steps": iter_steps,
    }


# The loader settings the study varies, all off: each configuration turns on its own.
_OFF = {"data.pin_memory": False, "data.persistent_workers": False, "data.prefetch_factor": None}


def _sweep_runs(workers: list[int], repeats: int, epochs: int, *, cpu: bool) -> list[PlannedRun]:
    """The sweep's data-only runs: per worker count the default, ``pin_memory`` and
    ``persistent_workers`` variants, then the fast in-memory path."""
    sweep = {"train.data_only": True, "train.epochs": epochs, "data.loader": "torch", **_OFF}

    def variant(
        name: str, w: int, label: str, overrides: dict[str, Any], reason: str | None = None
    ) -> list[PlannedRun]:
        return repeats_of(
            name,
            repeats,
            group="sweep",
            labels={"num_workers": w, "variant": label},
            overrides=overrides,
            applicable=reason is None,
            reason=reason,
        )

    runs: list[PlannedRun] = []
    for w in workers:
        common = {**sweep, "data.num_workers": w}
        runs += variant(f"w{w}", w, "default", common)
        pin = {**common, "data.pin_memory": True}
        runs += variant(f"w{w}-pin", w, "pin_memory", pin, PIN_CPU_REASON if cpu else None)
        if w > 0:  # persistent workers need workers
            persistent = {**common, "data.persistent_workers": True}
            runs += variant(f"w{w}-persistent", w, "persistent_workers", persistent)
    fast = {**sweep, "data.num_workers": 0, "data.loader": "fast"}
    return runs + variant("fast", 0, "fast", fast)


def _per_iteration_runs(
    workers: list[int], repeats: int, epochs: int, steps: int
) -> list[PlannedRun]:
    """The short training runs, augmentation off then on: per worker count with torch's
    loader, then the fast path."""
    train = {"train.data_only": False, "train.epochs": epochs, "train.max_steps_per_epoch": steps}
    loaders = [*((f"w{w}", "torch", w) for w in workers), ("fast", "fast", 0)]
    runs: list[PlannedRun] = []
    for aug in (False, True):
        for name, loader, w in loaders:
            runs += repeats_of(
                f"iter-{name}-aug{int(aug)}",
                repeats,
                group="per_iteration",
                labels={"num_workers": w, "loader": loader, "augment": aug},
                overrides={
                    **train,
                    **_OFF,
                    "data.loader": loader,
                    "data.num_workers": w,
                    "workload.augment": aug,
                },
            )
    return runs


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
