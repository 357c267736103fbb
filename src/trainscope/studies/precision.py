"""``study precision``: fp32 vs tf32 vs fp16 + GradScaler vs bf16, same workload and seed.

A precision the device cannot run (tf32 and fp16 on a CPU) is planned as *not
applicable*, with the reason, and never executed: the report says so instead of showing
fp32 numbers under another name.
"""

from __future__ import annotations

from typing import Any

import torch

from trainscope.config import PRECISIONS
from trainscope.errors import DeviceError
from trainscope.records.study_dir import PlannedRun
from trainscope.studies.base import PlanRequest, PlanResult, name_list, repeats_of, study_planner


def applicability(name: str, device: torch.device) -> str | None:
    """None when ``name`` runs on ``device``, else the reason it cannot."""
    from trainscope.techniques.precision import make_precision

    try:
        make_precision(name, device).close()
    except DeviceError as e:
        return str(e)
    return None


@study_planner("precision")
def plan(request: PlanRequest, *, precisions: list[str] | None = None) -> PlanResult:
    """One configuration per precision, each repeated; inapplicable ones are marked."""
    precisions = list(PRECISIONS) if precisions is None else precisions
    runs: list[PlannedRun] = []
    for p in precisions:
        reason = applicability(p, request.device)
        runs += repeats_of(
            p,
            request.repeats,
            labels={"precision": p},
            overrides={"runtime.precision": p},
            applicable=reason is None,
            reason=reason,
        )
    return runs, {"precisions": precisions}


def options_from_args(args: Any, overrides: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The precision study's flags as :func:`plan`'s keyword arguments (registry hook)."""
    return {"precisions": name_list("precisions", args.precisions, PRECISIONS)}, []
