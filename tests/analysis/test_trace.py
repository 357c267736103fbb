"""The Chrome Trace Event Format export: schema, strict JSON, ranks on one axis."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from tests.analysis.test_timeline import write_run_dir
from trainscope.analysis.trace import (
    TID_OUTSIDE,
    TID_STEPS,
    chrome_trace,
    thread_id,
    write_chrome_trace,
)
from trainscope.records.run_dir import load_run


def _reject_constant(name: str) -> Any:
    raise AssertionError(f"non-strict JSON constant {name} in the trace")


def load_strict(path: Path) -> dict[str, Any]:
    """The trace file, parsed with NaN/Infinity refused."""
    return json.loads(path.read_text(encoding="utf-8"), parse_constant=_reject_constant)


def check_trace(trace: dict[str, Any]) -> None:
    """What Perfetto and chrome://tracing need from a JSON trace, checked event by event."""
    assert set(trace) >= {"traceEvents", "displayTimeUnit", "metadata"}
    assert trace["displayTimeUnit"] == "ms"
    events = trace["traceEvents"]
    assert isinstance(events, list) and events
    process_names: set[int] = set()
    thread_names: set[tuple[int, int]] = set()
    used: set[tuple[int, int]] = set()
    for ev in events:
        for key in ("ph", "pid", "tid", "ts", "name"):
            assert key in ev, f"{key} missing in {ev}"
        assert isinstance(ev["pid"], int) and isinstance(ev["tid"], int)
        assert isinstance(ev["ts"], (int, float)) and math.isfinite(ev["ts"]) and ev["ts"] >= 0
        assert isinstance(ev["name"], str)
        used.add((ev["pid"], ev["tid"]))
        if ev["ph"] == "M":
            assert ev["name"] in {
                "process_name",
                "process_sort_index",
                "thread_name",
                "thread_sort_index",
            }
            if ev["name"] == "process_name":
                assert isinstance(ev["args"]["name"], str)
                process_names.add(ev["pid"])
            elif ev["name"] == "thread_name":
                assert isinstance(ev["args"]["name"], str)
                thread_names.add((ev["pid"], ev["tid"]))
        elif ev["ph"] == "X":
            assert isinstance(ev["dur"], (int, float)) and math.isfinite(ev["dur"])
            assert ev["dur"] >= 0
        elif ev["ph"] == "C":
            assert ev["args"], ev
            for value in ev["args"].values():
                assert isinstance(value, (int, float)) and not isinstance(value, bool)
                assert math.isfinite(value)
        else:
            raise AssertionError(f"unexpected phase {ev['ph']!r}")
    assert {pid for pid, _ in used} <= process_names
    assert used <= thread_names
    # Perfetto keys threads by tid alone, and tid 0 is its idle thread.
    owners: dict[int, set[int]] = {}
    for pid, tid in used:
        owners.setdefault(tid, set()).add(pid)
    assert all(tid > 0 and len(pids) == 1 for tid, pids in owners.items()), owners


def _no_overlap_per_track(events: list[dict[str, Any]]) -> None:
    tracks: dict[tuple[int, int], list[dict[str, Any]]] = {}
    for ev in events:
        if ev["ph"] == "X":
            tracks.setdefault((ev["pid"], ev["tid"]), []).append(ev)
    for track in tracks.values():
        track.sort(key=lambda ev: ev["ts"])
        for a, b in zip(track, track[1:]):
            assert a["ts"] + a["dur"] <= b["ts"] + 1e-6, (a, b)


def _thread(trace: dict[str, Any], pid: int, name: str) -> int:
    return next(
        ev["tid"]
        for ev in trace["traceEvents"]
        if ev["ph"] == "M" and ev["name"] == "thread_name" and ev["pid"] == pid
        if ev["args"]["name"] == name
    )


@pytest.mark.parametrize(
    "break_it",
    [
        lambda evs: evs.append({"ph": "X", "name": "x", "pid": 0, "tid": 1, "ts": 5, "dur": -1}),
        lambda evs: evs.append({"ph": "X", "name": "x", "pid": 0, "tid": 77, "ts": 5, "dur": 1}),
        lambda evs: evs.append({"ph": "X", "name": "x", "pid": 9, "tid": 1, "ts": 5, "dur": 1}),
        lambda evs: evs.append({"ph": "C", "name": "c", "pid": 0, "tid": 1, "ts": -1, "args": {}}),
        lambda evs: evs.append(
            {"ph": "C", "name": "c", "pid": 0, "tid": 1, "ts": 1, "args": {"v": "1"}}
        ),
        lambda evs: evs[-1].pop("ts"),
    ],
)
def test_the_schema_check_finds_broken_events(tmp_path: Path, break_it: Any) -> None:
    trace = chrome_trace(write_run_dir(tmp_path))
    check_trace(trace)
    break_it(trace["traceEvents"])
    with pytest.raises(AssertionError):
        check_trace(trace)


