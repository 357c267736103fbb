"""The collectives' textbook examples and identities: closed forms against a plain-Python
simulation (no process group), then the real thing in gloo worlds of 2 and 3 processes."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from trainscope.collectives.semantics import (
    IDENTITIES,
    OPS,
    ROOTED,
    example_values,
    expected_values,
    format_table,
    letter,
    sum_tolerance,
)

DIST_TIMEOUT = 150  # the first test of a world also starts its processes (conftest)


def simulate(op: str, world: int, root: int) -> list[list[int] | None]:
    """Each rank's result of ``op`` on the examples, computed the long way round."""
    held = [example_values(op, r, world, root) for r in range(world)]
    if op == "all_reduce":
        return [[sum(h[0] for h in held)]] * world
    if op == "broadcast":
        return [held[root]] * world
    if op == "reduce":
        return [[max(h[0] for h in held)] if r == root else None for r in range(world)]
    if op == "all_gather":
        return [[h[0] for h in held]] * world
    if op == "reduce_scatter":
        return [[sum(h[j] for h in held)] for j in range(world)]
    return [[held[r][j] for r in range(world)] for j in range(world)]  # all_to_all


@pytest.mark.timeout(30)
@pytest.mark.parametrize("world", [2, 3, 4, 8])
def test_closed_forms_match_a_simulation(world: int) -> None:
    for op in OPS:
        for root in range(world) if op in ROOTED else [0]:
            want = simulate(op, world, root)
            got = [expected_values(op, r, world, root) for r in range(world)]
            assert got == want, (op, world, root)


@pytest.mark.timeout(10)
def test_the_issues_examples_at_three_ranks() -> None:
    def before(op: str) -> list[list[int]]:
        return [example_values(op, r, 3) for r in range(3)]

    def after(op: str) -> list[list[int] | None]:
        return [expected_values(op, r, 3) for r in range(3)]

    assert before("all_reduce") == [[3], [5], [7]] and after("all_reduce") == [[15]] * 3
    assert after("broadcast") == [[3]] * 3
    assert after("reduce") == [[7], None, None]  # max to the root; others unspecified
    assert [letter(v[0]) for v in before("all_gather")] == ["A", "B", "C"]
    assert after("all_gather") == [[1, 2, 3]] * 3
    # The issue's [1,2], [3,4], [5,6] -> 9 and 12, with the third column 3 ranks need.
    assert [v[:2] for v in before("reduce_scatter")] == [[1, 2], [3, 4], [5, 6]]
    assert after("reduce_scatter") == [[9], [12], [15]]
    assert before("all_to_all") == [[0, 1, 2], [3, 4, 5], [6, 7, 8]]
    assert after("all_to_all") == [[0, 3, 6], [1, 4, 7], [2, 5, 8]]


@pytest.mark.timeout(10)
def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown collective"):
        example_values("scatter", 0, 2)
    with pytest.raises(ValueError, match="at least 2 ranks"):
        expected_values("all_reduce", 0, 1)
    with pytest.raises(ValueError, match=r"0\.\.2"):
        expected_values("reduce", 0, 3, root=3)


@pytest.mark.timeout(10)
def test_letters_and_table() -> None:
    assert [letter(c) for c in (0, 1, 3, 26, 27, 52, 53)] == ["·", "A", "C", "Z", "AA", "AZ", "BA"]
    result = {
        "op": "reduce",
        "rule": "max",
        "root": 0,
        "letters": False,
        "rows": [
            {"rank": 0, "before": [3], "after": [5], "expected": [5], "ok": True},
            {"rank": 1, "before": [5], "after": [5], "expected": None, "ok": None},
        ],
    }
    assert format_table(result).splitlines() == [
        "reduce (root 0): max",
        "rank | before | after | expected | ok",
        "0    | 3      | 5     | 5        | yes",
        "1    | 5      | 5     | —        | —",
    ]


@pytest.mark.timeout(10)
def test_sum_tolerance_bounds_reordered_float32_sums() -> None:
    # 2 * gamma_2 * 3 with u = 2^-24: the n = 3 figure the docstring quotes.
    assert sum_tolerance(3) == pytest.approx(2 * (2 * 2**-24) / (1 - 2 * 2**-24) * 3)
    assert sum_tolerance(3) == pytest.approx(7.15e-7, rel=1e-3)
    gen = torch.Generator().manual_seed(0)
    for n in (2, 3, 8):
        x = torch.rand(n, 100_000, generator=gen) * 2 - 1
        forward, backward = x[0].clone(), x[-1].clone()
        for k in range(1, n):
            forward += x[k]
            backward += x[n - 1 - k]
        assert (forward - backward).abs().max() <= sum_tolerance(n)
        # ...while a result missing one rank's share is far outside it.
        assert (forward - x[0] - backward).abs().max() > 100 * sum_tolerance(n)


