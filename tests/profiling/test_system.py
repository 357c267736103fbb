"""The background system sampler."""

from __future__ import annotations

import json
import time

from trainscope.profiling.system import SystemSampler, peak_rss_bytes


def test_sampler_writes_lines_and_summarises(tmp_path):
    path = tmp_path / "system.jsonl"
    with SystemSampler(path, interval_s=0.05, gpus=False) as s:
        deadline = time.time() + 5
        while len(s.samples) < 3 and time.time() < deadline:
            sum(i * i for i in range(20000))  # keep the CPU busy so cpu_percent > 0
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    assert len(lines) >= 3 and len(lines) == len(s.samples)
    for rec in lines:
        assert rec["rss_bytes"] > 10 * 2**20  # a Python process with torch loaded
        assert rec["cpu_percent"] >= 0 and "t" in rec and "gpus" not in rec
    summ = s.summary()
    assert summ["samples"] == len(lines)
    assert summ["rss_max_bytes"] == max(r["rss_bytes"] for r in lines)
    assert summ["cpu_percent_mean"] > 0


def test_stop_returns_promptly_even_with_a_long_interval(tmp_path):
    s = SystemSampler(tmp_path / "system.jsonl", interval_s=60).start()
    t0 = time.perf_counter()
    s.stop()
    assert time.perf_counter() - t0 < 2
    assert s.summary()["samples"] == 0


def test_peak_rss_is_at_least_current_rss():
    import psutil

    assert peak_rss_bytes() >= psutil.Process().memory_info().rss * 0.9


def test_process_age_counts_from_the_process_start_to_the_tick() -> None:
    import subprocess
    import sys

    code = (
        "import time; t = time.perf_counter(); time.sleep(0.4)\n"
        "from trainscope.profiling.system import _process_age_s\n"
        "age = _process_age_s(); print(age, time.perf_counter() - t)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    age, since_first_line = map(float, out.stdout.split())
    # The age covers the interpreter's start before the first line, and nothing after now.
    assert since_first_line <= age + 0.02
    assert age < since_first_line + 5.0
