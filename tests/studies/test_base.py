"""Executing a study: order, skipping, failures, interrupt and resume, directory checks.

Most tests inject a fake ``run_fn`` that writes a minimal run record and records the call
order, so they run in milliseconds; one test runs a small real study end to end.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from trainscope.config import RunConfig, from_dict
from trainscope.errors import ConfigError, TrainscopeError
from trainscope.records import RunWriter, prepare_run_dir
from trainscope.records.study_dir import STUDY_FILE, PlannedRun, StudyPlan, load_study
from trainscope.studies import profile
from trainscope.studies.base import execute, execution_order, finish_plan, repeats_of

pytestmark = pytest.mark.timeout(120)

BASE = from_dict({"train": {"epochs": 1, "max_steps_per_epoch": 5}}).to_dict()


class FakeRun:
    """A ``run_fn`` that writes a completed summary into cfg.out and remembers each call.

    ``fail`` maps a 1-based call number (or a run directory's "config/rN" id) to the
    exception to raise instead; like the real run, it leaves a non-completed summary.
    """

    def __init__(self, fail: dict[int | str, BaseException] | None = None) -> None:
        self.calls: list[str] = []
        self.configs: list[RunConfig] = []
        self.fail = fail or {}

    def __call__(self, cfg: RunConfig, console: Any) -> dict[str, Any]:
        run_dir = Path(cfg.out)
        run_id = f"{run_dir.parent.name}/{run_dir.name}"
        self.calls.append(run_id)
        self.configs.append(cfg)
        writer = RunWriter(prepare_run_dir(cfg.out, True))
        try:
            writer.close()
            error = self.fail.get(len(self.calls)) or self.fail.get(run_id)
            if error is not None:
                message = f"{type(error).__name__}: {error}"
                writer.write_summary({"status": "failed", "error": message})
                raise error
            summary = {"status": "completed", "error": None, "lr": cfg.train.lr}
            writer.write_summary(summary)
            return summary
        finally:
            writer.release()  # as a real run does, however it ends


def ab_plan(repeats: int = 2, warmup: bool = True, **extra: PlannedRun) -> StudyPlan:
    """Two configurations (a: lr 0.1, b: lr 0.2) x ``repeats``, plus a warm-up."""
    runs = repeats_of("a", repeats, labels={"lr": 0.1}, overrides={"train.lr": 0.1})
    runs += repeats_of("b", repeats, labels={"lr": 0.2}, overrides={"train.lr": 0.2})
    return finish_plan("demo", BASE, {"repeats": repeats}, runs, warmup)


def quiet(text: str) -> None:
    pass


def status_of(study_dir: Path) -> str:
    return json.loads((study_dir / STUDY_FILE).read_text())["status"]


# ----------------------------------------------------------------------------- order


def test_warmup_first_then_round_robin_by_repeat(tmp_path):
    plan = ab_plan(repeats=3)
    fake = FakeRun()
    result = execute(plan, tmp_path / "s", say=quiet, run_fn=fake)
    expected = ["a/warmup", "a/r1", "b/r1", "a/r2", "b/r2", "a/r3", "b/r3"]
    assert fake.calls == expected
    assert result.executed == expected
    assert result.skipped == result.failed == result.not_applicable == []
    assert [r.id for r in execution_order(plan.runs)] == expected
    # Each run got the base config with its overrides, its own directory, no progress bars.
    assert [c.train.lr for c in fake.configs] == [0.1, 0.1, 0.2, 0.1, 0.2, 0.1, 0.2]
    assert all(c.train.epochs == 1 and c.train.max_steps_per_epoch == 5 for c in fake.configs)
    assert all(c.overwrite and not c.runtime.progress for c in fake.configs)
    assert fake.configs[2].out == str(tmp_path / "s" / "runs" / "b" / "r1")
    assert status_of(tmp_path / "s") == "completed"
    study = load_study(tmp_path / "s")
    assert study.meta["started_at"] and study.meta["finished_at"]
    assert [rec.summary["lr"] for rec in study.measured("b")] == [0.2, 0.2, 0.2]


def test_not_applicable_runs_are_never_executed(tmp_path):
    runs = repeats_of("ok", 2, overrides={"train.lr": 0.1})
    runs += repeats_of("gpu-only", 2, applicable=False, reason="needs CUDA")
    plan = finish_plan("demo", BASE, {}, runs, warmup=True)
    assert plan.runs[0].id == "ok/warmup"
    fake = FakeRun()
    said: list[str] = []
    result = execute(plan, tmp_path / "s", say=said.append, run_fn=fake)
    assert fake.calls == ["ok/warmup", "ok/r1", "ok/r2"]
    assert result.not_applicable == ["gpu-only/r1", "gpu-only/r2"]
    assert not (tmp_path / "s" / "runs" / "gpu-only").exists()
    assert any("gpu-only" in line and "needs CUDA" in line for line in said)
    assert status_of(tmp_path / "s") == "completed"


def test_warmup_copies_the_first_applicable_configuration():
    runs = repeats_of("gpu-only", 1, applicable=False, reason="needs CUDA")
    runs += repeats_of("x", 2, group="g", labels={"k": 1}, overrides={"train.lr": 0.3})
    plan = finish_plan("demo", BASE, {}, runs, warmup=True)
    warm, first = plan.runs[0], plan.runs[2]
    assert first.id == "x/r1"
    assert (warm.id, warm.group, warm.labels, warm.overrides) == (
        "x/warmup",
        "g",
        first.labels,
        first.overrides,
    )
    assert warm.labels["k"] == 1 and warm.overrides["train.lr"] == 0.3
    assert warm.applicable
    assert len(plan.runs) == 4
    no_warm = finish_plan("demo", BASE, {}, runs, warmup=False)
    assert not any(r.warmup for r in no_warm.runs) and len(no_warm.runs) == 3


# ------------------------------------------------------------------- interrupt, resume


def test_interrupt_then_resume_skips_completed_runs(tmp_path):
    study_dir = tmp_path / "s"
    plan = ab_plan(repeats=2)  # a/warmup, a/r1, b/r1, a/r2, b/r2
    interrupting = FakeRun(fail={4: KeyboardInterrupt()})
    with pytest.raises(KeyboardInterrupt):
        execute(plan, study_dir, say=quiet, run_fn=interrupting)
    assert interrupting.calls == ["a/warmup", "a/r1", "b/r1", "a/r2"]
    assert status_of(study_dir) == "interrupted"
    done = ["a/warmup", "a/r1", "b/r1"]
    before = {}
    for run_id in done:
        p = study_dir / "runs" / run_id / "summary.json"
        before[run_id] = (p.stat().st_mtime_ns, p.read_bytes())
    interrupted = load_study(study_dir)
    assert interrupted.status == "interrupted"
    assert [r.id for r, _ in interrupted.failed()] == ["a/r2"]

    counting = FakeRun()
    said: list[str] = []
    result = execute(plan, study_dir, say=said.append, run_fn=counting)
    assert result.skipped == done
    assert counting.calls == result.executed == ["a/r2", "b/r2"]
    assert result.failed == []
    assert sum("already done" in line for line in said) == 3
    for run_id, (mtime, content) in before.items():
        p = study_dir / "runs" / run_id / "summary.json"
        assert p.stat().st_mtime_ns == mtime
        assert p.read_bytes() == content
    assert status_of(study_dir) == "completed"
    study = load_study(study_dir)
    assert study.failed() == []
    assert all(study.completed(r) for r in plan.runs)

    # A third invocation has nothing left to do.
    idle = FakeRun()
    result = execute(plan, study_dir, say=quiet, run_fn=idle)
    assert idle.calls == [] and result.executed == []
    assert len(result.skipped) == len(plan.runs)


def test_a_failing_run_is_recorded_and_the_study_goes_on(tmp_path):
    study_dir = tmp_path / "s"
    plan = ab_plan(repeats=2)
    fake = FakeRun(fail={"b/r1": RuntimeError("out of luck")})
    said: list[str] = []
    result = execute(plan, study_dir, say=said.append, run_fn=fake)
    assert fake.calls == ["a/warmup", "a/r1", "b/r1", "a/r2", "b/r2"]
    assert result.failed == ["b/r1"]
    assert "b/r1" not in result.executed and len(result.executed) == 4
    assert any("b/r1" in line and "RuntimeError: out of luck" in line for line in said)
    assert status_of(study_dir) == "completed_with_failures"
    study = load_study(study_dir)
    assert [(r.id, why) for r, why in study.failed()] == [("b/r1", "RuntimeError: out of luck")]
    assert len(study.measured("b")) == 1

    rerun = FakeRun()
    result = execute(plan, study_dir, say=quiet, run_fn=rerun)
    assert rerun.calls == result.executed == ["b/r1"]
    assert len(result.skipped) == 4 and result.failed == []
    assert status_of(study_dir) == "completed"
    assert len(load_study(study_dir).measured("b")) == 2


# ------------------------------------------------------------------ directory checks


def test_a_different_plan_needs_overwrite(tmp_path):
    study_dir = tmp_path / "s"
    execute(ab_plan(repeats=2), study_dir, say=quiet, run_fn=FakeRun())
    other = ab_plan(repeats=3)
    fake = FakeRun()
    with pytest.raises(TrainscopeError, match="different study"):
        execute(other, study_dir, say=quiet, run_fn=fake)
    assert fake.calls == []
    assert load_study(study_dir).plan == ab_plan(repeats=2)  # study.json left alone

    result = execute(other, study_dir, overwrite=True, say=quiet, run_fn=fake)
    assert result.skipped == []
    assert len(fake.calls) == len(result.executed) == 7  # everything redone, old runs too
    assert load_study(study_dir).plan == other


def test_overwrite_redoes_even_the_same_plan(tmp_path):
    plan = ab_plan(repeats=1)
    execute(plan, tmp_path / "s", say=quiet, run_fn=FakeRun())
    fake = FakeRun()
    result = execute(plan, tmp_path / "s", overwrite=True, say=quiet, run_fn=fake)
    assert fake.calls == ["a/warmup", "a/r1", "b/r1"] and result.skipped == []


def test_refuses_a_non_empty_non_study_dir_and_a_file(tmp_path):
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "notes.txt").write_text("mine")
    fake = FakeRun()
    for overwrite in (False, True):  # a user's folder is never taken, --overwrite or not
        with pytest.raises(TrainscopeError, match="holds no trainscope marker"):
            execute(ab_plan(), busy, overwrite=overwrite, say=quiet, run_fn=fake)
    assert fake.calls == [] and sorted(p.name for p in busy.iterdir()) == ["notes.txt"]
    a_file = tmp_path / "file"
    a_file.write_text("x")
    with pytest.raises(TrainscopeError, match="not a directory"):
        execute(ab_plan(), a_file, say=quiet, run_fn=fake)
    # An empty existing directory is fine.
    (tmp_path / "empty").mkdir()
    execute(ab_plan(repeats=1), tmp_path / "empty", say=quiet, run_fn=fake)
    assert status_of(tmp_path / "empty") == "completed"


# ------------------------------------------------------------------------ finish_plan


def test_finish_plan_needs_an_applicable_configuration():
    runs = repeats_of("fp16", 2, applicable=False, reason="needs CUDA")
    with pytest.raises(TrainscopeError, match="no configuration can run"):
        finish_plan("demo", BASE, {}, runs, warmup=True)
    with pytest.raises(TrainscopeError, match="no configuration can run"):
        finish_plan("demo", BASE, {}, [], warmup=False)


@pytest.mark.parametrize(
    ("overrides", "needle"),
    [
        ({"data.batch_size": 0}, "batch_size"),
        ({"train.nonsense": 1}, "nonsense"),
        ({"runtime.precision": "fp8"}, "fp8"),
    ],
)
def test_finish_plan_validates_every_configuration_up_front(overrides, needle):
    runs = repeats_of("good", 2, overrides={"train.lr": 0.1})
    runs += repeats_of("bad", 2, overrides=overrides)  # not the first: still caught
    with pytest.raises(ConfigError, match=needle):
        finish_plan("demo", BASE, {}, runs, warmup=True)


def test_finish_plan_rejects_duplicate_run_ids():
    runs = repeats_of("a", 2) + repeats_of("a", 1)
    with pytest.raises(AssertionError, match="duplicate"):
        finish_plan("demo", BASE, {}, runs, warmup=False)


# ------------------------------------------------------------------- a real small study


def test_a_real_profile_study_runs_once_and_resumes_to_nothing(tmp_path):
    base = from_dict(
        {"train": {"epochs": 1, "max_steps_per_epoch": 5}, "runtime": {"progress": False}}
    ).to_dict()
    plan = profile.plan(base, torch.device("cpu"), repeats=2, warmup=True)
    study_dir = tmp_path / "profile"
    result = execute(plan, study_dir, say=quiet)
    assert result.executed == ["run/warmup", "run/r1", "run/r2"]
    assert result.failed == [] and result.skipped == []
    for run_id in result.executed:
        run_dir = study_dir / "runs" / run_id
        summary = json.loads((run_dir / "summary.json").read_text())
        assert summary["status"] == "completed"
        assert summary["workload"] == "digits"
        assert (run_dir / "config.yaml").is_file() and (run_dir / "metrics.jsonl").is_file()
    study = load_study(study_dir)
    assert study.status == "completed"
    assert len(study.measured("run")) == 2

    again = execute(plan, study_dir, say=quiet)
    assert again.executed == [] and again.skipped == ["run/warmup", "run/r1", "run/r2"]


def test_a_run_failing_before_its_summary_is_named_in_the_study(tmp_path: Path) -> None:
    base = from_dict({"runtime": {"progress": False}}).to_dict()
    plan = profile.plan(base, torch.device("cpu"), repeats=2, warmup=False)

    def run_fn(cfg: RunConfig, console: Any) -> dict[str, Any]:
        if cfg.out.endswith("r2"):
            raise OSError("disk full")
        RunWriter(prepare_run_dir(cfg.out, True)).write_summary({"status": "completed"})
        return {"status": "completed"}

    result = execute(plan, tmp_path / "s", say=lambda _: None, run_fn=run_fn)
    assert result.failed == ["run/r2"]
    study = load_study(tmp_path / "s")
    assert [(r.id, why) for r, why in study.failed()] == [("run/r2", "OSError: disk full")]


def test_study_json_keeps_the_command_for_the_report(tmp_path, monkeypatch):
    """Runs in processes of their own (study strategies) cannot record the study command
    in their env.json; study.json keeps it and the report's Reproduce section shows it."""
    from trainscope.reports.study_report import build_study_report

    argv = ["/usr/bin/trainscope", "study", "profile", "--epochs", "1"]
    monkeypatch.setattr("sys.argv", argv)
    execute(ab_plan(repeats=1, warmup=False), tmp_path / "s", say=quiet, run_fn=FakeRun())
    assert json.loads((tmp_path / "s" / STUDY_FILE).read_text())["argv"] == argv
    md = build_study_report(tmp_path / "s").markdown_path.read_text()
    assert "trainscope study profile --epochs 1" in md


def test_an_interrupted_study_says_how_far_it_got(tmp_path):
    said: list[str] = []
    with pytest.raises(KeyboardInterrupt):
        execute(
            ab_plan(repeats=2),
            tmp_path / "s",
            say=said.append,
            run_fn=FakeRun(fail={4: KeyboardInterrupt()}),
        )
    assert said[0].startswith("study ") and "5 runs planned" in said[0]
    assert said[-1].endswith("interrupted after 3 of 5 runs")
