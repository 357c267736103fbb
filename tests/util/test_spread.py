"""The statistics rule: medians with their spread and n, claims only beyond the noise,
outliers flagged. Planted numbers that a mean ± standard deviation misreports."""

from __future__ import annotations

import statistics

import pytest

from trainscope.util.spread import (
    differ,
    indistinguishable_from_best,
    no_difference_text,
    outlier_indices,
    overlap,
    quantile,
    ratio_text,
    spread,
)


def test_one_slow_repeat_does_not_make_an_error_bar_below_zero():
    """[20, 20, 20, 20, 70]: mean ± std is 30 ± 22 (a bar reaching 8, and with a larger
    spike below zero); the median is 20 with an IQR of 20–20 and the spike is flagged."""
    xs = [20.0, 20.0, 20.0, 20.0, 70.0]
    mean, std = statistics.mean(xs), statistics.stdev(xs)
    assert mean - 2 * std < 0  # what the old "mean ± std" figure implied
    sp = spread(xs)
    assert (sp.median, sp.low, sp.high, sp.n, sp.kind) == (20.0, 20.0, 20.0, 5, "IQR")
    assert sp.outliers == (4,)


def test_spread_is_iqr_from_five_values_and_min_max_below():
    assert spread([1, 2, 3, 4]).kind == "min–max"
    four = spread([4, 1, 3, 2])
    assert (four.median, four.low, four.high) == (2.5, 1, 4)
    five = spread([5, 1, 4, 2, 3])
    assert (five.median, five.low, five.high, five.kind) == (3, 2, 4, "IQR")
    assert quantile([1, 2, 3, 4], 0.25) == pytest.approx(1.75)  # numpy's linear method
    one = spread([7])
    assert (one.median, one.n, one.kind) == (7, 1, "single")
    assert spread([None, float("nan"), "x", True]).n == 0


def test_outliers_need_five_values_and_ignore_float_noise():
    assert outlier_indices([1.0, 100.0]) == ()
    assert outlier_indices([0.335, 0.344, 0.345]) == ()  # three values: noise, not an outlier
    assert outlier_indices([10.0, 10.0 + 1e-12, 10.0, 10.0, 10.0]) == ()
    assert outlier_indices([10.0, 11.0, 10.5, 10.2, 30.0]) == (4,)


def test_a_difference_is_claimed_only_when_the_spreads_do_not_overlap():
    fast, slow = spread([1.0, 1.1, 1.2]), spread([2.0, 2.1, 2.2])
    assert differ(fast, slow) and ratio_text(slow, fast) == "1.91x"
    noisy = spread([1.0, 1.9, 3.0])  # overlaps both
    assert overlap(noisy, slow) and not differ(noisy, slow) and ratio_text(noisy, slow) is None
    assert "no measurable difference at n=3" in no_difference_text(noisy, slow)
    # One value each has no spread: never a claim, however far apart.
    assert not differ(spread([1.0]), spread([100.0]))
    assert "n=1 has no spread" in no_difference_text(spread([1.0]), spread([100.0]))


def test_the_best_is_named_alone_only_beyond_the_noise_of_the_rest():
    spreads = {
        "a": spread([1.0, 1.2, 1.4]),
        "b": spread([1.1, 1.3, 1.5]),  # overlaps a
        "c": spread([3.0, 3.1, 3.2]),
    }
    best, tied = indistinguishable_from_best(spreads)
    assert best == "a" and tied == ["a", "b"]
    best, tied = indistinguishable_from_best({"a": spreads["a"], "c": spreads["c"]})
    assert tied == ["a"]
    best, tied = indistinguishable_from_best(spreads, lower_is_better=False)
    assert best == "c" and tied == ["c"]
