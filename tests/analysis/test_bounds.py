"""Speed-ups beyond what physics allows are reported as invalid measurements, never as
findings (analysis.bounds, and the study reports that use it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from tests.reports.test_honest_numbers import Planted, report_of
from trainscope.analysis.bounds import beyond, cores_bound, invalid_text, speedup_floor
from trainscope.config import from_dict
from trainscope.studies import scaling
from trainscope.util.spread import spread

CPU = torch.device("cpu")


def test_the_floor_is_the_least_speed_up_the_spreads_allow() -> None:
    base, new = spread([10.0, 11.0, 12.0]), spread([2.0, 2.5, 4.0])
    assert speedup_floor(base, new) == 2.5  # the fastest baseline over the slowest new
    assert beyond(base, new, 2.0) == 2.5  # 2 processes cannot give 2.5x
    assert beyond(base, new, 2.4) is None  # within the 5% slack
    assert beyond(spread([10.0, 11.0, 12.0]), spread([4.0, 6.0, 11.0]), 2.0) is None
    assert cores_bound(4, 2) == 2.0 and cores_bound(2, None) == 2.0 and cores_bound(2, 8) == 2.0
    text = invalid_text("the speed-up", 5.43, 2.0, "2 processes on 2 cores can give")
    assert text.startswith("invalid measurement, not a finding: the speed-up is at least 5.43x")


def _scaling_rep(step_ms: float) -> dict[str, Any]:
    return {
        "steady_state": {
            "warmup_steps": 5,
            "step_s": {
                "median": step_ms / 1e3,
                "low": step_ms / 1e3,
                "high": step_ms / 1e3,
                "n": 7,
                "kind": "IQR",
            },
        },
        "samples_per_s": 1000.0 / step_ms,
        "wall_time_s": 5.0,
        "cpu": {"threads": 1, "processes_on_node": 1, "cores": 2, "other_cores": 0.0},
    }


def _strong_report(tmp_path: Path, one: list[float], two: list[float]) -> Any:
    """A planted strong-scaling study: one and two processes' step times (ms), 3 repeats."""
    planted = {f"strong-n1/r{k}": _scaling_rep(ms) for k, ms in enumerate(one, 1)}
    planted |= {f"strong-n2/r{k}": _scaling_rep(ms) for k, ms in enumerate(two, 1)}
    base = from_dict({"runtime": {"device": "cpu", "threads": 2},
                      "dist": {"strategy": "ddp"}}).to_dict()  # fmt: skip
    plan = scaling.plan(base, CPU, repeats=3, nprocs=(1, 2), modes=("strong",))
    return report_of(plan, tmp_path, Planted(planted, fresh=True))


def test_strong_scaling_beyond_100_percent_is_an_invalid_measurement(tmp_path: Path) -> None:
    """The lab's "strong scaling speed-up 5.43x, efficiency 271%" from 2 processes on 2
    cores: the one-process repeats ran slowed (90 ms), the 2-process ones at 16 ms."""
    report = _strong_report(tmp_path, [88, 90, 95], [16, 16.5, 17])
    (finding,) = [f for f in report.findings if f.startswith("strong scaling on 2")]
    assert "invalid measurement, not a finding" in finding, finding
    assert "beyond the 2x that 2 processes on 2 cores can give" in finding
    assert "efficiency" not in finding
    row = report.tables["strong"].cells()[1]
    assert row[5].endswith("(invalid)") and row[6].endswith("(invalid)")


def test_a_plausible_speed_up_is_still_stated(tmp_path: Path) -> None:
    report = _strong_report(tmp_path, [30, 31, 32], [17, 17.5, 18])
    (finding,) = [f for f in report.findings if f.startswith("strong scaling on 2")]
    assert "speed-up 1.77x, efficiency 89%" in finding, finding


@pytest.mark.parametrize("loaded", ["strong-n1", "strong-n2"])
def test_scaling_measured_only_under_load_is_not_a_finding(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, loaded: str
) -> None:
    """Every repeat of one process count ran beside 1.3 cores of other load: its row
    has no figure to compare, and the finding says so rather than "no step measured"."""
    monkeypatch.delenv("TRAINSCOPE_IGNORE_LOAD", raising=False)
    cpu = {"cpu": {"other_cores": 1.3, "threads": 1, "processes_on_node": 2, "cores": 2}}
    planted = {f"strong-n1/r{k}": _scaling_rep(30) for k in (1, 2, 3)}
    planted |= {f"strong-n2/r{k}": _scaling_rep(17) for k in (1, 2, 3)}
    planted |= {f"{loaded}/r{k}": {**planted[f"{loaded}/r{k}"], **cpu} for k in (1, 2, 3)}
    base = from_dict({"runtime": {"device": "cpu", "threads": 2},
                      "dist": {"strategy": "ddp"}}).to_dict()  # fmt: skip
    plan = scaling.plan(base, CPU, repeats=3, nprocs=(1, 2), modes=("strong",))
    report = report_of(plan, tmp_path, Planted(planted, fresh=True))
    (finding,) = [f for f in report.findings if f.startswith("strong scaling on 2")]
    assert finding == ("strong scaling on 2 processes: not a finding: other processes kept "
                       f"1.3 cores busy during all 3 repeat(s) of {loaded}.")  # fmt: skip


