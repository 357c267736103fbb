"""benchmarks/gpu_check.py: its pure logic with planted numbers, and its command on CPU.

Timings are never asserted: only that the logic decides as it should and that the
command runs end to end and reports every section (its ``main`` in this process: what
it measures and reports is tested, not how an interpreter starts it; ``slow``).
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "gpu_check.py"
SECTIONS = ("stage_vs_profiler", "overhead", "precision", "gpt_throughput", "lenet_batch")


def _load():
    """The pure logic, gpu_check_logic.py (what gpu_check.py imports from beside itself)."""
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_check"] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return sys.modules["gpu_check_logic"]


bench = _load()


# --------------------------------------------------------------------------- comparisons


@pytest.mark.timeout(10)
def test_pct_diff_and_goal():
    assert bench.pct_diff(0.104, 0.100) == pytest.approx(4.0)
    assert bench.within_goal(bench.pct_diff(0.104, 0.100), 5.0)
    assert bench.pct_diff(0.107, 0.100) == pytest.approx(7.0)
    assert not bench.within_goal(bench.pct_diff(0.107, 0.100), 5.0)
    assert bench.within_goal(bench.pct_diff(0.096, 0.100), 5.0)  # below counts by its size
    assert not bench.within_goal(bench.pct_diff(0.090, 0.100), 5.0)
    assert bench.pct_diff(1.0, 0.0) is None and bench.pct_diff(None, 1.0) is None
    assert not bench.within_goal(None, 5.0)


@pytest.mark.timeout(10)
def test_compare_stages_kernel_100_ms_against_stage_104_and_107():
    # Two steps: forward 50+50 ms of kernels against 52+52 ms of timer -> +4%, within;
    # backward 100 ms against 107 ms -> +7%, outside; data_wait is not under the goal.
    events = {"data_wait": [0.010, 0.010], "forward": [0.052, 0.052], "backward": [0.0535] * 2}
    kernels = {"data_wait": [0.0, 0.0], "forward": [0.050, 0.050], "backward": [0.050] * 2}
    rows = {r["stage"]: r for r in bench.compare_stages(events, kernels)}
    fwd, bwd, wait = rows["forward"], rows["backward"], rows["data_wait"]
    assert fwd["event_total_s"] == pytest.approx(0.104)
    assert fwd["profiler_total_s"] == pytest.approx(0.100)
    assert fwd["diff_pct"] == pytest.approx(4.0) and fwd["within_goal"] is True
    assert fwd["diff_pct_per_step"]["n"] == 2
    assert fwd["diff_pct_per_step"]["median"] == pytest.approx(4.0)
    assert bwd["diff_pct"] == pytest.approx(7.0) and bwd["within_goal"] is False
    assert wait["diff_pct"] is None and wait["within_goal"] is None


@pytest.mark.timeout(10)
def test_rotations_alternate_and_balance_positions():
    assert bench.rotations(("a", "b"), 4) == [("a", "b"), ("b", "a"), ("a", "b"), ("b", "a")]
    three = bench.rotations(("a", "b", "c"), 3)
    assert three == [("a", "b", "c"), ("b", "c", "a"), ("c", "a", "b")]
    for pos in range(3):  # every kind holds every position once in three rounds
        assert sorted(r[pos] for r in three) == ["a", "b", "c"]
    assert bench.rotations((), 3) == []


@pytest.mark.timeout(10)
def test_ab_summary_within_goal_and_noise():
    base = [1.00, 1.02, 0.98, 1.01, 0.99]
    same = [b * 1.01 for b in base]
    s = bench.ab_summary(base, same)
    assert s["overhead_pct"] == pytest.approx(1.0)
    assert s["within_goal"] is True and s["noise"] == "within noise"
    assert s["ratio"]["n"] == 5 and s["ratio"]["kind"] == "IQR"
    assert "within the 2% goal" in s["verdict"]


@pytest.mark.timeout(10)
def test_ab_summary_outside_goal_and_measurable():
    base = [1.00, 1.001, 0.999, 1.0005, 0.9995]
    slow = [b * 1.05 for b in base]
    s = bench.ab_summary(base, slow)
    assert s["overhead_pct"] == pytest.approx(5.0)
    assert s["within_goal"] is False and s["noise"] == "measurable"
    assert "outside the 2% goal" in s["verdict"]
    # Faster than bare is within the goal (an overhead cannot be negative).
    fast = bench.ab_summary(base, [b * 0.97 for b in base])
    assert fast["overhead_pct"] == pytest.approx(-3.0) and fast["within_goal"] is True


# --------------------------------------------------------------------------- batch search


@pytest.mark.timeout(10)
def test_batch_sizes_double_and_never_exceed_the_cap():
    assert bench.batch_sizes(256, 2048) == [256, 512, 1024, 2048]
    assert bench.batch_sizes(256, 1000) == [256, 512, 1000]
    assert bench.batch_sizes(8, 8) == [8]
    assert bench.batch_sizes(16, 8) == [] and bench.batch_sizes(0, 8) == []
    assert max(bench.batch_sizes(3, 10**6)) == 10**6


@pytest.mark.timeout(10)
def test_batch_search_stops_at_first_oom():
    tried, freed = [], []

    def trial(b):
        tried.append(b)
        if b > 1000:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2 GiB")
        return {"images_per_s": b * 10.0}

    r = bench.bounded_batch_search(trial, 128, 1 << 20, after_failure=lambda: freed.append(1))
    assert tried == [128, 256, 512, 1024]  # nothing after the first OOM
    assert r.best == 512 and r.best_result == {"images_per_s": 5120.0}
    assert r.stopped == "oom" and freed == [1]
    assert [t["outcome"] for t in r.tried] == ["ok", "ok", "ok", "oom"]


@pytest.mark.timeout(10)
def test_batch_search_never_exceeds_the_cap():
    tried = []
    r = bench.bounded_batch_search(lambda b: tried.append(b) or b, 100, 1000)
    assert tried == [100, 200, 400, 800, 1000] and max(tried) <= 1000
    assert r.best == 1000 and r.stopped == "cap"


@pytest.mark.timeout(10)
def test_batch_search_other_errors_stop_it_named_and_first_failure_leaves_no_best():
    def boom(b):
        raise ValueError("bad shape")

    r = bench.bounded_batch_search(boom, 8, 64)
    assert r.best is None and r.stopped == "error" and len(r.tried) == 1
    assert "ValueError: bad shape" in r.tried[0]["error"]

    def cpu_oom(b):
        raise RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried 9 GB")

    assert bench.bounded_batch_search(cpu_oom, 8, 64).stopped == "oom"


@pytest.mark.timeout(10)
def test_is_oom():
    assert bench.is_oom(torch.cuda.OutOfMemoryError("CUDA out of memory"))
    assert bench.is_oom(RuntimeError("CUDA error: out of memory"))
    assert bench.is_oom(MemoryError())
    assert not bench.is_oom(RuntimeError("shape mismatch"))
    assert not bench.is_oom(ValueError("out of memory"))  # only the allocator's errors


# --------------------------------------------------------------------------- attribution


def _x(cat, name, ts, dur, tid=1, **args):
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": 1, "tid": tid,
            "args": args}  # fmt: skip


def _planted_trace():
    """Two steps of two stages; kernels launched inside them, one outside."""
    ev = []
    for step, t in enumerate((0.0, 1000.0)):
        ev.append(_x("user_annotation", "trainscope.stage#0", t, 100))
        ev.append(_x("user_annotation", "trainscope.stage#1", t + 100, 300))
        ev.append(_x("user_annotation", "trainscope.stage#2", t + 400, 5))  # after last mark
        for i, (launch, dur) in enumerate(((t + 10, 40), (t + 150, 120), (t + 200, 80))):
            corr = step * 10 + i
            ev.append(_x("cuda_runtime", "cudaLaunchKernel", launch, 2, correlation=corr))
            # GPU time runs later than the launch: attribution uses the launch.
            ev.append(_x("kernel", f"k{i}", launch + 5000, dur, tid=7, correlation=corr))
    ev.append(_x("cuda_runtime", "cudaMemcpyAsync", 900, 2, correlation=99))
    ev.append(_x("gpu_memcpy", "Memcpy DtoH", 5900, 7, tid=7, correlation=99))
    ev.append(_x("kernel", "orphan", 6000, 3, tid=7, correlation=12345))  # no launch seen
    ev.append(_x("gpu_user_annotation", "trainscope.stage#1", 5100, 300, tid=7))
    return ev


@pytest.mark.timeout(10)
def test_kernels_are_attributed_to_the_stage_open_at_their_launch():
    ev = _planted_trace()
    windows = bench.stage_windows(ev)
    assert [(w[0], w[1]) for w in windows] == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]
    points = bench.device_points(ev)
    assert len(points) == 8  # 6 kernels + 1 copy + 1 orphan; annotations are not kernels
    sums, outside, n_outside = bench.attribute(points, windows)
    assert sums[(0, 0)] == 40 and sums[(0, 1)] == 200 and sums[(1, 1)] == 200
    assert sums[(0, 2)] == 0
    assert outside == 10 and n_outside == 2  # the copy between steps and the orphan
    per = bench.per_stage(sums, {0: "forward", 1: "backward"}, range(2))
    assert per == {"forward": [40e-6, 40e-6], "backward": [200e-6, 200e-6]}
    assert bench.per_stage(sums, {0: "forward"}, range(1, 2)) == {"forward": [40e-6]}


@pytest.mark.timeout(10)
def test_host_points_keep_top_level_ops_per_thread():
    ev = [
        _x("cpu_op", "aten::linear", 0, 100),
        _x("cpu_op", "aten::addmm", 10, 50),  # inside linear
        _x("cpu_op", "aten::relu", 120, 10),
        _x("cpu_op", "aten::mm", 5, 30, tid=2),  # another thread: its own top level
    ]
    assert sorted(bench.host_points(ev)) == [(0, 100), (5, 30), (120, 10)]


@pytest.mark.timeout(10)
def test_fmt_spread():
    assert bench.fmt_spread(bench.spread([0.010, 0.012, 0.011]), 1e3, " ms") == (
        "11.00 ms (min–max 10.00-12.00, n=3)"
    )
    assert bench.fmt_spread(bench.spread([0.5]), 1, "", 1) == "0.5 (n=1, no spread)"
    assert bench.fmt_spread(bench.spread([]), 1) == "n/a"


# --------------------------------------------------------------------------- the command


@pytest.mark.timeout(60)
def test_without_cuda_it_prints_one_line_and_exits_0(capsys):
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present: the check would run")
    assert sys.modules["gpu_check"].main([]) == 0
    assert capsys.readouterr().out == "no CUDA device: nothing to check\n"


@pytest.mark.slow  # every section run on the CPU: seconds
@pytest.mark.timeout(150)
def test_quick_cpu_run_reports_every_section(tmp_path, capsys, monkeypatch):
    out = tmp_path / "check.json"
    monkeypatch.chdir(REPO)
    code = sys.modules["gpu_check"].main(["--device", "cpu", "--quick", "--json", str(out)])
    done = capsys.readouterr()
    assert code == 0, done.out + done.err
    data = json.loads(out.read_text())
    assert set(SECTIONS) <= set(data["sections"])
    for name in SECTIONS:
        assert "error" not in data["sections"][name], data["sections"][name]
        assert data["sections"][name]["warmup"]  # each section says what warm-up it left out
    a = data["sections"]["stage_vs_profiler"]
    assert a["goal_applies"] is False and a["steps"] == data["sizes"]["profile_steps"]
    assert {r["stage"] for r in a["rows"]} >= {"forward", "backward", "optimizer"}
    for r in a["rows"]:
        assert r["profiler_total_s"] > 0 or r["stage"] in ("data_wait", "h2d")
    b = data["sections"]["overhead"]
    assert b["ratio"]["n"] == data["sizes"]["rounds"] and b["verdict"]
    prec = {r["precision"]: r for r in data["sections"]["precision"]["rows"]}
    assert set(prec) == {"fp32", "tf32", "fp16", "bf16"}
    assert "skipped" in prec["tf32"] and "skipped" in prec["fp16"]  # CUDA-only on a CPU
    assert prec["fp32"]["step_s"]["n"] == data["sizes"]["precision_rounds"]
    tput = {r["precision"]: r for r in data["sections"]["gpt_throughput"]["rows"]}
    assert tput["fp32"]["tokens_per_s"]["median"] > 0
    e = data["sections"]["lenet_batch"]
    assert e["largest_batch"] == e["cap"] == 32 and e["stopped"] == "cap"
    assert e["images_per_s"]["n"] == data["sizes"]["lenet_repeats"]
    for heading in ("(a)", "(b)", "(c)", "(d)", "(e)", "| stage |"):
        assert heading in done.out


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.timeout(300)
def test_quick_cuda_run_reports_every_section(tmp_path):
    out = tmp_path / "check.json"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--json", str(out)],
        capture_output=True, text=True, timeout=290, cwd=REPO,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    data = json.loads(out.read_text())
    for name in SECTIONS:
        assert "error" not in data["sections"][name], data["sections"][name]
    a = data["sections"]["stage_vs_profiler"]
    assert a["goal_applies"] is True and a["timer"] == "cuda_events"
    fwd = next(r for r in a["rows"] if r["stage"] == "forward")
    assert fwd["profiler_total_s"] > 0  # kernels were recorded and attributed
