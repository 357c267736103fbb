"""benchmarks/profile_overhead.py: what it reads from nanoGPT's output and how it says a
difference (planted figures; the benchmark itself is run on purpose, never here)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.benchmarks.scripts import load_benchmark

po = load_benchmark("profile_overhead")

# nanoGPT's own lines (train.py prints them), with its evaluation and checkpoint lines
NANOGPT_OUT = """\
Overriding config with config/train_shakespeare_char.py:
step 0: train loss 4.2874, val loss 4.2823
iter 0: loss 4.2649, time 1490.28ms, mfu -100.00%
iter 1: loss 4.1340, time 77.13ms, mfu -100.00%
saving checkpoint to out-shakespeare-char
iter 2: loss 3.9930, time 75.50ms, mfu 0.02%
"""


def test_nanogpt_iteration_times_are_read_from_its_own_lines() -> None:
    assert po._iter_ms(NANOGPT_OUT) == [1490.28, 77.13, 75.5]
    assert po._iter_ms("no iterations here\n") == []


def test_a_difference_is_said_only_where_the_ranges_do_not_overlap() -> None:
    assert po.overlap([1.0, 2.0], [1.5, 3.0])
    assert not po.overlap([1.0, 1.2], [1.3, 1.5])
    assert po.span([2.0, 1.0, 3.0]) == "2 (1-3, n=3)"


def test_nanogpt_without_a_prepared_clone_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="no nanoGPT clone"):
        po.nanogpt(tmp_path, rounds=1, steps=10)