# ------------------------------------------------------------- gloo, 2 and 3 processes


def hand_computed(world: int) -> dict[str, list[list[int] | None]]:
    """Every rank's "after" per op, written out by hand for 2 and 3 ranks (root 0)."""
    if world == 2:
        return {
            "all_reduce": [[8], [8]],  # 3 + 5
            "broadcast": [[3], [3]],
            "reduce": [[5], None],  # max(3, 5) on the root
            "all_gather": [[1, 2], [1, 2]],  # [A, B]
            "reduce_scatter": [[4], [6]],  # [1,2] + [3,4]
            "all_to_all": [[0, 2], [1, 3]],  # [0,1],[2,3] transposed
        }
    return {
        "all_reduce": [[15]] * 3,
        "broadcast": [[3]] * 3,
        "reduce": [[7], None, None],
        "all_gather": [[1, 2, 3]] * 3,
        "reduce_scatter": [[9], [12], [15]],
        "all_to_all": [[0, 3, 6], [1, 4, 7], [2, 5, 8]],
    }


@pytest.mark.timeout(DIST_TIMEOUT)
def test_every_example_is_right_on_every_rank(world: int, ranks: list[dict[str, Any]]) -> None:
    want = hand_computed(world)
    for mine in ranks:
        assert [e["op"] for e in mine["examples"]] == list(OPS)
        assert mine["examples"] == ranks[0]["examples"]  # every rank sees the same table
        for ex in mine["examples"]:
            op = ex["op"]
            assert ex["ok"] is True and ex["world_size"] == world, format_table(ex)
            rows = ex["rows"]
            assert [r["rank"] for r in rows] == list(range(world))
            assert [r["before"] for r in rows] == [
                example_values(op, r, world) for r in range(world)
            ]
            checked = [r["after"] if r["expected"] is not None else None for r in rows]
            assert checked == want[op], format_table(ex)
            # Checked rows are right; reduce's other ranks are shown, not checked (None).
            assert [r["ok"] for r in rows] == [None if w is None else True for w in want[op]]


@pytest.mark.timeout(DIST_TIMEOUT)
def test_roots_other_than_zero(world: int, ranks: list[dict[str, Any]]) -> None:
    last = world - 1
    for mine in ranks:
        broadcast, reduce = mine["rooted_last"]
        assert broadcast["root"] == reduce["root"] == last
        assert [r["after"] for r in broadcast["rows"]] == [[2 * last + 3]] * world
        assert reduce["rows"][last]["after"] == [2 * world + 1]  # the largest, 2(n-1)+3
        assert broadcast["ok"] and reduce["ok"]


@pytest.mark.timeout(DIST_TIMEOUT)
def test_the_tables_show_letters_for_all_gather(world: int, ranks: list[dict[str, Any]]) -> None:
    gather = next(e for e in ranks[0]["examples"] if e["op"] == "all_gather")
    table = format_table(gather).splitlines()
    everyone = "[" + ", ".join("ABC"[:world]) + "]"
    assert table[0].startswith("all_gather: ")
    assert [c.strip() for c in table[1].split("|")] == ["rank", "before", "after", "expected", "ok"]
    for r, line in enumerate(table[2:]):
        cells = [c.strip() for c in line.split("|")]
        assert cells == [str(r), "ABC"[r], everyone, everyone, "yes"]


@pytest.mark.timeout(DIST_TIMEOUT)
def test_both_identities_hold(world: int, ranks: list[dict[str, Any]]) -> None:
    for mine in ranks:
        for key in ("identities", "identities_last"):
            assert mine[key] == ranks[0][key]
            assert [i["identity"] for i in mine[key]] == list(IDENTITIES)
            for ident in mine[key]:
                assert ident["ok"] is True, ident
                assert ident["world_size"] == world and ident["numel"] == 64 * world
                assert ident["max_abs_diff"] <= ident["atol"] == sum_tolerance(world)
