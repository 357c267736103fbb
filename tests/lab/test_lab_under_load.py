"""The lab's chapters under planted load: a study chapter's short answer starts with what
load left without evidence, and chapter 1's straggler comparison claims nothing from
loaded runs (the lab beside two busy loops stated "one slow rank vs none: 2.80x")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.diagnosis.test_rules import write_run
from tests.reports.test_honest_numbers import BASE, CPU, Planted
from tests.studies.heap import frozen_heap
from trainscope.lab import chapter_distribute
from trainscope.lab.chapter_runs import study_part
from trainscope.render.document import Document
from trainscope.studies import profile
from trainscope.studies.base import execute

LOAD = {"other_cores": 1.2, "threads": 1, "processes_on_node": 2, "cores": 2}


@pytest.fixture
def load_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRAINSCOPE_IGNORE_LOAD", raising=False)


def _study(folder: Path, loaded: bool) -> None:
    extra = {"cpu": LOAD} if loaded else {}
    planted = Planted({f"run/r{k}": extra for k in (1, 2, 3)})
    with frozen_heap():
        execute(profile.plan(BASE, CPU, repeats=3), folder, say=lambda _: None,
                run_fn=planted, remeasure=0)  # fmt: skip


def test_a_study_chapters_answer_starts_with_what_load_left(
    tmp_path: Path, load_rule: None
) -> None:
    _study(tmp_path / "study", loaded=True)
    section = study_part(tmp_path / "study", Document("lab"), tmp_path / "plots")
    assert section.findings[0] == (
        "not a finding: other processes kept 1.2 cores busy during all 3 repeat(s) of run"
    )


def _straggler_run(path: Path, step_ms: float, loaded: bool) -> None:
    ranks: list[dict[str, Any]] = [
        {"rank": r, "steady_state": {"stage_s_median": {"data_wait": 1e-3, "backward": 2e-3}}}
        for r in (0, 1)
    ]
    steady = {"warmup_steps": 5, "step_s": {"median": step_ms / 1e3}}
    summary = {"strategy": "ddp", "world_size": 2, "ranks": ranks, "steady_state": steady}
    if loaded:
        summary["cpu"] = LOAD
    write_run(path, summary=summary)


def test_the_straggler_comparison_claims_nothing_from_loaded_runs(
    tmp_path: Path, load_rule: None
) -> None:
    folder = tmp_path / "01-distribute"
    _study(folder / "scaling", loaded=False)  # stands in for the scaling study
    for k in (1, 2, 3):
        _straggler_run(folder / "straggler" / f"even-r{k}", 2.6, loaded=False)
        _straggler_run(folder / "straggler" / f"slow-rank-1-r{k}", 8.9, loaded=True)
    section = chapter_distribute.section(folder, Document("lab"), tmp_path / "plots")
    assert ("not a finding: other processes kept 1.2 cores busy during all 3 runs of "
            "slow-rank-1") in section.findings  # fmt: skip
    assert not any(f.startswith("one slow rank vs none") for f in section.findings)
    assert not any(f.startswith("rank 1 is the straggler") for f in section.findings)


@pytest.mark.parametrize("other", [0.0, 1.3])
def test_chapter_12s_evaluation_time_is_no_finding_beside_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, load_rule: None, other: float
) -> None:
    """The quantize command times fp32 and int8 evaluations but records no load: the lab
    measures the load around it, and compares the times only where it was low."""
    import json

    from trainscope.lab import chapter_runs
    from trainscope.reports.section import Section

    folder = tmp_path / "12-int8"
    (folder / "run").mkdir(parents=True)
    evals = {k: {"eval_s": {"repeats": [t] * 5}} for k, t in (("fp32", 0.06), ("int8", 0.09))}
    (folder / "run" / "quantize.json").write_text(json.dumps(evals))
    cpu = {"cpu": {"other_cores": other, "cores": 2}}
    (folder / chapter_runs.QUANTIZE_LOAD).write_text(json.dumps(cpu))
    monkeypatch.setattr(chapter_runs, "quantize_section", lambda run, part: Section())
    findings = chapter_runs.int8_section(folder, Document("lab"), tmp_path).findings
    if other:
        assert findings == ["not a finding: other processes kept 1.3 cores busy during the "
                            "quantize command's fp32 and int8 evaluations"]  # fmt: skip
    else:
        assert findings[0].startswith("int8 vs fp32: evaluation time 1.50x")


def test_a_lab_command_records_the_load_beside_it(tmp_path: Path) -> None:
    from trainscope.lab.steps import MakeContext

    ctx = MakeContext(tmp_path, True, None, lambda argv: 0)
    ctx.run(["quantize", "x"], skip=False, load=tmp_path / "load.json")
    import json

    cpu = json.loads((tmp_path / "load.json").read_text())["cpu"]
    assert cpu["other_cores"] >= 0 and cpu["cores"] >= 1


def test_a_command_chapter_records_the_load_and_drops_its_timings_under_it(
    tmp_path: Path, load_rule: None
) -> None:
    """Chapter 10 runs ``trainscope collectives``, whose runs record no load: the lab
    measures it around the command; beside load its busbw and α-β findings give way to
    one "not a finding" and the examples' check stays."""
    import json

    from trainscope.lab.chapters import CHAPTERS
    from trainscope.lab.document import _beside_load
    from trainscope.lab.runner import run_lab
    from trainscope.lab.steps import COMMAND_LOAD

    ten = [c for c in CHAPTERS if c.number == 10]

    def fake_study(argv: list[str]) -> int:
        Path(argv[argv.index("--out") + 1]).mkdir(parents=True)
        return 0

    run_lab(tmp_path / "lab", ten, quick=True, data_root=None, from_dirs=[],
            run_study=fake_study)  # fmt: skip
    folder = tmp_path / "lab" / "studies" / "10-collectives"
    cpu = json.loads((folder / COMMAND_LOAD).read_text())["cpu"]
    assert cpu["other_cores"] >= 0 and cpu["cores"] >= 1
    found = ["every example and identity right", "all_reduce: the largest median busbw 0.7 GB/s"]
    (folder / COMMAND_LOAD).write_text(json.dumps({"cpu": {"other_cores": 1.2, "cores": 2}}))
    assert _beside_load(folder, found) == [
        "every example and identity right",
        "not a finding: other processes kept 1.2 cores busy during the command's timings",
    ]
