"""benchmarks/gloo_call_noise.py runs and prints every case (timings are not asserted).

The script as a user runs it, in a process of its own that spawns its two gloo workers:
``slow`` (seconds of interpreter start-up)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).parents[2] / "benchmarks" / "gloo_call_noise.py"


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_quick_run_prints_every_case() -> None:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--calls", "10", "--rounds", "1"],
        capture_output=True,
        text=True,
        timeout=110,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert "mean ms" in lines[0] and len(lines) == 5
    assert any("bucketed sync (10 tensors)" in x for x in lines)
