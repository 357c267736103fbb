"""Threads and cores: the thread count a run takes, the CPU it shared, and the verdict
on oversubscription (runtime.threads), recorded, shown and kept out of comparisons."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from trainscope.analysis.cpu import cpu_rows, oversubscribed_note
from trainscope.config import USER_OMP_ENV, available_cpus, from_dict
from trainscope.runtime.threads import MARGIN_CORES, ThreadPlan, combine, plan_threads, verdict
from trainscope.studies.base import repeats_of, share_core_budget

pytestmark = pytest.mark.timeout(300)


def test_auto_shares_the_cores_out_among_the_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv(USER_OMP_ENV, raising=False)
    assert plan_threads("auto", 1, cores=8).threads == 8
    two = plan_threads("auto", 2, cores=8)
    assert (two.threads, two.source) == (4, "auto: 8 cores / 2 processes")
    assert plan_threads("auto", 3, cores=2).threads == 1  # at least one each
    given = plan_threads(3, 2, cores=8)
    assert (given.threads, given.requested, given.source) == (3, 3, "--threads 3")


def test_auto_honours_the_users_omp_num_threads_not_torchruns(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    monkeypatch.delenv(USER_OMP_ENV, raising=False)
    assert plan_threads("auto", 1, cores=8).source == "auto: OMP_NUM_THREADS=3"
    # A worker of trainscope's launcher: torchrun put OMP_NUM_THREADS=1 there, the user
    # had set nothing; the cores are shared out instead.
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv(USER_OMP_ENV, "")
    assert plan_threads("auto", 2, cores=8).threads == 4
    monkeypatch.setenv(USER_OMP_ENV, "2")  # the user's own setting travels along
    assert plan_threads("auto", 2, cores=8).threads == 2


def _section(threads: int, procs: int, cores: int, busy: float | None) -> dict:
    plan = ThreadPlan(threads, "auto", "test", cores, procs)
    return {"threads": plan.threads, "processes_on_node": procs, "cores": cores,
            "busy_cores": busy}  # fmt: skip


def test_the_verdict_adds_the_runs_threads_and_the_other_load_against_the_cores() -> None:
    quiet = verdict(_section(2, 1, 2, busy=1.95), [1.9])
    assert quiet["oversubscribed"] is False and quiet["note"] is None
    assert quiet["other_cores"] == pytest.approx(0.05)
    # Another process kept a core busy: 2 threads + 1 core of other load on 2 cores.
    busy = verdict(_section(2, 1, 2, busy=2.0), [1.0])
    assert busy["oversubscribed"] is True and busy["other_cores"] == pytest.approx(1.0)
    assert "2 threads x 1 process + 1.0 cores kept busy by other processes on 2 cores" in busy[
        "note"]  # fmt: skip
    # More threads than cores, whatever else runs.
    crowded = verdict(_section(2, 2, 2, busy=None), [1.0, 1.0])
    assert crowded["oversubscribed"] is True and crowded["other_cores"] is None
    # Within the margin: not oversubscribed.
    edge = verdict(_section(2, 1, 2, busy=2.0), [2.0 - MARGIN_CORES / 2])
    assert edge["oversubscribed"] is False


def test_ranks_on_one_node_are_the_runs_own_load_not_other_load() -> None:
    ranks = [verdict(_section(1, 2, 2, busy=2.0), [1.0]) for _ in range(2)]
    for r in ranks:
        r["own_cores"] = 1.0
    # Each rank alone sees the other as load (1 + 1 > 2); together they fit.
    assert ranks[0]["oversubscribed"] is True
    both = combine(ranks)
    assert both is not None and both["oversubscribed"] is False
    assert both["other_cores"] == 0.0 and both["run_cores"] == 2.0
    assert combine([None, {}]) is None  # older ranks without the section


def test_report_rows_and_the_warning_read_the_section() -> None:
    summary = {"cpu": verdict(_section(2, 1, 2, busy=2.0), [1.0]) | {"threads_source": "auto"}}
    rows = dict((k, v) for k, v in cpu_rows(summary))
    assert rows["CPU threads"] == "2 x 1 process on 2 cores (auto)"
    assert rows["Other load (cores busy)"] == "1.0" and rows["CPU oversubscribed"] == "yes"
    assert oversubscribed_note(summary).startswith("CPU oversubscribed")
    for damaged in ({}, {"cpu": []}, {"cpu": {"threads": "x"}}, {"cpu": {"oversubscribed": 1}}):
        assert oversubscribed_note(damaged) is None
        cpu_rows(damaged)  # never raises


def test_a_run_records_its_threads_and_leaves_the_callers_count_alone(tmp_path: Path) -> None:
    from trainscope.train.run import run

    before = torch.get_num_threads()
    cfg = from_dict({"out": str(tmp_path / "r"), "runtime": {"threads": 1, "device": "cpu"},
                     "train": {"epochs": 1, "max_steps_per_epoch": 3}})  # fmt: skip
    summary = run(cfg)
    cpu = json.loads((tmp_path / "r" / "summary.json").read_text())["cpu"]
    assert cpu == summary["cpu"]
    assert (cpu["threads"], cpu["threads_requested"], cpu["threads_source"]) == (
        1,
        1,
        "--threads 1",
    )
    assert cpu["cores"] == available_cpus() and cpu["processes_on_node"] == 1
    assert isinstance(cpu["oversubscribed"], bool) and cpu["interop_threads"] >= 1
    assert torch.get_num_threads() == before  # a notebook's own setting is given back


def _orphan_busy_loop() -> int:
    """A busy loop that is another process's, not this one's: started by a shell that
    exits at once, so it is no descendant of the test (a run counts its own children,
    DataLoader workers, as its own CPU). Returns its pid."""
    loop = f"{shlex.quote(sys.executable)} -c 'while True: pass' >/dev/null 2>&1 & echo $!"
    done = subprocess.run(["sh", "-c", loop], capture_output=True, text=True, check=True)
    return int(done.stdout.strip())


@pytest.mark.skipif(available_cpus() > 4, reason="loads every core: kept to small machines")
def test_a_run_beside_busy_processes_says_its_cpu_was_oversubscribed(tmp_path: Path) -> None:
    """As many busy loops as cores, and a run taking every core: the run records the
    other load and says its timings are not comparable, in the summary and the report."""
    cores = available_cpus()
    hogs = [_orphan_busy_loop() for _ in range(cores)]
    try:
        time.sleep(0.5)
        out = tmp_path / "busy"
        argv = ["run", "--out", str(out), "--threads", str(cores), "--epochs", "2", "-q"]
        from trainscope.cli import main

        assert main(argv) == 0
    finally:
        for pid in hogs:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    cpu = json.loads((out / "summary.json").read_text())["cpu"]
    assert cpu["other_cores"] > MARGIN_CORES, cpu
    assert cpu["oversubscribed"] is True and "not comparable" in cpu["note"]
    from trainscope.reports.run_report import build_run_report

    md = build_run_report(out).markdown_path.read_text(encoding="utf-8")
    assert "CPU oversubscribed" in md


def test_a_study_shares_one_core_budget_out_to_every_configuration() -> None:
    base = from_dict({"runtime": {"threads": 4}}).to_dict()
    runs = repeats_of("single", 1, overrides={"dist.nproc": 1})
    runs += repeats_of("ddp", 1, overrides={"dist.nproc": 2})
    runs += repeats_of("three", 1, overrides={"dist.nproc": 3})
    assert share_core_budget(base, runs) == 4
    got = {r.config: (r.overrides["runtime.threads"], r.labels["budget_kept"]) for r in runs}
    assert got == {"single": (4, True), "ddp": (2, True), "three": (1, False)}
    auto = from_dict({}).to_dict()
    runs = repeats_of("single", 1)
    assert share_core_budget(auto, runs) == available_cpus()
    assert runs[0].overrides["runtime.threads"] == available_cpus()


def test_a_strategy_outside_the_core_budget_is_marked_and_compared_in_no_finding(
    tmp_path: Path,
) -> None:
    """A budget of 3 cores: single takes 3 threads, 2-process DDP cannot share 3 evenly
    (1 thread each, 2 of 3 cores). Its figures are shown, marked, and never compared."""
    from tests.reports.test_honest_numbers import Planted, report_of
    from trainscope.studies import strategies

    def reps(ms: list[float], threads: int) -> list[dict]:
        return [{"train_time_s": m * 10 / 1e3, "steps": 10, "cpu": {"threads": threads}}
                for m in ms]  # fmt: skip

    planted = {}
    for name, ms, threads in (("single", [6.0, 6.1, 6.2], 3), ("ddp", [3.0, 3.1, 3.2], 1),
                              ("dp", [9.0, 9.1, 9.2], 3)):  # fmt: skip
        for k, summary in enumerate(reps(ms, threads), 1):
            planted[f"{name}/r{k}"] = summary
    base = from_dict({"runtime": {"device": "cpu", "threads": 3}, "train": {"epochs": 1}})
    plan = strategies.plan(base.to_dict(), torch.device("cpu"), repeats=3,
                           strategies=["single", "dp", "ddp"])  # fmt: skip
    assert plan.options["core_budget"] == 3
    report = report_of(plan, tmp_path, Planted(planted, fresh=True))
    pairs = {f.split(" time per iteration")[0] for f in report.findings}
    assert "dp / single" in pairs and "ddp / single" not in pairs
    table = report.tables["strategies"]
    threads = {row[0]: row[table.columns.index("Threads")] for row in table.cells()}
    assert threads == {"single": "3", "dp": "3", "ddp": "1*"}
    md = report.markdown_path.read_text(encoding="utf-8")
    assert "Core budget: 3 cores per configuration" in md
    assert "Not within the core budget, so compared in no finding: ddp (1 x 2)" in md
