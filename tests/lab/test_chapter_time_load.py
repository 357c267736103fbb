"""Chapter 6 under other load: where every profiled repeat was loaded, the doctor reads
the first of them (and says so first), no fix is re-measured beside the load, and the
chapter says why instead of failing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.reports.test_honest_numbers import BASE, CPU, Planted
from tests.studies.heap import frozen_heap
from trainscope.lab import chapter_runs
from trainscope.lab.steps import MakeContext
from trainscope.render.document import Document
from trainscope.studies import profile
from trainscope.studies.base import execute

LOADED = {"cpu": {"other_cores": 1.3, "threads": 1, "processes_on_node": 1, "cores": 2}}


def test_a_profile_measured_only_under_load_gets_no_re_measured_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TRAINSCOPE_IGNORE_LOAD", raising=False)
    folder = tmp_path / "lab" / "studies" / "06-time"
    prof = folder / "profile"
    planted = Planted({f"run/r{k}": LOADED for k in (1, 2)})
    with frozen_heap():
        execute(profile.plan(BASE, CPU, repeats=2), prof, say=lambda _: None, run_fn=planted,
                remeasure=0)  # fmt: skip
    assert chapter_runs._profiled_run(prof).endswith("run/r1")  # loaded, but read
    found = [{"rule": "measured-under-load", "severity": "major", "fix": "--threads 1",
              "problem": "Measured under other load: 1.3 cores busy."}]  # fmt: skip
    (folder / "doctor.json").write_text(json.dumps(found))
    monkeypatch.setattr(chapter_runs, "mnist_split", lambda ctx: str(tmp_path / "mnist"))
    ran: list[list[str]] = []
    ctx = MakeContext(folder, True, str(tmp_path), lambda argv: ran.append(argv) or 0)
    chapter_runs.make_time(ctx)
    assert not any("--apply" in argv for argv in ran), ran
    plots = tmp_path / "plots"
    plots.mkdir()
    section = chapter_runs.time_section(folder, Document("lab"), plots)
    assert any(f.startswith("No fix was re-measured: the profiled run was measured under "
                            "other load") for f in section.findings), section.findings  # fmt: skip