def test_trace_of_one_rank_passes_the_schema_and_is_strict_json(tmp_path: Path) -> None:
    run = write_run_dir(tmp_path, gpu=True)
    path = write_chrome_trace(load_run(run), tmp_path / "out" / "trace.json")
    trace = load_strict(path)
    check_trace(trace)
    _no_overlap_per_track(trace["traceEvents"])
    events = trace["traceEvents"]
    names = {ev["args"]["name"] for ev in events if ev["name"] == "process_name"}
    assert names == {"rank 0"}
    steps = [ev for ev in events if ev["ph"] == "X" and ev["tid"] == thread_id(0, TID_STEPS)]
    assert len(steps) == 20
    assert steps[0]["ts"] == pytest.approx(0.3e6) and steps[0]["args"]["step"] == 1
    forward = [ev for ev in events if ev["ph"] == "X" and ev["name"] == "forward"]
    assert len(forward) == 20 and forward[0]["dur"] == pytest.approx(2000)
    # Stages run back to back from the step start: forward after data_wait and h2d.
    assert forward[0]["ts"] == pytest.approx(0.3e6 + 1000 + 100)
    assert forward[0]["tid"] == _thread(trace, 0, "forward")
    outside = {ev["name"] for ev in events if ev.get("cat") in {"setup", "validation", "test"}}
    assert outside == {"setup", "validation", "test"}
    counters = {ev["name"] for ev in events if ev["ph"] == "C"}
    assert counters == {"CPU", "RSS", "GPU 0 util", "GPU 0 memory", "GPU 0 power"}
    rss = next(ev for ev in events if ev["name"] == "RSS")
    assert rss["args"] == {"MiB": pytest.approx(300_000_000 / 2**20)}
    power = next(ev for ev in events if ev["name"] == "GPU 0 power")
    assert power["args"] == {"W": 250.0}
    meta = trace["metadata"]["trainscope"]
    assert meta["ts0_unix"] == pytest.approx(1_700_000_000.0)
    assert meta["workload"] == "digits" and meta["notes"] == []


def test_checkpoints_have_a_track_of_their_own(tmp_path: Path) -> None:
    run = write_run_dir(tmp_path, world_size=2, checkpoint_s=0.2)
    trace = load_strict(write_chrome_trace(run, tmp_path / "trace.json"))
    check_trace(trace)
    _no_overlap_per_track(trace["traceEvents"])
    for pid, shift in ((0, 0.0), (1, 0.25e6)):
        ckpts = [
            e for e in trace["traceEvents"] if e.get("cat") == "checkpoint" and e["pid"] == pid
        ]
        assert [e["args"] for e in ckpts] == [{"step": 10}, {"step": 20}]
        assert all(e["name"] == "checkpoint" and e["dur"] == pytest.approx(0.2e6) for e in ckpts)
        assert {e["tid"] for e in ckpts} == {_thread(trace, pid, "checkpoints")}
        # After epoch 1: setup 0.3 s, 10 steps of 10 ms, validation 0.05 s.
        assert ckpts[0]["ts"] == pytest.approx(0.45e6 + shift)
    # Setup and evaluation keep their own track.
    test = next(e for e in trace["traceEvents"] if e.get("cat") == "test" and e["pid"] == 0)
    assert test["tid"] == thread_id(0, TID_OUTSIDE)


def test_rank_one_lands_on_pid_one_shifted_by_the_clock_difference(tmp_path: Path) -> None:
    run = write_run_dir(tmp_path, world_size=2)
    trace = chrome_trace(run)
    check_trace(trace)
    events = trace["traceEvents"]
    names = {ev["pid"]: ev["args"]["name"] for ev in events if ev["name"] == "process_name"}
    assert names == {0: "rank 0", 1: "rank 1"}
    first = {
        pid: next(
            ev for ev in events if ev["ph"] == "X" and ev["pid"] == pid and ev["name"] == "step"
        )
        for pid in (0, 1)
    }
    assert first[0]["args"]["step"] == first[1]["args"]["step"] == 1
    # Rank 1's origin is 0.25 s after rank 0's; both recorded the same local times.
    assert first[1]["ts"] - first[0]["ts"] == pytest.approx(250_000)
    cpu = {
        pid: next(ev for ev in events if ev["name"] == "CPU" and ev["pid"] == pid) for pid in (0, 1)
    }
    assert cpu[1]["ts"] - cpu[0]["ts"] == pytest.approx(250_000)
    comm = [ev for ev in events if ev["name"] == "comm" and ev["pid"] == 1]
    assert len(comm) == 20 and comm[0]["tid"] == _thread(trace, 1, "comm")


