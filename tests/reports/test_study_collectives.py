"""The collectives sweep's report from a study.json written here (no processes, no torch):
what it says about how the processes ran, busbw, wrong results and an unfinished sweep;
record text escaped in every output; tables.tex linted and compiled where LaTeX exists."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.reports.latex import compile_latex, latex_problems
from tests.reports.runs import assert_png, section
from trainscope.comm.record import open_study, plan_options
from trainscope.reports.study_report import build_study_report

pytestmark = pytest.mark.timeout(60)

OPS = ("all_reduce", "broadcast", "reduce", "all_gather", "reduce_scatter", "all_to_all")
FACTOR = {"all_reduce": 4 / 3, "broadcast": 1.0, "reduce": 1.0}  # n = 3; the rest 2/3


def fake_result(op: str, size: int, *, world: int = 3, wrong: int = 0) -> dict[str, Any]:
    """A measurement as bandwidth.measure records it: 1 µs + 1 ns per byte, 3 repeats."""
    times = [1e-6 + size * 1e-9 * k for k in (1.0, 1.1, 0.9)]
    median = sorted(times)[1]
    factor = FACTOR.get(op, (world - 1) / world)
    algbw = size / median / 1e9
    return {
        "op": op, "size": size, "bytes": size, "count": size // 4, "dtype": "float32",
        "world_size": world, "backend": "gloo", "device": "cpu", "root": None,
        "warmup": 1, "repeats": 3, "times_s": times, "time_s": median,
        "time_low_s": min(times), "time_high_s": max(times), "spread": "min–max",
        "rank_median_s": [median] * world, "algbw_GBps": algbw,
        "busbw_GBps": algbw * factor, "bus_factor": factor, "wrong": wrong,
    }  # fmt: skip


def fake_example(op: str, ok: bool = True, rule: str = "a rule") -> dict[str, Any]:
    rows = [
        {"rank": r, "before": [2 * r + 3], "after": [15], "expected": [15], "ok": ok or r != 1}
        for r in range(3)
    ]
    return {"op": op, "rule": rule, "world_size": 3, "root": None, "letters": False,
            "rows": rows, "ok": ok}  # fmt: skip


def write_sweep(
    path: Path,
    *,
    sizes: tuple[int, ...] = (1024, 4096, 1 << 20),
    status: str = "completed",
    host: str = "vm",
    cpus: int = 2,
    wrong_at: tuple[str, int] | None = None,
    rule: str = "a rule",
    drop_last: int = 0,
) -> Path:
    """A collectives study directory as the command leaves it (3 processes, one host)."""
    options = plan_options(
        ops=OPS, sizes=sizes, nproc=3, nnodes=1, backend="gloo", repeats=3, warmup=1
    )
    argv = ["trainscope", "collectives", "--nproc", "3", "--out", str(path)]
    open_study(path, options, overwrite=False, argv=argv).release()
    data = json.loads((path / "study.json").read_text())
    results = [
        fake_result(op, s, wrong=7 if (op, s) == wrong_at else 0) for op in OPS for s in sizes
    ]
    data["results"] = results[: len(results) - drop_last]
    data["examples"] = [fake_example(op, rule=rule) for op in OPS]
    data["identities"] = [
        {"identity": "reduce + broadcast == all_reduce", "world_size": 3, "numel": 768,
         "dtype": "float32", "max_abs_diff": 0.0, "atol": 7.2e-7, "ok": True},
    ]  # fmt: skip
    data["machine"] = {
        "env": {"hostname": host, "cpu_count": cpus, "python": "3.11", "torch": "2.13"},
        "ranks": [{"rank": r, "host": host, "cpus": cpus, "torch_threads": 1} for r in range(3)],
    }
    data["status"], data["done"] = status, len(data["results"])
    (path / "study.json").write_text(json.dumps(data), encoding="utf-8")
    return path


def test_a_completed_sweep_reports_every_table_the_plot_and_what_busbw_means(tmp_path):
    report = build_study_report(write_sweep(tmp_path / "s"))
    md = report.markdown_path.read_text(encoding="utf-8")
    ran = section(md, "How it ran")
    assert "3 processes" in ran and "loopback" in ran
    assert "**Oversubscribed:** 3 processes shared 2 CPU core(s)" in ran
    bandwidth = section(md, "Bandwidth")
    assert "What busbw means" in bandwidth and "2(n-1)/n" in bandwidth
    assert "nccl-tests" in bandwidth and "link" in bandwidth
    for op in OPS:
        assert f"{op} on 3 ranks" in bandwidth, op
    assert md.count("\n| Size ") == len(OPS)
    assert "Wrong results" not in md
    assert any("0 wrong elements" in f for f in report.findings)
    assert_png(tmp_path / "s" / "report" / "plots" / "collectives_busbw.png")
    assert (tmp_path / "s" / "report" / "plots" / "collectives_busbw.svg").is_file()
    assert "trainscope collectives --nproc 3" in section(md, "Reproduce")
    assert "config.yaml" not in md  # a sweep has no runs
    tex = (tmp_path / "s" / "report" / "tables.tex").read_text(encoding="utf-8")
    assert latex_problems(tex) == []
    assert "tab:collectives-all-reduce" in tex and "tab:collectives-identities" in tex
    compile_latex(tex, tmp_path)


def test_busbw_cells_are_the_recorded_figures_with_the_time_spread(tmp_path):
    report = build_study_report(write_sweep(tmp_path / "s", sizes=(1 << 20,)))
    table = report.tables["sweep_all_reduce"]
    size, count, n, time_cell, algbw, busbw, wrong = table.rows[0]
    r = fake_result("all_reduce", 1 << 20)
    assert (size, count, n, wrong) == ("1M", str((1 << 20) // 4), "3", "0")
    assert time_cell.startswith(f"{r['time_s'] * 1e6:.0f} (") and "–" in time_cell
    assert float(algbw) == pytest.approx(r["algbw_GBps"], rel=5e-3)
    assert float(busbw) == pytest.approx(r["algbw_GBps"] * 4 / 3, rel=5e-3)


def test_wrong_results_and_an_interrupted_sweep_are_said(tmp_path):
    path = write_sweep(
        tmp_path / "s", status="interrupted", wrong_at=("all_gather", 4096), drop_last=2
    )
    report = build_study_report(path)
    md = report.markdown_path.read_text(encoding="utf-8")
    assert "Sweep **interrupted** after 16 of 18 measurements" in md
    assert "Rerun the same `trainscope collectives` command" in md
    assert "**Wrong results:** all_gather at 4K: 7 wrong element(s)." in md
    assert any(f.startswith("wrong results") for f in report.findings)
    # The measurements that exist are shown: all_to_all has 1 of its 3 sizes.
    assert [row[0] for row in report.tables["sweep_all_to_all"].rows] == ["1K"]


def test_record_text_is_shown_literally_everywhere(tmp_path):
    hostile = "<script>alert(1)</script> $\\input{/etc/passwd}$ `x` \x1b[2J **b**"
    report = build_study_report(write_sweep(tmp_path / "s", host=hostile, rule=hostile))
    html = report.html_path.read_text(encoding="utf-8")
    assert "<script>" not in html and "&lt;script&gt;" in html
    md = report.markdown_path.read_text(encoding="utf-8")
    assert "<script>" not in md and "\x1b" not in md and "\x1b" not in html
    tex = (tmp_path / "s" / "report" / "tables.tex").read_text(encoding="utf-8")
    assert "\\input{/etc" not in tex and latex_problems(tex) == []
    compile_latex(tex, tmp_path)


def test_building_the_report_imports_no_torch(tmp_path):
    path = write_sweep(tmp_path / "s")
    code = (
        "import sys\n"
        "from trainscope.reports.study_report import build_study_report\n"
        f"build_study_report({str(path)!r})\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
