"""The strategies study's communication model options: the bucket size of
``allreduce-bucketed`` and the α–β fits that predict each strategy's communication
(torch-free: the study command checks them before anything runs)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from trainscope import registry
from trainscope.collectives.predict_cli import fits_of_study
from trainscope.comm.record import read_record
from trainscope.config import MAX_BUCKET_MB
from trainscope.errors import ConfigError, TrainscopeError
from trainscope.records import schema
from trainscope.records.record_specs import STUDY
from trainscope.records.study_dir import STUDY_FILE
from trainscope.util.checks import need_number


def needs() -> dict[str, tuple[str, ...]]:
    """The ops each study configuration's prediction needs (from the registry; e.g.
    gather-scatter's gather and scatter are predicted from the broadcast fit, which the
    sweep times)."""
    return {name: v.predict_ops for name, (_, v) in registry.study_variants().items() if v.predict}


def study_options(
    bucket_mb: Any,
    cost_model_dir: str | None,
    strategies: Sequence[str] | None = None,
    nproc: int | None = None,
) -> dict[str, Any]:
    """``bucket_mb`` checked, and the fits of ``cost_model_dir`` (a collectives study) as
    the plan keeps them, so the report needs nothing but the study directory. Refused in
    one line: a sweep without the ops the chosen strategies need, or whose study.json
    holds values no sweep produces (a world size beyond 2**20, a negative α: see
    :data:`~trainscope.records.record_specs.STUDY`). Where the fits may not carry over
    to a study of ``nproc`` processes (another world size), ``cost_model["notes"]`` says
    so, for the command to print."""
    need_number("bucket_mb", bucket_mb, low=0.0, low_open=True, high=MAX_BUCKET_MB)
    options: dict[str, Any] = {"bucket_mb": float(bucket_mb)}
    if cost_model_dir is not None:
        try:
            schema.validate(
                read_record(Path(cost_model_dir)), STUDY, Path(cost_model_dir) / STUDY_FILE
            )
        except TrainscopeError as e:
            raise ConfigError(f"--cost-model: {e}") from None
        fits, where = fits_of_study(Path(cost_model_dir))
        ops = needs()
        chosen = ops if strategies is None else strategies
        missing = sorted({op for s in chosen for op in ops.get(s, ()) if op not in fits})
        if missing:
            raise ConfigError(
                f"--cost-model {cost_model_dir}: the sweep has no fit for {', '.join(missing)}, "
                "which the strategies compared need; rerun it with those in --ops (or all)"
            )
        sweep = read_record(Path(cost_model_dir)).get("options") or {}
        # The world the fits were made on (what α and β were read through), else the plan's.
        worlds = sorted({fit.world_size for fit in fits.values()})
        world = worlds[0] if len(worlds) == 1 else sweep.get("world_size")
        options["cost_model"] = {
            "source": where,
            "world_size": world,
            "backend": sweep.get("backend"),
            "fits": {op: fit.to_dict() for op, fit in fits.items()},
            "notes": world_notes(worlds, nproc),
        }
    return options


def world_notes(worlds: Sequence[int], nproc: int | None) -> list[str]:
    """Why fits made on ``worlds`` ranks may not carry over to a study on ``nproc``."""
    other = [w for w in worlds if w != nproc]
    if nproc is None or not other:
        return []
    on = " and ".join(str(w) for w in worlds)
    return [
        f"--cost-model: the sweep was fitted on {on} processes, the study runs {nproc}: α and "
        "β carry over only as far as the link per message stays the same (the report says "
        "so beside the prediction); a sweep with --nproc "
        f"{nproc} predicts this study best"
    ]