def test_a_rank_that_started_earlier_keeps_every_ts_non_negative(tmp_path: Path) -> None:
    run = write_run_dir(tmp_path, world_size=2, rank_offsets=(0.0, -0.5))
    trace = chrome_trace(load_run(run))
    check_trace(trace)
    events = trace["traceEvents"]
    setup = {ev["pid"]: ev["ts"] for ev in events if ev["name"] == "setup"}
    assert setup == {1: 0.0, 0: pytest.approx(500_000)}
    assert trace["metadata"]["trainscope"]["ts0_unix"] == pytest.approx(1_700_000_000.0 - 0.5)


def test_record_without_step_times_has_no_steps_and_says_why(tmp_path: Path) -> None:
    run = write_run_dir(tmp_path, with_t=False)
    trace = chrome_trace(run)
    check_trace(trace)  # setup, evaluation and system samples are still placed
    assert not [ev for ev in trace["traceEvents"] if ev["name"] == "step"]
    assert "No timeline" in trace["metadata"]["trainscope"]["notes"][0]


def test_record_text_goes_in_as_json_strings(tmp_path: Path) -> None:
    odd = 'dig"its</script>\n\x1b[2J\u202e NaN'
    run = write_run_dir(tmp_path, summary={"workload": odd, "model": {"nested": [1, 2]}})
    path = write_chrome_trace(run, tmp_path / "trace.json")
    trace = load_strict(path)
    check_trace(trace)
    assert trace["metadata"]["trainscope"]["workload"] == odd
    # An object where the summary has text is left out with a note (records.schema).
    assert trace["metadata"]["trainscope"]["model"] is None


def test_non_finite_values_never_reach_the_file(tmp_path: Path) -> None:
    run = write_run_dir(tmp_path)
    with open(run / "metrics.jsonl", "a", encoding="utf-8") as f:
        f.write(
            '{"event": "step", "step": 21, "t": 1.0, "loss": NaN, "stages": {"forward": 1e-3}}\n'
        )
        f.write('{"event": "step", "step": 22, "t": Infinity, "stages": {"forward": 1e-3}}\n')
    with open(run / "system.jsonl", "a", encoding="utf-8") as f:
        f.write('{"mono": 0.5, "cpu_percent": NaN, "rss_bytes": 1}\n')
    trace = load_strict(write_chrome_trace(run, tmp_path / "trace.json"))
    check_trace(trace)
    step21 = next(ev for ev in trace["traceEvents"] if ev.get("args", {}).get("step") == 21)
    assert "loss" not in step21["args"]


def test_gpu_timed_stages_past_the_next_step_are_cut_and_kept(tmp_path: Path) -> None:
    # Stages of 8.1 ms on a 5 ms step interval: GPU times overrunning the host clock.
    run = write_run_dir(tmp_path, step_s=0.005)
    trace = chrome_trace(run)
    check_trace(trace)
    _no_overlap_per_track(trace["traceEvents"])
    cut = [ev for ev in trace["traceEvents"] if "measured_dur_us" in ev.get("args", {})]
    assert cut and all(ev["args"]["measured_dur_us"] > ev["dur"] for ev in cut)
    assert any("were cut" in n for n in trace["metadata"]["trainscope"]["notes"])


@pytest.mark.slow  # the scale test: 20,000 steps written, read and traced
def test_twenty_thousand_steps_make_a_compact_trace(tmp_path: Path) -> None:
    run = write_run_dir(tmp_path, steps=20_000, epochs=2)
    path = write_chrome_trace(run, tmp_path / "trace.json")
    trace = load_strict(path)
    assert sum(ev["name"] == "step" for ev in trace["traceEvents"]) == 20_000
    assert path.stat().st_size < 40_000_000


def test_perfetto_trace_processor_loads_the_trace(tmp_path: Path) -> None:
    tp_module = pytest.importorskip("perfetto.trace_processor")
    run = write_run_dir(tmp_path, world_size=2, gpu=True)
    path = write_chrome_trace(run, tmp_path / "trace.json")
    try:
        tp = tp_module.TraceProcessor(trace=str(path))
    except Exception as e:  # the package fetches its shell binary on first use
        pytest.skip(f"trace processor could not start: {e}")
    try:
        rows = tp.query(
            "select process.name as p, count(*) as n from slice"
            " join thread_track on slice.track_id = thread_track.id"
            " join thread using(utid) join process using(upid) group by process.name"
        ).as_pandas_dataframe()
        counts = dict(zip(rows["p"], rows["n"]))
        assert set(counts) == {"rank 0", "rank 1"} and min(counts.values()) > 20
        counters = tp.query("select count(*) as n from counter").as_pandas_dataframe()
        assert counters["n"][0] > 0
    finally:
        tp.close()
