"""Statistics over repeats: mean +- sample std, its formatting, curves, per-step stages."""

from __future__ import annotations

import math
import statistics
from pathlib import Path

import pytest

from trainscope.analysis.stats import (
    compare_text,
    epoch_seconds,
    fmt_mean_std,
    fmt_mean_std_sig,
    fmt_sig,
    fmt_spread,
    loader_start_seconds,
    mean_curve,
    mean_std,
    measured,
    per_step_stages,
    step_losses,
)
from trainscope.records.run_dir import RunRecord
from trainscope.render.table import MISSING, fmt_bytes, fmt_int, fmt_rate, fmt_seconds
from trainscope.util.spread import spread

pytestmark = pytest.mark.timeout(60)


# ---------------------------------------------------------------------------------------
# mean_std
# ---------------------------------------------------------------------------------------


def test_mean_std_of_nothing() -> None:
    assert mean_std([]) == (None, None, 0)
    assert mean_std(iter(())) == (None, None, 0)


def test_mean_std_of_one_value_has_zero_std() -> None:
    assert mean_std([2.5]) == (2.5, 0.0, 1)


def test_mean_std_of_three_values_uses_the_sample_std() -> None:
    m, s, n = mean_std([1.0, 2.0, 4.0])
    assert n == 3
    assert m == pytest.approx(7 / 3)
    assert s == pytest.approx(statistics.stdev([1.0, 2.0, 4.0]))  # n - 1 in the denominator
    assert s != pytest.approx(statistics.pstdev([1.0, 2.0, 4.0]))
    assert mean_std([1, 2, 3]) == (2.0, 1.0, 3)


def test_mean_std_ignores_non_finite_bools_and_non_numbers() -> None:
    values = [1, True, False, None, math.nan, math.inf, -math.inf, "3", 2.0, 3]
    assert mean_std(values) == (2.0, 1.0, 3)
    assert mean_std([None, math.nan, True]) == (None, None, 0)


def test_mean_std_accepts_a_generator() -> None:
    assert mean_std(x for x in (4.0, 6.0)) == (5.0, pytest.approx(math.sqrt(2)), 2)


# ---------------------------------------------------------------------------------------
# fmt_mean_std
# ---------------------------------------------------------------------------------------


def test_fmt_mean_std_missing_mean() -> None:
    assert fmt_mean_std(None, None, fmt_seconds) == MISSING
    assert fmt_mean_std(None, 0.1, fmt_seconds, 3) == MISSING


def test_fmt_mean_std_single_value_has_no_plus_minus() -> None:
    assert fmt_mean_std(0.5, 0.0, fmt_seconds, 1) == "0.500"
    assert fmt_mean_std(0.5, None, fmt_seconds, 3) == "0.500"


def test_fmt_mean_std_shows_mean_and_std() -> None:
    assert fmt_mean_std(0.123, 0.004, fmt_seconds, 3) == "0.123 ± 0.004"
    assert fmt_mean_std(0.123, 0.004, fmt_seconds) == "0.123 ± 0.004"  # n unknown
    assert fmt_mean_std(2.0, 0.0, fmt_seconds, 2) == "2.000 ± 0.000"  # identical repeats


def test_fmt_mean_std_tiny_std_collapses_to_one_significant_digit() -> None:
    # fmt_seconds keeps 4 significant digits of a tiny value: 0.0001234 is 9 characters
    # beside a 5-character mean; one significant digit says enough.
    assert fmt_seconds(0.0001234) == "0.0001234"
    assert fmt_mean_std(0.011, 0.0001234, fmt_seconds, 2) == "0.011 ± 0.0001"
    assert fmt_mean_std(0.011, 0.0004567, fmt_seconds, 2) == "0.011 ± 0.0005"


