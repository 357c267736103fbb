"""The strategies study's communication model options: the bucket size of
``allreduce-bucketed`` and the α–β fits that predict each strategy's communication
(torch-free: the study command checks them before anything runs)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from trainscope.config import MAX_BUCKET_MB
from trainscope.config_checks import need_number
from trainscope.errors import ConfigError

# The ops each strategy's prediction needs (gather-scatter's gather and scatter are
# predicted from the broadcast fit: the sweep does not time them).
NEEDS = {
    "gather-scatter": ("broadcast",),
    "allreduce": ("all_reduce",),
    "allreduce-bucketed": ("all_reduce",),
    "ddp": ("all_reduce",),
    "fsdp": ("all_gather", "reduce_scatter"),
}


def study_options(
    bucket_mb: Any, cost_model_dir: str | None, strategies: Sequence[str] = tuple(NEEDS)
) -> dict[str, Any]:
    """``bucket_mb`` checked, and the fits of ``cost_model_dir`` (a collectives study) as
    the plan keeps them, so the report needs nothing but the study directory. A sweep
    without the ops the chosen strategies need is refused in one line."""
    need_number("bucket_mb", bucket_mb, low=0.0, low_open=True, high=MAX_BUCKET_MB)
    options: dict[str, Any] = {"bucket_mb": float(bucket_mb)}
    if cost_model_dir is not None:
        from trainscope.collectives.predict_cli import fits_of_study
        from trainscope.collectives.record import read_record

        fits, where = fits_of_study(Path(cost_model_dir))
        missing = sorted({op for s in strategies for op in NEEDS.get(s, ()) if op not in fits})
        if missing:
            raise ConfigError(
                f"--cost-model {cost_model_dir}: the sweep has no fit for {', '.join(missing)}, "
                "which the strategies compared need; rerun it with those in --ops (or all)"
            )
        sweep = read_record(Path(cost_model_dir)).get("options") or {}
        options["cost_model"] = {
            "source": where,
            "world_size": sweep.get("world_size"),
            "backend": sweep.get("backend"),
            "fits": {op: fit.to_dict() for op, fit in fits.items()},
        }
    return options
