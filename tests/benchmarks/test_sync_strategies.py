"""benchmarks/sync_strategies.py: its verdicts with planted timings (no runs, no torch).

No timing is measured: only that a ratio is stated where trainscope's rule allows a claim
(spreads apart) and "no measurable difference" where they overlap or one run is all.
"""

from __future__ import annotations

import pytest

from tests.benchmarks.scripts import load_benchmark

ss = load_benchmark("sync_strategies")


@pytest.mark.timeout(10)
def test_sync_verdicts_state_a_ratio_only_for_separated_timings():
    iter_ms = {
        "ddp": [10.0, 10.2, 9.9, 10.1, 10.3],
        # Separated from ddp (IQR 20.0-20.2 against 9.9-10.2): a ratio.
        "gather-scatter": [20.0, 20.4, 19.8, 20.2, 20.1],
        # Overlapping ddp (IQR 10.0-10.3): no claim, however the medians compare.
        "allreduce": [10.2, 10.0, 10.4, 9.8, 10.3],
    }
    lines = ss.verdicts(iter_ms)
    assert lines == [
        "gather-scatter / ddp: 1.99x",
        "allreduce / ddp: no measurable difference at n=5 (the spreads overlap);"
        " more repeats may separate them",
        "gather-scatter / allreduce: 1.97x",
    ]


@pytest.mark.timeout(10)
def test_sync_verdicts_claim_nothing_from_one_run():
    # One run each has no spread: never a ratio, even for times twice apart.
    lines = ss.verdicts({"ddp": [10.0], "gather-scatter": [20.0], "allreduce": [10.5]})
    assert len(lines) == 3 and not any(line.endswith("x") for line in lines)
    assert all("n=1 has no spread" in line for line in lines)
    # Two runs each, even apart: too few to conclude (a difference needs 3 each).
    two = {"ddp": [10.0, 10.5], "gather-scatter": [15.0, 16.0], "allreduce": [10.4, 11.0]}
    assert "too few repeats to conclude at n=2" in ss.verdicts(two)[0]
    # Three runs each: the min–max ranges decide.
    three = {"ddp": [10.0, 10.2, 10.5], "gather-scatter": [15.0, 15.5, 16.0],
             "allreduce": [10.4, 10.6, 11.0]}  # fmt: skip
    assert ss.verdicts(three)[0] == "gather-scatter / ddp: 1.52x"
    assert "no measurable difference at n=3" in ss.verdicts(three)[1]
