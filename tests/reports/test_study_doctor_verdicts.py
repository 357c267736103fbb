"""The doctor's --apply verdict when the per-step figure and the wall time disagree, and
when other load left nothing to judge (reports.study_doctor)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from tests.diagnosis.test_rules import write_run
from tests.reports.test_honest_numbers import Planted, report_of
from trainscope.diagnosis import diagnose
from trainscope.studies.doctor import plan_apply
from trainscope.util.load import IGNORE_LOAD_ENV

SLOW_INPUT = {"data_wait": 0.02, "forward": 0.004, "backward": 0.006, "optimizer": 0.001}


def rep(step_ms: float, wall: float, other: float = 0.0) -> dict[str, Any]:
    st = step_ms / 1e3
    return {
        "steady_state": {"warmup_steps": 5,
                         "step_s": {"median": st, "low": st, "high": st, "n": 25, "kind": "IQR"}},
        "wall_time_s": wall,
        "cpu": {"threads": 1, "processes_on_node": 1, "cores": 2, "other_cores": other},
    }  # fmt: skip


def apply_report(tmp_path: Path, steps: int, fix: list[tuple[float, float]], other=0.0) -> Any:
    run = write_run(tmp_path / "run", SLOW_INPUT, steps=steps)
    plan = plan_apply(diagnose(run), torch.device("cpu"), steps=30, repeats=3)
    names = [c.config for c in plan.runs if not c.warmup and c.repeat == 1]
    assert names[0] == "baseline" and "input-bound" in names
    planted = {}
    for k in (1, 2, 3):
        planted[f"baseline/r{k}"] = rep(10.0 + 0.1 * k, 2.86 + 0.01 * k, other)
        ms, wall = fix[k - 1]
        for name in names[1:]:
            planted[f"{name}/r{k}"] = rep(ms, wall, other)
    return report_of(plan, tmp_path, Planted(planted, fresh=True))


def test_a_fix_faster_per_step_but_slower_in_wall_time_names_the_figure_that_counts(
    tmp_path: Path,
) -> None:
    """1.42x faster per step, but 3.34 s of wall time against 2.86 s: over the run's 40
    steps the saving never pays the fix's fixed cost, so the wall time counts."""
    report = apply_report(tmp_path, 40, [(7.0, 3.33), (7.05, 3.34), (7.1, 3.35)])
    (line,) = [f for f in report.findings if f.startswith("Best proven")]
    assert "faster per step" in line
    assert "Its wall time over the 30-step re-runs was 3.34 (3.33–3.35) s" in line
    assert "The wall time is the one that counts for the run as recorded (40 steps)" in line


def test_in_a_long_run_the_per_step_figure_counts(tmp_path: Path) -> None:
    report = apply_report(tmp_path, 5000, [(7.0, 3.33), (7.05, 3.34), (7.1, 3.35)])
    (line,) = [f for f in report.findings if f.startswith("Best proven")]
    assert "The per-step figure is the one that counts for the run as recorded (5000 steps)" in line


def test_no_verdict_when_other_load_contaminated_every_repeat(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(IGNORE_LOAD_ENV)
    report = apply_report(tmp_path, 40, [(7.0, 3.3)] * 3, other=1.9)
    verdicts = [f for f in report.findings if f.startswith(("No verdict", "No fix", "Best"))]
    assert verdicts and verdicts[0].startswith("No verdict: not a finding: other processes kept")
    assert "keep the run as it was" not in " ".join(report.findings)
