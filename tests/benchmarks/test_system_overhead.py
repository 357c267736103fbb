"""benchmarks/system_overhead.py: its summaries with planted numbers, and ``--quick``.

No timing is asserted: only the arithmetic, the verdicts and that the command runs (its
``main`` in this process, seven tiny training runs: ``slow``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.benchmarks.scripts import load_benchmark
from trainscope.config import MAX_SYSTEM_INTERVAL_S, MIN_SYSTEM_INTERVAL_S

REPO = Path(__file__).resolve().parents[2]


so = load_benchmark("system_overhead")


@pytest.mark.timeout(10)
def test_settings_are_off_default_and_fast():
    assert so.INTERVALS == {"off": MAX_SYSTEM_INTERVAL_S, "default": 1.0, "fast": 0.1}
    assert so.INTERVALS["fast"] == MIN_SYSTEM_INTERVAL_S


@pytest.mark.timeout(10)
def test_step_times_from_a_summary():
    s = {
        "steps": 100,
        "train_time_s": 0.5,
        "steady_state": {"steps": 95, "time_s": 0.38, "step_s": {"median": 0.0035}},
    }
    assert so.median_step_s(s) == 0.0035
    assert so.mean_step_s(s) == pytest.approx(0.004)
    bare = {"steps": 100, "train_time_s": 0.5, "steady_state": None}
    assert so.median_step_s(bare) == pytest.approx(0.005)  # no steady state: the mean
    assert so.mean_step_s(bare) == pytest.approx(0.005)
    assert so.median_step_s({"steps": 0}) is None and so.mean_step_s({}) is None


@pytest.mark.timeout(10)
def test_overhead_verdicts():
    base = so.spread([1.00, 1.01, 0.99, 1.02, 0.98])
    overlapping = so.spread([1.01, 1.02, 1.00, 1.03, 0.99])
    pct, verdict = so.overhead(base, overlapping)
    assert pct == pytest.approx(1.0) and verdict == "within noise"
    slower = so.spread([1.10, 1.11, 1.09, 1.12, 1.08])
    assert so.overhead(base, slower) == (pytest.approx(10.0), "slower")
    faster = so.spread([0.90, 0.91, 0.89, 0.92, 0.88])
    assert so.overhead(base, faster)[1] == "faster"
    one = so.spread([2.0])  # n = 1 has no spread: never a claim
    assert so.overhead(base, one)[1] == "within noise"
    assert so.overhead(so.spread([]), base) == (None, "n/a")


@pytest.mark.timeout(10)
def test_summarise_and_table():
    def run(med, mean, samples):
        return {"median_step_s": med, "mean_step_s": mean, "samples": samples}

    runs = {
        "off": [run(0.004, 0.0040, 0), run(0.0041, 0.0041, 0), run(0.0039, 0.0040, 0)],
        "default": [run(0.004, 0.0041, 3), run(0.0041, 0.0041, 3), run(0.0040, 0.0040, 4)],
        "fast": [run(0.005, 0.0050, 30), run(0.0051, 0.0052, 31), run(0.0052, 0.0051, 29)],
    }
    rows = {r["setting"]: r for r in so.summarise(runs)}
    assert "median_overhead_pct" not in rows["off"]
    assert rows["default"]["median_verdict"] == "within noise"
    assert rows["fast"]["median_overhead_pct"] == pytest.approx(27.5)
    assert rows["fast"]["median_verdict"] == "slower"
    assert rows["fast"]["mean_verdict"] == "slower"
    assert rows["fast"]["samples_per_run"].median == 30 and rows["fast"]["runs"] == 3
    lines = so.table(so.summarise(runs))
    assert lines[0].startswith("| sampler |") and len(lines) == 5
    assert "| off | 86400 | 3 | 4.000 (min–max 3.900-4.100) | baseline |" in lines[2]
    assert "+27.50% (slower)" in lines[4] and "within noise" in lines[3]


@pytest.mark.timeout(10)
def test_rotations():
    order = so.rotations(("off", "default", "fast"), 4)
    assert order[0] == ("off", "default", "fast") and order[1] == ("default", "fast", "off")
    assert order[3] == order[0]


@pytest.mark.slow  # seven tiny training runs
@pytest.mark.timeout(150)
def test_quick_run_prints_the_table(tmp_path, capsys, monkeypatch):
    out = tmp_path / "overhead.json"
    monkeypatch.chdir(REPO)
    code = so.main(["--quick", "--json", str(out)])
    done = capsys.readouterr()
    assert code == 0, done.out + done.err
    text = done.out
    assert "command: python benchmarks/system_overhead.py --quick --json" in text
    assert "CPUs" in text and "torch" in text and "python" in text
    assert "| sampler | interval (s) | n runs |" in text
    for setting in ("off", "default", "fast"):
        assert f"| {setting} |" in text
    data = json.loads(out.read_text())
    assert {k: len(v) for k, v in data["runs"].items()} == {"off": 2, "default": 2, "fast": 2}
    assert all(r["median_step_s"] > 0 for v in data["runs"].values() for r in v)
    assert all(r["samples"] == 0 for r in data["runs"]["off"])  # off never samples
