"""benchmarks/doctor_cases.py: every case is a valid run configuration naming a rule the
doctor has, and its tallies count what they say (planted results: no runs)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.benchmarks.scripts import load_benchmark
from trainscope.cli import build_parser, overrides_from_args
from trainscope.config import resolve
from trainscope.diagnosis.rules import RULES

dc = load_benchmark("doctor_cases")

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize("case", dc.CASES + dc.GPU_CASES, ids=lambda c: c.name)
def test_each_case_is_a_run_the_cli_accepts(case, tmp_path: Path) -> None:
    args = [a.format(data=tmp_path, out=tmp_path) for a in case.args]
    parsed = build_parser().parse_args(["run", *args, "--threads", case.threads])
    cfg = resolve(None, overrides_from_args(parsed))
    assert cfg.train.epochs * (cfg.train.max_steps_per_epoch or 200) <= 1000  # small runs
    assert case.rule is None or case.rule in RULES


def test_the_suite_has_what_the_issue_asks() -> None:
    planted = [c for c in dc.CASES if c.kind != "healthy"]
    judged = [c for c in planted if c.kind in ("speed", "memory")]
    assert len(planted) >= 12 and len(judged) >= 12
    assert sum(c.kind == "healthy" for c in dc.CASES) >= 3
    assert len({c.rule for c in planted}) == len(planted)  # one problem each


def test_the_tallies_count_ranks_healthy_runs_and_proofs() -> None:
    def row(name, kind, rules, rank, proven=None, severities=None):
        r = {"case": name, "kind": kind, "diagnosis": {
            "rules": rules, "severities": severities or ["major"] * len(rules),
            "rank": rank, "serious": rules}}  # fmt: skip
        if proven is not None:
            r["apply"] = {"baseline": "1 ms", "fixed": "0.5 ms", "verdict": "x",
                          "proven": proven}  # fmt: skip
        return r

    text = dc.markdown([
        row("a", "speed", ["a", "b"], 1, proven=True),
        row("b", "speed", ["x", "b"], 2, proven=False),
        row("c", "memory", ["x", "y", "z", "c"], 4, proven=True),
        row("d", "numerics", ["d"], 1, proven=False),
        row("h", "healthy", ["short-run"], None),
        row("k", "healthy", [], None),
    ])  # fmt: skip
    assert "planted problem the top finding: 2 of 4; among the top 3: 3 of 4" in text
    assert "healthy runs with nothing above minor: 1 of 2" in text
    assert "speed and memory fixes proven by --apply: 2 of 3" in text
    assert "| b | x (major) | 2 | 1 ms → 0.5 ms | x |" in text
