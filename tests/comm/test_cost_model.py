"""The α–β cost model: its formulas, and the fit recovering planted α, β (torch-free)."""

from __future__ import annotations

import math
import random

import pytest

from trainscope.collectives.bandwidth import bus_factor
from trainscope.collectives.semantics import OPS
from trainscope.comm import cost_model as model

SIZES = [1 << k for k in range(10, 27)]  # 1 KiB .. 64 MiB, the default sweep


def planted(op: str, n: int, alpha: float, beta: float, noise: float, seed: int = 0) -> list:
    """Synthetic sweep results: the model's time times (1 + uniform noise)."""
    rng = random.Random(seed)
    lat, bw = model.terms(op, n)
    return [
        {
            "op": op,
            "bytes": m,
            "world_size": n,
            "time_s": (alpha * lat + beta * bw * m) * (1 + rng.uniform(-noise, noise)),
            "wrong": 0,
        }
        for m in SIZES
    ]


@pytest.mark.parametrize("n", [2, 3, 8])
@pytest.mark.parametrize("op", OPS)
def test_the_fit_recovers_planted_alpha_and_beta_within_5_percent(op: str, n: int) -> None:
    alpha, beta = 25e-6, 1 / 3.0e9  # 25 µs, 3 GB/s
    fits = model.fit_sweep(planted(op, n, alpha, beta, noise=0.03, seed=n))
    fit = fits[op]
    assert fit.alpha_s == pytest.approx(alpha, rel=0.05)
    assert fit.beta_s_per_byte == pytest.approx(beta, rel=0.05)
    assert fit.bandwidth_GBps == pytest.approx(3.0, rel=0.05)
    assert fit.points == len(SIZES) and fit.max_rel_error < 0.08
    assert fit.algorithm == model.ALGORITHMS[op]


def test_without_noise_the_fit_is_exact() -> None:
    fit = model.fit_sweep(planted("all_reduce", 4, 7e-6, 2e-10, noise=0.0))["all_reduce"]
    assert fit.alpha_s == pytest.approx(7e-6, rel=1e-9)
    assert fit.beta_s_per_byte == pytest.approx(2e-10, rel=1e-9)
    assert fit.max_rel_error < 1e-9


def test_the_fit_minimises_relative_error_so_small_messages_count() -> None:
    """An unweighted fit would let the 64 MiB points decide α (their absolute errors are
    largest) and miss the latency; weighted by 1/t each point's *relative* error counts."""
    results = planted("all_reduce", 2, 50e-6, 1e-9, noise=0.0)
    results[-1]["time_s"] *= 1.10  # one slow large message
    fit = model.fit_sweep(results)["all_reduce"]
    assert fit.alpha_s == pytest.approx(50e-6, rel=0.05)


def test_the_fit_uses_the_mean_call_so_a_bimodal_latency_sums_right() -> None:
    """Per call 0.6 ms or 3.5 ms (gloo here): the median of 20 calls with 11 fast ones is
    0.6 ms, but 10 calls in a step cost 10 x the mean. The fit follows the mean."""
    results = []
    for m in SIZES:
        times = [0.6e-3] * 11 + [3.5e-3] * 9
        results.append({"op": "broadcast", "bytes": m, "world_size": 2, "time_s": 0.6e-3,
                        "times_s": times, "wrong": 0})  # fmt: skip
    fit = model.fit_sweep(results)["broadcast"]
    assert fit.alpha_s == pytest.approx((11 * 0.6e-3 + 9 * 3.5e-3) / 20)
    assert model.mean_time({"time_s": 1.0, "times_s": [1, "x"]}) == 1.0  # damaged: the median


def test_negative_coefficients_are_not_fitted() -> None:
    # Times that fall with size: the line's slope would be negative.
    a, b = model.fit_line([1e3, 1e6, 1e7], [3e-3, 2e-3, 1e-3])
    assert a >= 0 and b >= 0 and (a == 0 or b == 0)
    # A constant time is pure latency.
    a, b = model.fit_line([1e3, 1e6, 1e7], [1e-3, 1e-3, 1e-3])
    assert a == pytest.approx(1e-3) and b == 0


