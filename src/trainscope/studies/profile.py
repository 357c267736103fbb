"""``study profile``: where a normal training run's time goes, repeated for mean +- std."""

from __future__ import annotations

from typing import Any

import torch

from trainscope.records.study_dir import StudyPlan
from trainscope.studies.base import finish_plan, repeats_of


def plan(
    base_config: dict[str, Any], device: torch.device, *, repeats: int = 3, warmup: bool = True
) -> StudyPlan:
    """``repeats`` runs of the base configuration, unchanged."""
    runs = repeats_of("run", repeats, labels={}, overrides={})
    options = {"repeats": repeats, "warmup": warmup, "device": str(device)}
    return finish_plan("profile", base_config, options, runs, warmup)
