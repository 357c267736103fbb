"""Repeats measured under other load: left out of every comparison, run again within a
bound shown in the report, and "not a finding" where the load never drops
(studies.remeasure, records.study_dir, analysis.cpu)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.reports.test_honest_numbers import BASE, Planted
from tests.runtime.test_threads import _orphan_busy_loop
from tests.studies.heap import frozen_heap
from trainscope.config import RunConfig, available_cpus, from_dict
from trainscope.records.study_dir import PlannedRun, load_study
from trainscope.reports.study_report import build_study_report
from trainscope.studies import precision
from trainscope.studies.base import execute
from trainscope.studies.remeasure import Bound, attempts_wanted, remeasure
from trainscope.util.load import IGNORE_LOAD_ENV, LOADED_CORES_ENV

pytestmark = pytest.mark.timeout(300)
CPU = torch.device("cpu")


@pytest.fixture(autouse=True)
def rule_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """The load rule as a user has it (the suite switches it off: tests/conftest.py)."""
    monkeypatch.delenv(IGNORE_LOAD_ENV, raising=False)
    monkeypatch.delenv(LOADED_CORES_ENV, raising=False)


def rep(train: float, other: float = 0.0) -> dict[str, Any]:
    """A planted precision repeat: its training time, and the other load it ran under."""
    return {
        "train_time_s": train,
        "wall_time_s": train + 0.5,
        "samples": 4379,
        "samples_per_s": 4379 / train,
        "test_accuracy": 0.95,
        "epochs": [{"train_loss": 0.1, "val_accuracy": 0.95}],
        "cpu": {"threads": 1, "processes_on_node": 1, "cores": 2, "other_cores": other},
    }


class Attempts(Planted):
    """Planted records that change from one attempt of a run to the next: each run id
    takes the next summary of its list (the last one again once they run out)."""

    def __init__(self, attempts: dict[str, list[dict[str, Any]]]) -> None:
        super().__init__({})
        self.attempts = attempts
        self.calls: dict[str, int] = {}

    def __call__(self, cfg: RunConfig, console: Any) -> dict[str, Any]:
        run_id = f"{Path(cfg.out).parent.name}/{Path(cfg.out).name}"
        k = self.calls[run_id] = self.calls.get(run_id, 0) + 1
        options = self.attempts.get(run_id) or [{}]
        self.summaries = {run_id: options[min(k, len(options)) - 1]}
        return super().__call__(cfg, console)


QUIET = {f"fp32/r{k}": [rep(1.0 + 0.01 * k)] for k in (1, 2, 3)}


def study_of(tmp_path: Path, planted: Attempts, remeasure_: int) -> Any:
    plan = precision.plan(BASE, CPU, repeats=3, precisions=["fp32", "bf16"])
    with frozen_heap():
        execute(plan, tmp_path / "s", say=lambda _: None, run_fn=planted, remeasure=remeasure_)
        return build_study_report(tmp_path / "s")


def test_a_loaded_repeat_is_run_again_and_the_quiet_result_stands(tmp_path: Path) -> None:
    """bf16/r2 ran beside 1.8 busy cores and took 9 s (quiet: 2.65 s). It is run again,
    quiet, and the finding is what three quiet repeats say."""
    planted = Attempts({**QUIET, "bf16/r1": [rep(2.60)], "bf16/r3": [rep(2.70)],
                        "bf16/r2": [rep(9.0, other=1.8), rep(2.65)]})  # fmt: skip
    report = study_of(tmp_path, planted, remeasure_=2)
    assert planted.calls["bf16/r2"] == 2 and planted.calls["bf16/r1"] == 1
    (finding,) = [f for f in report.findings if f.startswith("bf16 vs fp32")]
    assert "throughput 0.38x" in finding, finding
    assert not any("not a finding" in f for f in report.findings)
    kept = json.loads((tmp_path / "s" / "study.json").read_text())["remeasure"]
    assert kept["still_loaded"] == [] and kept["bound"]["attempts"] == 2
    assert kept["attempts"]["bf16/r2"][0]["other_cores"] == 1.8
    md = report.markdown_path.read_text(encoding="utf-8")
    assert "Re-measured under other load: 1 repeat(s) ran again (at most 2 more runs each" in md


def test_load_that_never_drops_gives_not_a_finding_instead_of_a_ratio(tmp_path: Path) -> None:
    """Every bf16 repeat, every attempt, beside 1.8 busy cores: bf16 has no repeat any
    comparison may use. No ratio; the figures are still listed as loaded."""
    planted = Attempts({**QUIET, **{f"bf16/r{k}": [rep(9.0, other=1.8)] for k in (1, 2, 3)}})
    report = study_of(tmp_path, planted, remeasure_=1)
    assert [planted.calls[f"bf16/r{k}"] for k in (1, 2, 3)] == [2, 2, 2]  # the bound: 1 more
    assert report.findings[0] == (
        "not a finding: other processes kept 1.8 cores busy during all 3 repeat(s) of bf16"
    )
    assert not any("x (" in f and "bf16" in f for f in report.findings[1:]), report.findings
    study = load_study(tmp_path / "s")
    assert study.measured("bf16") == [] and len(study.loaded("bf16")) == 3
    assert len(study.measured("fp32")) == 3
    kept = study.meta["remeasure"]
    assert kept["still_loaded"] == ["bf16/r1", "bf16/r2", "bf16/r3"]
    md = report.markdown_path.read_text(encoding="utf-8")
    assert "Measured under other load, so left out of every comparison: bf16/r1 (1.8 cores)" in md


def test_with_remeasure_0_a_loaded_repeat_is_only_left_out(tmp_path: Path) -> None:
    planted = Attempts({**QUIET, "bf16/r1": [rep(2.60)], "bf16/r3": [rep(2.70)],
                        "bf16/r2": [rep(9.0, other=1.8), rep(2.65)]})  # fmt: skip
    report = study_of(tmp_path, planted, remeasure_=0)
    assert planted.calls["bf16/r2"] == 1
    (finding,) = [f for f in report.findings if f.startswith("bf16 vs fp32")]
    said = "throughput: too few repeats to conclude at n=2 and 3 (3 each needed)"
    assert said in finding, finding


def test_the_bound_in_time_stops_re_measuring(tmp_path: Path) -> None:
    runs = [PlannedRun(config="a", repeat=k) for k in (1, 2, 3)]
    for r in runs:
        d = tmp_path / r.rel_dir
        d.mkdir(parents=True)
        (d / "summary.json").write_text(json.dumps({"status": "completed", **rep(1.0, 1.5)}))
    ran: list[str] = []

    def rerun(r: PlannedRun) -> dict[str, Any]:
        ran.append(r.id)
        time.sleep(0.05)
        return {"status": "completed", **rep(1.0, 1.5)}

    lines: list[str] = []
    kept = remeasure(runs, tmp_path, rerun, lines.append, Bound(attempts=5, seconds=0.0))
    assert kept is not None and kept["out_of_time"] is True
    assert ran == [] and kept["still_loaded"] == ["a/r1", "a/r2", "a/r3"]  # none in 0 s
    assert "at most 5 more runs of each, 0 s in all" in lines[0]
    assert "(out of time)" in lines[-1]


def test_the_re_measure_count_is_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    from trainscope.errors import ConfigError

    monkeypatch.delenv("TRAINSCOPE_REMEASURE")
    assert attempts_wanted(None) == 2 and attempts_wanted(0) == 0
    monkeypatch.setenv("TRAINSCOPE_REMEASURE", "x")
    with pytest.raises(ConfigError, match="TRAINSCOPE_REMEASURE"):
        attempts_wanted(None)
    with pytest.raises(ConfigError, match="between 0 and 100"):
        attempts_wanted(10**6)


@pytest.mark.slow
@pytest.mark.skipif(available_cpus() > 4, reason="loads every core: kept to small machines")
def test_real_busy_loops_beside_one_repeat_are_seen_and_that_repeat_is_run_again(
    tmp_path: Path,
) -> None:
    """Busy loops (twice as many as cores) started for bf16/r1's first run only, by the
    test: the record says it was loaded, the study runs it again, and no comparison
    uses the loaded attempt. Whether the new attempt is quiet depends on what else this
    machine runs (the suite's other worker): either it is used, or it is listed."""
    from trainscope.train.run import run

    hogs: list[int] = []

    def run_fn(cfg: RunConfig, console: Any) -> dict[str, Any]:
        first = cfg.out.endswith("bf16/r1") and not hogs
        if first:
            hogs.extend(_orphan_busy_loop() for _ in range(2 * available_cpus()))
            time.sleep(0.3)
        try:
            return run(cfg, console)
        finally:
            if first:
                for pid in hogs:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)

    base = from_dict({"runtime": {"device": "cpu", "threads": 1},
                      "train": {"epochs": 1, "max_steps_per_epoch": 20}}).to_dict()  # fmt: skip
    plan = precision.plan(base, CPU, repeats=3, precisions=["fp32", "bf16"])
    with frozen_heap():
        execute(plan, tmp_path / "s", say=lambda _: None, run_fn=run_fn, remeasure=1)
    study = load_study(tmp_path / "s")
    kept = study.meta["remeasure"]
    assert kept["attempts"]["bf16/r1"][0]["other_cores"] >= 1.0, kept
    again = study.records["bf16/r1"]
    used = again in study.measured("bf16")
    assert used == ("bf16/r1" not in kept["still_loaded"])
