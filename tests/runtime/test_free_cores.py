"""``--threads auto`` fits the threads on the cores other processes leave free, and a run
whose other load changes while it runs says so (runtime.threads)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.runtime.test_threads import _orphan_busy_loop
from trainscope.analysis.cpu import cpu_rows, load_change_note
from trainscope.config import USER_OMP_ENV, available_cpus
from trainscope.runtime import threads
from trainscope.runtime.threads import (
    OTHER_LOAD_ENV,
    CpuMeter,
    OtherLoad,
    other_load_at_start,
    plan_run_threads,
    plan_threads,
)
from trainscope.runtime.threads import (
    load_change_note as section_note,
)

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def no_omp(monkeypatch: pytest.MonkeyPatch) -> None:
    """Neither the user nor a launcher set OMP_NUM_THREADS: auto decides."""
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv(USER_OMP_ENV, raising=False)
    monkeypatch.delenv(OTHER_LOAD_ENV, raising=False)


@contextlib.contextmanager
def busy_loops(n: int) -> Iterator[None]:
    """``n`` busy processes that are not this one's, killed at the end."""
    pids = [_orphan_busy_loop() for _ in range(n)]
    try:
        time.sleep(0.3)  # started and spinning
        yield
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def test_auto_takes_the_cores_other_processes_leave_free(no_omp: None) -> None:
    busy = plan_threads("auto", 1, cores=2, other=OtherLoad(1.9, 0.8))
    assert busy.threads == 1 and "1.9 kept busy by other processes" in busy.source
    assert plan_threads("auto", 1, cores=2, other=OtherLoad(2.0, 0.8)).threads == 1  # >= 1
    quiet = plan_threads("auto", 1, cores=2, other=OtherLoad(0.02, 0.8))
    assert quiet.threads == 2 and "none busy" in quiet.source
    # threads x processes + other <= cores + the margin: 8 cores, 3 busy, 2 ranks -> 2 each
    assert plan_threads("auto", 2, cores=8, other=OtherLoad(3.0, 0.5)).threads == 2
    assert plan_threads("auto", 2, cores=8, other=OtherLoad(0.2, 0.5)).threads == 4
    assert plan_threads("auto", 2, cores=8, other=OtherLoad(0.3, 0.5)).threads == 3  # 8.3 > 8.25


def test_a_number_or_the_users_omp_num_threads_still_wins(
    no_omp: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert plan_threads(2, 1, cores=2, other=OtherLoad(1.9, 0.8)).threads == 2
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    plan = plan_threads("auto", 1, cores=2, other=OtherLoad(1.9, 0.8))
    assert (plan.threads, plan.source) == (2, "auto: OMP_NUM_THREADS=2")


def test_ranks_take_the_launchers_reading_and_never_measure_each_other(
    no_omp: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(OTHER_LOAD_ENV, "1.5,0.7")
    assert other_load_at_start(2) == OtherLoad(1.5, 0.7)
    monkeypatch.delenv(OTHER_LOAD_ENV)
    # A user's own torchrun: the ranks start side by side, each would read the others.
    assert other_load_at_start(2) is None
    monkeypatch.setenv(OTHER_LOAD_ENV, "garbage")
    assert other_load_at_start(1) is None  # not trusted, not an error


@pytest.mark.skipif(available_cpus() > 4, reason="loads every core: kept to small machines")
def test_planted_load_before_a_run_gives_it_fewer_threads(no_omp: None) -> None:
    cores = available_cpus()
    with busy_loops(cores):
        threads.note_entry()
        time.sleep(0.3)  # the imports a command does before its run
        plan = plan_run_threads("auto", 1)
    assert plan.other_at_start is not None and plan.other_at_start.cores >= cores - 0.8
    assert plan.threads == 1, plan
    assert "kept busy by other processes" in plan.source


def test_without_an_entry_reading_a_short_window_is_measured(no_omp: None) -> None:
    threads._entry = None
    t0 = time.perf_counter()
    load = other_load_at_start(1)
    assert load is not None and load.window_s >= threads.MIN_WINDOW_S
    assert time.perf_counter() - t0 < 5  # one short window, not a wait for quiet


@pytest.mark.skipif(available_cpus() > 4, reason="loads every core: kept to small machines")
def test_load_that_starts_mid_run_is_seen_in_the_samples(no_omp: None) -> None:
    meter = CpuMeter(plan_threads(1, 1, other=OtherLoad(0.0, 0.5)))
    time.sleep(0.5)
    meter.tick()
    with busy_loops(available_cpus()):
        time.sleep(1.0)
        sample = meter.tick()
    assert sample["other_cores"] >= available_cpus() - 0.8, sample
    section = meter.section()
    assert section["other_cores_sampled"]["n"] == 2
    assert section["other_cores_sampled"]["max"] >= available_cpus() - 0.8


def test_the_record_says_when_the_other_load_changed() -> None:
    steady = {"other_cores": 0.1, "other_cores_at_start": 0.0,
              "other_cores_sampled": {"min": 0.0, "max": 0.3, "n": 7}}  # fmt: skip
    assert section_note(steady) is None
    rose = {**steady, "other_cores": 1.2, "other_cores_sampled": {"min": 0.0, "max": 1.9, "n": 7}}
    note = section_note(rose)
    assert note is not None and "from 0.0 to 1.9 cores" in note and "chosen for 0.0" in note
    summary = {"cpu": {"threads": 2, "processes_on_node": 1, "cores": 2, **rose,
                       "load_change": note}}  # fmt: skip
    assert load_change_note(summary) == note
    rows = dict((str(k), str(v)) for k, v in cpu_rows(summary))
    assert rows["Other load (cores busy)"] == "1.2 (samples: 0.0–1.9); 0.0 at start"


@pytest.mark.slow
def test_a_run_records_why_it_took_its_threads(no_omp: None, tmp_path: Path) -> None:
    from trainscope.cli import main

    out = tmp_path / "r"
    assert main(["run", "--out", str(out), "--epochs", "1", "--set",
                 "train.max_steps_per_epoch=3", "-q"]) == 0  # fmt: skip
    cpu = json.loads((out / "summary.json").read_text())["cpu"]
    assert cpu["threads_requested"] == "auto" and "at start" in cpu["threads_source"]
    assert isinstance(cpu["other_cores_at_start"], float)
    lines = (out / "system.jsonl").read_text().splitlines()
    assert all("other_cores" in json.loads(line) for line in lines)