def test_fmt_mean_std_keeps_a_std_as_long_as_the_mean() -> None:
    # Mean and std both tiny: neither is collapsed (the std is no longer than the mean + 2).
    assert fmt_mean_std(0.0002042, 0.00002923, fmt_seconds, 2) == "0.0002042 ± 0.00002923"


def test_fmt_mean_std_uses_the_given_formatter() -> None:
    assert fmt_mean_std(12.3456, 1.5, lambda x: f"{x:.1f}", 3) == "12.3 ± 1.5"


# ---------------------------------------------------------------------------------------
# Curves and run records
# ---------------------------------------------------------------------------------------


def test_mean_curve_over_shared_steps_only() -> None:
    a = ([1, 2, 3, 4], [1.0, 2.0, 3.0, 4.0])
    b = ([2, 3, 4, 5], [3.0, 4.0, 5.0, 6.0])
    c = ([4, 3, 2], [0.0, 0.0, 0.0])  # unordered steps
    assert mean_curve([a, b]) == ([2, 3, 4], [2.5, 3.5, 4.5])
    steps, values = mean_curve([a, b, c])
    assert steps == [2, 3, 4]
    assert values == pytest.approx([5 / 3, 7 / 3, 3.0])


def test_mean_curve_edge_cases() -> None:
    assert mean_curve([]) == ([], [])
    assert mean_curve([([3, 1], [0.3, 0.1])]) == ([1, 3], [0.1, 0.3])
    assert mean_curve([([1, 2], [1.0, 2.0]), ([3, 4], [3.0, 4.0])]) == ([], [])
    assert mean_curve([([1, 2], [1.0, 2.0]), ([], [])]) == ([], [])


def record(tmp_path: Path, metrics: list[dict], summary: dict | None = None) -> RunRecord:
    return RunRecord(path=tmp_path, summary=summary or {}, metrics=metrics)


def test_per_step_stages_from_step_events(tmp_path: Path) -> None:
    metrics = [
        {"event": "setup", "seconds": 0.5},
        {
            "event": "step",
            "step": 1,
            "loss": 2.0,
            "stages": {"data_wait": 0.1, "h2d": 0.01, "forward": 0.2, "backward": 0.3},
        },
        {"event": "epoch", "stages": {"data_wait": 99.0}},  # not a step: ignored
        {
            "event": "step",
            "step": 2,
            "loss": 1.0,
            "stages": {"data_wait": 0.3, "forward": 0.4, "backward": 0.5, "optimizer": 0.05},
        },
        {"event": "step", "step": 3, "loss": 0.5},  # no stages (not resolved yet)
        {"event": "step", "step": 4, "stages": {"data_wait": None, "forward": math.nan}},
    ]
    out = per_step_stages(record(tmp_path, metrics))
    assert list(out) == ["data_wait", "h2d", "forward", "backward", "optimizer"]
    assert out["data_wait"] == pytest.approx(0.2)
    assert out["h2d"] == pytest.approx(0.01)  # only the step that measured it
    assert out["forward"] == pytest.approx(0.3)
    assert out["backward"] == pytest.approx(0.4)
    assert out["optimizer"] == pytest.approx(0.05)


def test_per_step_stages_without_steps_is_all_zero(tmp_path: Path) -> None:
    out = per_step_stages(record(tmp_path, [{"event": "epoch", "epoch": 1}]))
    assert out == dict.fromkeys(("data_wait", "h2d", "forward", "backward", "optimizer"), 0.0)


def test_step_losses_skip_steps_without_a_loss(tmp_path: Path) -> None:
    metrics = [
        {"event": "step", "step": 1, "loss": 2.0},
        {"event": "step", "step": 2, "loss": None},
        {"event": "step", "loss": 1.5},
        {"event": "epoch", "step": 3, "loss": 9.0},
        {"event": "step", "step": 4, "loss": 1},
    ]
    assert step_losses(record(tmp_path, metrics)) == ([1, 4], [2.0, 1.0])


