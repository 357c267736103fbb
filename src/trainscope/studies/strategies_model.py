"""The strategies study's communication model options: the bucket size of
``allreduce-bucketed`` and the α–β fits that predict each strategy's communication
(torch-free: the study command checks them before anything runs)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trainscope.config import MAX_BUCKET_MB
from trainscope.config_checks import need_number


def study_options(bucket_mb: Any, cost_model_dir: str | None) -> dict[str, Any]:
    """``bucket_mb`` checked, and the fits of ``cost_model_dir`` (a collectives study) as
    the plan keeps them, so the report needs nothing but the study directory."""
    need_number("bucket_mb", bucket_mb, low=0.0, low_open=True, high=MAX_BUCKET_MB)
    options: dict[str, Any] = {"bucket_mb": float(bucket_mb)}
    if cost_model_dir is not None:
        from trainscope.collectives.predict_cli import fits_of_study

        fits, where = fits_of_study(Path(cost_model_dir))
        options["cost_model"] = {
            "source": where,
            "fits": {op: fit.to_dict() for op, fit in fits.items()},
        }
    return options
