"""``study profile``: where a normal training run's time goes, repeated for mean +- std."""

from __future__ import annotations

from trainscope.studies.base import PlanRequest, PlanResult, repeats_of, study_planner


@study_planner("profile")
def plan(request: PlanRequest) -> PlanResult:
    """``repeats`` runs of the base configuration, unchanged."""
    return repeats_of("run", request.repeats, labels={}, overrides={}), {}