def test_the_scaling_study_draws_its_speed_up(tmp_path: Path) -> None:
    """Chapter 1 of the lab shows the scaling study: its speed-up figure, ideal line
    beside it, is in the report (PNG and SVG) and in its Markdown."""
    _strong_report(tmp_path, [30, 31, 32], [17, 17.5, 18])
    plots = tmp_path / "study" / "report" / "plots"
    assert (plots / "scaling_speedup.png").stat().st_size > 0
    assert (plots / "scaling_speedup.svg").is_file()
    svg = (plots / "scaling_speedup.svg").read_text()
    assert "ideal (speed-up = processes)" in svg and "strong scaling" in svg
    md = (tmp_path / "study" / "report" / "report.md").read_text()
    assert "![measured speed-up against processes](plots/scaling_speedup.png)" in md


def _loader_report(tmp_path: Path, per_epoch: dict[str, list[float]]) -> Any:
    from trainscope.studies import loader

    planted = {
        f"{cfg}/r{k}": {
            "epochs": [{"duration_s": s, "loader_start_s": 0.1}],
            "samples_per_s": 1 / s,
            "cpu": {"threads": 1, "processes_on_node": 1, "cores": 2, "other_cores": 0.0},
        }
        for cfg, secs in per_epoch.items()
        for k, s in enumerate(secs, 1)
    }
    base = from_dict({"runtime": {"device": "cpu", "threads": 2}}).to_dict()
    plan = loader.plan(base, CPU, repeats=len(next(iter(per_epoch.values()))),
                       workers=[0, 2], sweep_epochs=1, iter_workers=[], iter_epochs=1)  # fmt: skip
    plan.runs[:] = [r for r in plan.runs if r.group == "sweep" or r.warmup]
    return report_of(plan, tmp_path, Planted(planted))


def test_a_loader_speed_up_beyond_what_its_workers_can_give_is_invalid(tmp_path: Path) -> None:
    """num_workers=0 slowed to 58 s an epoch (unrecorded load), 2 workers at 2.3 s: 25x
    from 2 workers and the main process on 2 cores, which can give at most 2x."""
    report = _loader_report(tmp_path, {"w0": [57.0, 58.0, 59.0], "w2": [2.2, 2.3, 2.4]})
    (finding,) = [f for f in report.findings if "num_workers=0" in f]
    assert finding.startswith("2 workers vs num_workers=0: invalid measurement, not a finding")
    assert "beyond the 2x that 2 workers on 2 cores can give" in finding
    speedups = {r[1]: r[6] for r in report.tables["sweep"].cells() if r[0] == "DataLoader"}
    assert speedups["2"] == "invalid"


def test_two_repeats_with_one_outlier_name_no_fastest_setting(tmp_path: Path) -> None:
    """The quick lab's "25.18x for 2 workers" at n=2, one repeat a 58 s spell: too few
    repeats to conclude, and no ratio in the table."""
    report = _loader_report(tmp_path, {"w0": [2.4, 58.0], "w2": [2.2, 2.3]})
    (finding,) = [f for f in report.findings if "DataLoader setting" in f]
    assert finding.startswith("No fastest DataLoader setting named: too few repeats to conclude")
    speedups = {r[1]: r[6] for r in report.tables["sweep"].cells() if r[0] == "DataLoader"}
    assert speedups["2"] == "≈"


def test_ddp_faster_than_its_processes_allow_is_invalid(tmp_path: Path) -> None:
    """Chapter 9's "DDP takes 0.06x of one process's time (5.59 vs 90.6 ms)" on 2
    processes: not a finding."""
    from trainscope.studies import strategies

    planted = {}
    for name, ms in (("single", [88.0, 90.6, 92.0]), ("ddp", [5.5, 5.59, 5.7])):
        for k, m in enumerate(ms, 1):
            planted[f"{name}/r{k}"] = {"train_time_s": m * 10 / 1e3, "steps": 10,
                                       "cpu": {"threads": 1, "cores": 2}}  # fmt: skip
    base = from_dict({"runtime": {"device": "cpu", "threads": 2}}).to_dict()
    plan = strategies.plan(base, CPU, repeats=3, strategies=["single", "ddp"])
    report = report_of(plan, tmp_path, Planted(planted, fresh=True))
    (finding,) = [f for f in report.findings if f.startswith("ddp / single")]
    assert "invalid measurement, not a finding" in finding, finding
    assert "0.06x" not in finding
