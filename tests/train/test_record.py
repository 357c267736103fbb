"""summary.json has one owner, RunSummary: only it writes the file, sections come in the
order they were contributed, and a failure's first reason stands."""

from __future__ import annotations

import ast
import inspect
import json
import threading
from pathlib import Path

import pytest

import trainscope
from trainscope.config import from_dict
from trainscope.records import RunWriter
from trainscope.records.record_specs import SUMMARY
from trainscope.records.schema import check
from trainscope.train import record as record_module
from trainscope.train.record import RankFigures, RunFacts, RunSummary, Throughput
from trainscope.train.run import run

PACKAGE = Path(trainscope.__file__).parent


def _facts() -> RunFacts:
    return RunFacts(
        workload="digits", device="cpu", device_name="cpu", precision="fp32", batch_size=8,
        loader="torch", num_workers="auto", data_only=False, started_at="2024-01-01T00:00:00+00:00",
        strategy="single", world_size=1, rank=0, clock={"unix_at_origin": 1.0},
        process={"startup_s": 0.5, "runs_before": 0},
    )  # fmt: skip


def test_only_the_record_calls_write_summary_in_the_source() -> None:
    callers = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "write_summary"
            ):
                callers.append(str(path.relative_to(PACKAGE)))
    assert set(callers) == {"train/record.py"}


def test_a_run_writes_its_summary_through_the_record_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    callers: list[str] = []
    write = RunWriter.write_summary

    def spy(self: RunWriter, summary: dict) -> None:
        callers.append(inspect.stack()[1].frame.f_globals["__name__"])
        write(self, summary)

    monkeypatch.setattr(RunWriter, "write_summary", spy)
    cfg = from_dict({"out": str(tmp_path / "r"), "train": {"epochs": 1, "max_steps_per_epoch": 2}})
    summary = run(cfg)
    assert summary["status"] == "completed"
    assert len(callers) >= 2 and set(callers) == {record_module.__name__}  # start and end
    on_disk = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert on_disk == {"schema_version": 1, **summary}
    assert check(on_disk, SUMMARY, "summary.json")[1] == []


def test_sections_follow_the_order_they_were_contributed(tmp_path: Path) -> None:
    writer = RunWriter(tmp_path)
    early = RunSummary(writer, _facts())
    early.set_system({"samples": 1})
    early.set_cpu({"threads": 1})
    late = RunSummary(writer, _facts())
    late.set_cpu({"threads": 1})
    late.set_system({"samples": 1})
    assert list(early.to_dict())[-2:] == ["system", "cpu"]
    assert list(late.to_dict())[-2:] == ["cpu", "system"]
    facts = ["status", "error", *RunFacts.__dataclass_fields__]
    assert list(early.to_dict())[: len(facts)] == facts
    early.set_ranks(None)  # a one-process run gathers nothing
    early.set_throughput(Throughput(mfu_note="the workload states no FLOPs per sample"))
    assert "ranks" not in early.to_dict() and "flops_per_sample" not in early.to_dict()
    early.set_ranks(RankFigures([], {}, None, node_cpu={"threads": 2}))
    got = early.to_dict()
    assert got["cpu"] == {"threads": 2} and got["peak_memory_bytes_max_rank"] is None
    writer.close()


def test_the_first_reason_for_a_failure_stands(tmp_path: Path) -> None:
    writer = RunWriter(tmp_path)
    record = RunSummary(writer, _facts())
    record.begin_attempt([{"attempt": 1, "ended": "failed: x"}], {"attempt": 2, "by": "--resume"})
    # The stall watchdog, from its thread: the file says so at once.
    thread = threading.Thread(target=record.stall, args=("stalled: rank 1 at step 3",))
    thread.start()
    thread.join()
    on_disk = json.loads((tmp_path / "summary.json").read_text())
    assert on_disk["status"] == "failed" and on_disk["error"] == "stalled: rank 1 at step 3"
    assert on_disk["finished_at"]
    # The main thread, going on, fails with a consequence: the verdict stays.
    record.fail("RuntimeError: connection closed")
    record.complete()
    record.end()
    record.write()
    on_disk = json.loads((tmp_path / "summary.json").read_text())
    assert on_disk["status"] == "failed" and on_disk["error"] == "stalled: rank 1 at step 3"
    assert on_disk["attempts"][-1]["ended"] == "failed: stalled: rank 1 at step 3"
    writer.close()
