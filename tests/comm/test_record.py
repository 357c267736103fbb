"""The collectives sweep's study.json without processes: the plan, what a resume keeps,
how an end is written, and the one line that names wrong results."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainscope.comm.record import (
    Record,
    finish,
    open_study,
    plan_differences,
    plan_options,
    planned_keys,
    read_record,
    results_by_key,
    verdict,
    wrong_results,
)
from trainscope.errors import TrainscopeError

pytestmark = pytest.mark.timeout(30)


def options(**changes: object) -> dict:
    base = dict(
        ops=["all_reduce", "all_gather"], sizes=[4096, 1024], nproc=2, nnodes=1,
        backend="gloo", repeats=2, warmup=1,
    )  # fmt: skip
    return plan_options(**{**base, **changes})  # type: ignore[arg-type]


def result(op: str, size: int, wrong: int = 0) -> dict:
    return {"op": op, "size": size, "bytes": size, "wrong": wrong, "times_s": [1e-5]}


def test_the_plan_is_measured_op_major_sizes_up() -> None:
    opts = options()
    assert opts["sizes"] == [1024, 4096] and opts["world_size"] == 2
    assert opts["device"] == "cpu" and options(backend="nccl")["device"] == "cuda"
    assert planned_keys(opts) == [
        ("all_reduce", 1024), ("all_reduce", 4096), ("all_gather", 1024), ("all_gather", 4096),
    ]  # fmt: skip


def test_plan_differences_name_each_setting_both_ways() -> None:
    assert plan_differences(options(), options()) == []
    diffs = plan_differences(options(), options(sizes=[1024, 8192], repeats=5))
    assert diffs == ["sizes 1K,8K here, 1K,4K there", "repeats 5 here, 2 there"]
    assert plan_differences(None, options())[0].endswith("there") and len(
        plan_differences(None, options())
    ) == len(options())


def test_a_resume_keeps_the_saved_results_of_the_plan_only(tmp_path: Path) -> None:
    out = tmp_path / "s"
    open_study(out, options(), overwrite=False, argv=["trainscope"]).release()
    rec = Record(out)
    rec.add(result("all_reduce", 1024))
    rec.add(result("all_reduce", 1024, wrong=1))  # measured again: the later one stands
    rec.add(result("all_gather", 4096))
    data = read_record(out)
    data["results"] += ["damaged", {"op": "reduce", "size": 1024}, {"op": 3}]
    (out / "study.json").write_text(json.dumps(data))
    assert sorted(results_by_key(read_record(out))) == [("all_gather", 4096), ("all_reduce", 1024)]
    owned = open_study(out, options(), overwrite=False, argv=["trainscope", "again"])
    owned.release()
    again = read_record(out)
    assert again["status"] == "running" and again["kept"] == 2 and again["done"] == 2
    assert [r["wrong"] for r in again["results"]] == [1, 0]
    assert again["started_at"] == data["started_at"] and again["argv"][-1] == "again"
    with pytest.raises(TrainscopeError, match="another plan .*repeats 3 here, 2 there"):
        open_study(out, options(repeats=3), overwrite=False, argv=[])
    open_study(out, options(repeats=3), overwrite=True, argv=[]).release()
    assert read_record(out)["results"] == []


def test_a_second_writer_is_refused_while_the_first_holds_the_folder(tmp_path: Path) -> None:
    owned = open_study(tmp_path / "s", options(), overwrite=False, argv=[])
    try:
        with pytest.raises(TrainscopeError, match="in use"):
            open_study(tmp_path / "s", options(), overwrite=False, argv=[])
    finally:
        owned.release()


def test_the_end_is_completed_only_when_every_measurement_is_saved(tmp_path: Path) -> None:
    out = tmp_path / "s"
    open_study(out, options(), overwrite=False, argv=[]).release()
    rec = Record(out)
    rec.add(result("all_reduce", 1024))
    data = finish(out, "interrupted")
    assert (data["status"], data["done"], data["planned"]) == ("interrupted", 1, 4)
    data = finish(out, "failed", "rank 1: boom")
    assert data["status"] == "failed" and data["error"] == "rank 1: boom"
    for op, size in planned_keys(options())[1:]:
        rec.add(result(op, size))
    data = finish(out, "failed", "after the sweep")
    assert data["status"] == "completed" and "error" not in data and data["done"] == 4


def test_wrong_results_are_named_in_one_line() -> None:
    data = {
        "options": options(),
        "results": [result("all_reduce", 1024), result("all_gather", 4096, wrong=12)],
        "examples": [
            {"op": "reduce", "ok": False,
             "rows": [{"rank": 0, "ok": True}, {"rank": 1, "ok": False}]},
            {"op": "broadcast", "ok": True, "rows": []},
        ],
        "identities": [{"identity": "a == b", "ok": False, "max_abs_diff": 0.5, "atol": 1e-6}],
    }  # fmt: skip
    wrong = wrong_results(data)
    assert wrong == [
        "the reduce example on rank(s) 1",
        "a == b (off by 0.5, tolerance 1e-06)",
        "all_gather at 4K: 12 wrong element(s)",
    ]
    line = verdict(wrong, limit=2)
    assert line.startswith("wrong results: the reduce example") and "and 1 more" in line
    assert "\n" not in line
    assert wrong_results({"options": options(), "results": [result("all_reduce", 1024)]}) == []
