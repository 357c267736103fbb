"""benchmarks/default_recipes.py: its seed lists, its summary lines (planted figures), and
one real run of it (one seed, two epochs) in a process of its own (``slow``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.benchmarks.scripts import load_benchmark
from tests.conftest import scaled

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "default_recipes.py"


dr = load_benchmark("default_recipes")


@pytest.mark.timeout(10)
def test_seed_lists_and_summary_lines() -> None:
    assert dr.seeds_of("0-3") == [0, 1, 2, 3] and dr.seeds_of("5,1") == [5, 1]
    rows = [
        {"isa": "native", "figure": f}
        for f in (0.9814, 0.9777, 0.9740)
    ] + [{"isa": "avx2", "figure": None}]  # fmt: skip
    lines = dr.summarise(rows, "digits")
    assert lines == [
        "native: test accuracy median 97.77% (min 97.40, max 98.14, n=3); runs: 98.14, "
        "97.77, 97.40",
        "avx2: no completed run",
    ]
    loss = dr.summarise([{"isa": "native", "figure": 2.3355}], "gpt-char")
    assert loss == ["native: validation loss median 2.336 (min 2.336, max 2.336, n=1); runs: 2.336"]


@pytest.mark.slow  # the script as a command, starting a trainscope run of its own
@pytest.mark.timeout(300)
def test_one_seed_runs_and_is_summarised() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "digits", "--seeds", "0", "--", "--epochs", "2"],
        capture_output=True, text=True, timeout=scaled(240),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    head, line = done.stdout.strip().splitlines()[:2]
    assert head == "digits, default recipe, extra flags: --epochs 2; --threads 1"
    assert line.strip().startswith("native: test accuracy median ") and "n=1" in line
