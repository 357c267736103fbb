"""Bandwidth measurement: bus factors and size parsing by hand (pure), known inputs against a
simulation of each collective, the wrong count in a world of one, and a tiny sweep in gloo
worlds of 2 and 3 processes."""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Iterator
from typing import Any

import pytest
import torch

from tests.collectives.spawn import REPEATS, SIZES
from trainscope.collectives import bandwidth
from trainscope.collectives.bandwidth import (
    MAX_SIZES,
    bus_factor,
    expected_output,
    fill_input,
    format_size,
    format_sweep,
    op_count,
    parse_size,
    parse_sizes,
)
from trainscope.collectives.semantics import OPS
from trainscope.errors import ConfigError

DIST_TIMEOUT = 150  # the first test of a world also starts its processes (conftest)

# Written out by hand: all_reduce 2(n-1)/n; all_gather, reduce_scatter, all_to_all (n-1)/n;
# broadcast, reduce 1.
HAND_FACTORS = {
    2: {"all_reduce": 1.0, "chunked": 0.5},
    3: {"all_reduce": 4 / 3, "chunked": 2 / 3},
    4: {"all_reduce": 1.5, "chunked": 0.75},
    8: {"all_reduce": 1.75, "chunked": 0.875},
}


@pytest.mark.timeout(10)
@pytest.mark.parametrize("n", sorted(HAND_FACTORS))
def test_bus_factor_by_hand(n: int) -> None:
    want = HAND_FACTORS[n]
    assert bus_factor("all_reduce", n) == pytest.approx(want["all_reduce"], abs=1e-15)
    for op in ("all_gather", "reduce_scatter", "all_to_all"):
        assert bus_factor(op, n) == pytest.approx(want["chunked"], abs=1e-15)
    assert bus_factor("broadcast", n) == bus_factor("reduce", n) == 1.0


@pytest.mark.timeout(10)
def test_bus_factor_refuses_unknown_ops_and_empty_worlds() -> None:
    assert bus_factor("all_reduce", 1) == 0.0  # one rank moves nothing over a link
    with pytest.raises(ValueError, match="unknown collective"):
        bus_factor("allreduce", 2)
    with pytest.raises(ValueError, match="at least 1 rank"):
        bus_factor("all_reduce", 0)


@pytest.mark.timeout(10)
def test_parse_sizes_good() -> None:
    sizes = parse_sizes("1K:64M")  # nccl-tests -b 1K -e 64M -f 2
    assert len(sizes) == 17 and sizes[0] == 1024 and sizes[-1] == 64 * 2**20
    assert all(b == 2 * a for a, b in zip(sizes, sizes[1:]))
    assert parse_sizes("1M") == [2**20]
    assert parse_sizes(" 1K, 64KiB ,1mb") == [1024, 65536, 2**20]
    assert parse_sizes("512") == [512]
    assert parse_sizes("3K:10K") == [3072, 6144]  # doubling stops at or below HI
    assert parse_sizes("1G:1G") == [2**30]
    assert len(parse_sizes("2:1G")) == MAX_SIZES  # 2^1 .. 2^30
    assert parse_size("8b") == 8 and parse_size("1gib") == 2**30