def test_bad_points_are_refused_or_left_out() -> None:
    with pytest.raises(ValueError):
        model.fit_line([], [])
    with pytest.raises(ValueError):
        model.fit_line([1, 2], [1e-3, 0.0])
    results = planted("broadcast", 2, 1e-5, 1e-9, noise=0.0)
    results[0]["wrong"] = 3  # a wrong result is no measurement
    results[1]["time_s"] = float("nan")
    results.append({"op": "broadcast", "bytes": "x", "time_s": 1, "world_size": 2})
    results.append("not a result")
    fit = model.fit_sweep(results)["broadcast"]
    assert fit.points == len(SIZES) - 2
    assert model.fit_sweep([results[5]]) == {}  # one size determines no line


@pytest.mark.parametrize("n", [2, 3, 4, 8, 16])
def test_bandwidth_terms_are_nccl_tests_bus_factors(n: int) -> None:
    """For the ring and pairwise ops W is nccl-tests' bus factor: busbw tends to 1/β."""
    for op in ("all_reduce", "reduce_scatter", "all_gather", "all_to_all"):
        assert model.terms(op, n)[1] == pytest.approx(bus_factor(op, n))
    steps = math.ceil(math.log2(n))
    assert model.terms("broadcast", n) == model.terms("reduce", n) == (steps, steps)
    assert model.terms("gather", n) == (n - 1, n - 1)


def test_hand_computed_times() -> None:
    # 4 ranks, α = 10 µs, 1 GB/s, 1 MB all_reduce: 6 α + 1.5 MB / (1 GB/s) = 60 µs + 1.5 ms
    link = model.given(10e-6, 1.0, 4)
    assert link["all_reduce"].time("all_reduce", 1e6, 4) == pytest.approx(1.56e-3)
    # gather of 1 MB pieces to the root of 4: 3 messages of 1 MB
    assert link["gather"].time("gather", 1e6, 4) == pytest.approx(3 * (10e-6 + 1e-3))
    assert model.terms("all_reduce", 1) == (0.0, 0.0)


def test_a_tampered_record_never_crashes_the_fit_and_is_never_trusted() -> None:
    results = planted("all_reduce", 2, 1e-5, 1e-9, noise=0.0)
    results[0]["world_size"] = 1e400
    results[1]["bytes"] = 10**400
    results[2]["times_s"] = [10**400]
    results[2]["time_s"] = "x"
    results[3]["bytes"] = float("inf")
    results[4]["world_size"] = 2.5
    fit = model.fit_sweep(results)["all_reduce"]
    assert fit.points == len(SIZES) - 5
    good = model.Fit("all_reduce", 1e-5, 1e-9, 2, 3, 0.1, "ring").to_dict()
    for key, bad in [("world_size", 1e400), ("world_size", -4), ("world_size", 10**400),
                     ("alpha_s", 10**400), ("beta_s_per_byte", -1), ("points", "3"),
                     ("max_rel_error", float("nan")), ("alpha_s", True)]:  # fmt: skip
        assert model.fits_from_dict({"all_reduce": {**good, key: bad}}) == {}, (key, bad)
    assert model.fits_from_dict({"all_reduce": good})["all_reduce"].world_size == 2


def test_fits_round_trip_through_strict_json() -> None:
    import json

    fits = model.fit_sweep(planted("all_gather", 3, 1e-5, 1e-9, noise=0.01))
    data = json.loads(json.dumps({k: f.to_dict() for k, f in fits.items()}, allow_nan=False))
    again = model.fits_from_dict(data)
    assert again == fits
    assert model.fits_from_dict({"all_gather": {"alpha_s": "nan"}, "bogus": {}}) == {}
    inf = model.Fit("all_reduce", 1e-6, 0.0, 2, 0, 0.0, "ring").to_dict()
    assert inf["bandwidth_GBps"] is None