def test_epoch_and_loader_start_seconds(tmp_path: Path) -> None:
    summary = {
        "epochs": [
            {"duration_s": 0.2, "loader_start_s": 0.01},
            {"duration_s": 0.4, "loader_start_s": 0.03},
            {"duration_s": None},
        ]
    }
    rec = record(tmp_path, [], summary)
    assert epoch_seconds(rec) == pytest.approx(0.3)
    assert loader_start_seconds(rec) == pytest.approx(0.02)
    empty = record(tmp_path, [], {"epochs": None})
    assert epoch_seconds(empty) is None and loader_start_seconds(empty) is None


@pytest.mark.parametrize(
    ("x", "want"),
    [(0.0042, "0.00420"), (0.07534, "0.0753"), (1.234, "1.23"), (123.4, "123"), (0, "0")],
)
def test_fmt_sig(x: float, want: str) -> None:
    assert fmt_sig(x) == want


def test_fmt_mean_std_sig_uses_the_means_decimals() -> None:
    assert fmt_mean_std_sig(0.0042, 0.00031, 3) == "0.00420 ± 0.00031"
    assert fmt_mean_std_sig(75.34, 2.2, 3) == "75.3 ± 2.2"
    assert fmt_mean_std_sig(0.5, 0.1, 1) == "0.500"
    assert fmt_mean_std_sig(None, None, 0) == "–"


# ---------------------------------------------------------------------------------------
# Measured spreads: three significant digits (README, "How a study reports numbers")
# ---------------------------------------------------------------------------------------


def _three_decimals(x: object) -> str:
    # What a study's own formatter may write: fixed decimals (a loss, ms per step).
    return "–" if not isinstance(x, float) else f"{x:.3f}"


def test_a_spread_shows_three_significant_digits_whatever_its_formatter() -> None:
    assert fmt_spread(spread([26.901, 29.338, 31.775]), _three_decimals) == "29.3 (26.9–31.8)"
    assert fmt_spread(spread([26.901, 29.338, 31.775])) == "29.3 (26.9–31.8)"
    # Percentages (accuracies at 2 decimals) and ms (seconds x 1000) alike.
    assert fmt_spread(spread([0.5562, 0.5562, 0.5608]), lambda v: f"{100 * v:.2f}%") == (
        "55.6% (55.6%–56.1%)"
    )
    ms = fmt_spread(spread([0.0013121, 0.0012853, 0.0013391]), lambda v: f"{1e3 * v:.3f}")
    assert ms == "1.31 (1.29–1.34)"
    # Equal once held to 3 digits: said so.
    assert fmt_spread(spread([1.0001, 1.0002]), _three_decimals) == "1.00 (all equal)"


def test_measured_rounds_the_value_not_its_text() -> None:
    # "0.1245" rounded again would read 0.124 (0.1245 is below it in binary); x is 0.12451.
    assert measured(lambda v: f"{v:.4f}", 0.12451) == "0.125"
    assert measured(lambda v: f"{v:.3f}", -29.338) == "-29.3"


def test_counts_and_bytes_keep_their_digits() -> None:
    assert measured(lambda v: f"{v:.1f}", 1312.46) == "1312"  # digits left of the point
    assert fmt_spread(spread([350_000_000] * 3), fmt_bytes) == "333.8 MiB (all equal)"
    assert fmt_spread(spread([22_713_986] * 2), fmt_int) == "22,713,986 (all equal)"
    assert fmt_spread(spread([19_259.4, 19_470.2]), fmt_rate) == "19,365 (19,259–19,470)"
    assert measured(lambda v: f"{v:.2f}", 0.06) == "0.06"  # fewer digits: as written
    a, b = spread([1.3121, 1.2853, 1.3391]), spread([2.0691, 1.9512, 2.0753])
    assert "(1.31 vs 2.07, n=3 and 3)" in compare_text("a", a, "b", b, "time", fmt=_three_decimals)