@pytest.mark.timeout(10)
@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "bad message size"),
        ("abc", "bad message size"),
        ("1.5M", "bad message size"),
        ("-1K", "bad message size"),
        ("1T", "bad message size"),
        ("0", "is zero"),
        ("0K:1K", "is zero"),
        ("2G", "above the limit"),
        ("1K:2G", "above the limit"),
        ("64M:1K", "larger than"),
        ("1K:2K:4K", "bad size range"),
        ("1K,1K", "repeat"),
        ("1:1G", f"more than {MAX_SIZES}"),  # 31 sizes
        (",".join(f"{k}K" for k in range(1, 32)), f"more than {MAX_SIZES}"),
    ],
)
def test_parse_sizes_bad(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_sizes(text)


@pytest.mark.timeout(10)
def test_format_size_and_op_count() -> None:
    assert [format_size(s) for s in (1024, 64 * 2**20, 2**30, 1000, 1536)] == [
        "1K", "64M", "1G", "1000", "1536",
    ]  # fmt: skip
    for s in parse_sizes("1:1K") + parse_sizes("1K:1G"):
        assert parse_size(format_size(s)) == s
    # 1 KiB of float32 is 256 elements; the chunked ops need a multiple of n.
    assert op_count("all_reduce", 1024, 3, 4) == 256
    assert op_count("all_gather", 1024, 3, 4) == 255
    assert op_count("all_to_all", 1024, 4, 4) == 256
    assert op_count("reduce", 6, 3, 4) == 1
    with pytest.raises(ConfigError, match="needs at least 12 bytes"):
        op_count("reduce_scatter", 8, 3, 4)


def simulate(op: str, n: int, count: int, root: int) -> list[torch.Tensor]:
    """Each rank's output of ``op`` on :func:`fill_input`'s inputs, the long way round."""
    xs = [fill_input(op, r, n, count) for r in range(n)]
    if op in ("all_reduce", "reduce"):
        return [sum(xs)] * n
    if op == "broadcast":
        return [xs[root]] * n
    if op == "all_gather":
        return [torch.cat(xs)] * n
    if op == "reduce_scatter":
        return list(sum(xs).chunk(n))
    return [torch.cat([x.chunk(n)[r] for x in xs]) for r in range(n)]  # all_to_all


@pytest.mark.timeout(30)
@pytest.mark.parametrize("n", [2, 3, 4, 8])
def test_expected_outputs_match_a_simulation(n: int) -> None:
    count = 5 * n
    for op in OPS:
        for root in (0, n - 1):
            want = simulate(op, n, count, root)
            for r in range(n):
                got = expected_output(op, r, n, count, root=root)
                if op == "reduce" and r != root:
                    assert got is None
                    continue
                assert torch.equal(got, want[r]), (op, n, r, root)
                # A collective that wrote nothing leaves -1 (or the input) and is counted.
                assert not (got == -1).any()
                if op in ("all_reduce", "reduce", "all_to_all"):
                    assert not torch.equal(got, fill_input(op, r, n, count))


@pytest.fixture
def world_of_one() -> Iterator[None]:
    """A real gloo group of one rank in this process, destroyed afterwards."""
    from trainscope.runtime.dist import destroy_distributed, init_distributed

    info = init_distributed("gloo", "cpu", 30)
    try:
        yield
    finally:
        destroy_distributed(info)


@pytest.mark.timeout(60)
def test_wrong_counts_elements_a_collective_got_wrong(
    world_of_one: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    for op in OPS:
        r = bandwidth.measure(op, 1024, warmup=1, repeats=3)
        assert r["wrong"] == 0 and r["count"] == 256 and r["world_size"] == 1, r
        assert r["busbw_GBps"] == pytest.approx(r["algbw_GBps"] * bus_factor(op, 1))
    # A "collective" that does nothing: its output keeps the -1 it was reset to.
    monkeypatch.setattr(bandwidth, "_runner", lambda *a: lambda: None)
    r = bandwidth.measure("all_gather", 1024, warmup=1, repeats=3)
    assert r["wrong"] == 256 * 3  # every element of every timed repeat
    with pytest.raises(ValueError, match="repeats >= 1"):
        bandwidth.measure("all_reduce", 1024, repeats=0)
    # sweep checks every op and size before it runs a single collective.
    with pytest.raises(ConfigError, match="too small"):
        bandwidth.sweep([1024, 2], ["all_reduce"])
    with pytest.raises(ValueError, match="unknown collective"):
        bandwidth.sweep([1024], ["all_reduce", "gather"])


# ------------------------------------------------------------- gloo, 2 and 3 processes


@pytest.mark.timeout(DIST_TIMEOUT)
def test_a_tiny_sweep(world: int, ranks: list[dict[str, Any]]) -> None:
    results = ranks[0]["sweep"]
    assert all(mine["sweep"] == results for mine in ranks)  # one answer, on every rank
    assert [(r["op"], r["size"]) for r in results] == [(op, s) for op in OPS for s in SIZES]
    for r in results:
        assert r["wrong"] == 0, r
        assert r["world_size"] == world and r["backend"] == "gloo" and r["device"] == "cpu"
        assert r["bytes"] == op_count(r["op"], r["size"], world, 4) * 4 == r["count"] * 4
        assert len(r["times_s"]) == REPEATS and min(r["times_s"]) > 0
        assert len(r["rank_median_s"]) == world
        assert r["time_s"] == pytest.approx(statistics.median(r["times_s"]))
        assert r["algbw_GBps"] > 0 and math.isfinite(r["algbw_GBps"])
        assert r["algbw_GBps"] == pytest.approx(r["bytes"] / r["time_s"] / 1e9)
        assert r["bus_factor"] == bus_factor(r["op"], world)
        assert r["busbw_GBps"] == pytest.approx(r["algbw_GBps"] * bus_factor(r["op"], world))
    assert json.loads(json.dumps(results)) == results  # plain JSON, ready for a record
    table = format_sweep(results).splitlines()
    assert len(table) == 1 + len(results) + 1 and table[0].split()[0] == "op"
