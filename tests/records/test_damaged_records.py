"""Every reader of a record against a generated corpus of damaged records.

One real, small, completed digits run (three steps, a checkpoint at each) is made for the
module. Each record file it wrote (``summary.json``, a checkpoint's ``trainer.json`` and
``COMPLETE.json``), a study's ``study.json`` around it and a collectives sweep's cost
model is then damaged field by field (``tests/records/damage.py``: each field dropped,
of another type, ``-1``, ``1e308``, ``2**63``, the bare ``NaN`` token). Every reader of the
record either works or ends in trainscope's own one-line error naming the file and the
field; a field it leaves out is named the same way in a RecordWarning. Never another
exception, never a hang.

To stay fast: each damage is put through the schema on its own, and the readers run on
the records the schema lets through (every damage at once in every field that takes
it, and the fields left out five at a time), with figures built but not rasterised
(:func:`cheap_figures`); the most extreme records get full reports with real figures.
The run report on every record let through (thirty reports) and those full reports are
``slow``; the quick tier keeps the schema on every damage, the other readers on every
record let through, and the reports of the issue's damaged records.
"""

from __future__ import annotations

import functools
import json
import os
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.records.damage import (
    DAMAGES,
    DROP,
    PNG,
    Failures,
    accepted_everywhere,
    at_the_edge,
    copy_run,
    corpus,
    dotted,
    names_it,
    one_line,
    rehash,
    run_reader,
)
from trainscope.cli import main
from trainscope.errors import ConfigError, RecordError
from trainscope.records import load_run
from trainscope.records.run_dir import RecordWarning
from trainscope.records.study_dir import load_study

pytestmark = pytest.mark.timeout(240)

# ---------------------------------------------------------------------------------------
# Fixtures: one real run, and copies of it to damage
# ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def real_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from trainscope.config import from_dict
    from trainscope.train.run import run

    out = tmp_path_factory.mktemp("damaged") / "digits"
    summary = run(
        from_dict(
            {
                "workload": {"name": "digits"},
                "train": {
                    "epochs": 1,
                    "max_steps_per_epoch": 3,
                    "checkpoint_every": 1,
                    "keep_checkpoints": 3,
                },
                "runtime": {"progress": False, "system_interval_s": 0.2},
                "out": str(out),
            }
        )
    )
    assert summary["status"] == "completed"
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == [
        "step-1",
        "step-2",
        "step-3",
    ]
    return out


@pytest.fixture
def cheap_figures(monkeypatch: pytest.MonkeyPatch) -> None:
    """Figures built with all their data, but neither laid out nor rasterised (what costs
    a report its time); the full drawing is exercised by the extreme records below."""
    from trainscope.analysis import memory, timeline
    from trainscope.render import plots

    def save(fig: Any, path_png: Any, path_svg: Any = None) -> list[Path]:
        png = Path(path_png)
        png.parent.mkdir(parents=True, exist_ok=True)
        png.write_bytes(PNG)
        return [png]

    for module in (plots, memory, timeline):
        monkeypatch.setattr(module, "save_figure", save)


# ---------------------------------------------------------------------------------------
# summary.json: load_run, the run report, compare, quantize's reader
# ---------------------------------------------------------------------------------------


def summary_readers(run: Path, base: Path, out: Path) -> dict[str, Callable[[], Any]]:
    from trainscope.reports.compare import build_comparison
    from trainscope.reports.run_report import build_run_report
    from trainscope.tools.quantize import quantize_run

    def quantize_reader() -> None:
        # Reads the run directory and its summary, then refuses repeats=0 before any work.
        with pytest.raises(ConfigError, match="repeats must be"):
            quantize_run(run, repeats=0)

    return {
        "load_run": lambda: load_run(run),
        "report": lambda: build_run_report(run, out / "report"),
        "compare": lambda: build_comparison([run, base], out / "compare"),
        "quantize": quantize_reader,
    }


def test_every_damaged_summary_is_read_or_named(real_run: Path, tmp_path: Path) -> None:
    """Each damage on its own: the summary's reader (what load_run, quantize and the
    study loader call) leaves the field out or refuses the record, naming both."""
    from trainscope.records.record_specs import SUMMARY
    from trainscope.records.schema import check

    record = json.loads((real_run / "summary.json").read_text())
    path = tmp_path / "summary.json"
    failures, cases, refused = Failures(), 0, 0
    for name, at, text in corpus(record):
        cases += 1
        case = f"summary.json with {dotted(at)} {name}"
        try:
            # read_summary without the file: 1500 writes would cost seconds, not the check
            _, left_out = check(json.loads(text), SUMMARY, path)
        except RecordError as e:  # only a required field refuses the whole record
            refused += 1
            if not (names_it(str(e), path, at) and one_line(e)):
                failures.add("read_summary", case, e)
            continue
        except Exception as e:  # noqa: BLE001
            failures.add("read_summary", case, f"{type(e).__name__}: {e}")
            continue
        if left_out and not all(names_it(line, path, at) for line in left_out):
            failures.add("read_summary", case, f"the note does not name it: {left_out}")
    assert cases > 1000 and 0 < refused < 20
    failures.check()


def let_through(record: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The summaries the schema lets through, by case: each damage put at once in every
    field that takes it, and the fields left out five at a time (what any refused damage
    comes down to), each distinct record once."""
    from trainscope.records.record_specs import SUMMARY

    records: dict[str, dict[str, Any]] = {}
    for name, value in DAMAGES.items():
        if value is not DROP:
            for deepest in (True, False):
                where = "deepest" if deepest else "shallowest"
                records[f"{name} in every {where} field that takes it"] = accepted_everywhere(
                    record, value, SUMMARY, deepest
                )
    # Left out five at a time (each with others than its own group present).
    optional = [key for key in record if key != "status"]
    for group in range(0, len(optional), 5):
        keys = optional[group : group + 5]
        records[f"{', '.join(keys)} left out"] = {k: v for k, v in record.items() if k not in keys}
    assert len(records) > 25
    distinct, seen = {}, set()
    for case, summary in records.items():
        text = json.dumps(summary, sort_keys=True)
        if text not in seen:  # e.g. 2**63 is let through nowhere: the record is the original
            seen.add(text)
            distinct[case] = text
    return distinct


def check_readers(real_run: Path, tmp_path: Path, readers: tuple[str, ...]) -> None:
    """The named summary readers on every summary the schema lets through: each reads it
    without an error or a note."""
    record = json.loads((real_run / "summary.json").read_text())
    run = copy_run(real_run, tmp_path / "run")
    failures = Failures()
    for case, text in let_through(record).items():
        (run / "summary.json").write_text(text)
        for reader, fn in summary_readers(run, real_run, tmp_path / "out").items():
            if reader not in readers:
                continue
            _, notes, error = run_reader(fn, reader, case, failures)
            if error is not None or notes:
                failures.add(
                    reader, case, f"refused or noted what the schema let through: {error or notes}"
                )
    failures.check()


def test_every_reader_of_what_the_summary_schema_lets_through(
    real_run: Path, tmp_path: Path, cheap_figures: None
) -> None:
    """The readers load_run, compare and quantize's reader on every summary the schema
    lets through (the run report on them: the next test)."""
    check_readers(real_run, tmp_path, ("load_run", "compare", "quantize"))


@pytest.mark.slow  # 30 run reports, their figures built: tens of seconds
def test_the_run_report_on_what_the_summary_schema_lets_through(
    real_run: Path, tmp_path: Path, cheap_figures: None
) -> None:
    """The run report (every section and figure built, the figures not rasterised) on
    every summary the schema lets through."""
    check_readers(real_run, tmp_path, ("report",))


@pytest.mark.slow  # full reports with real figures
def test_the_most_extreme_summaries_that_pass_draw_real_figures(
    real_run: Path, tmp_path: Path
) -> None:
    """Every number of the summary at once at the edge the schema lets through (the
    largest, then the smallest: 2**63-1 steps, 1e9 seconds, -1e200 losses), then a
    summary with every optional field left out: full reports with real figures."""
    from trainscope.records.record_specs import SUMMARY
    from trainscope.reports.compare import build_comparison
    from trainscope.reports.run_report import build_run_report

    record = json.loads((real_run / "summary.json").read_text())
    cases = {side: at_the_edge(record, SUMMARY, side) for side in ("high", "low")}
    cases["bare"] = {"status": "completed"}
    for name, summary in cases.items():
        run = copy_run(real_run, tmp_path / name)
        (run / "summary.json").write_text(json.dumps(summary))
        with warnings.catch_warnings():
            warnings.simplefilter("error", RecordWarning)  # nothing here is left out
            report = build_run_report(run, tmp_path / f"{name}-report")
            build_comparison([run, real_run], tmp_path / f"{name}-compare")
        pngs = [f for f in report.files if f.suffix == ".png"]
        assert pngs and all(f.read_bytes()[:8] == PNG for f in pngs)


def test_reports_of_damaged_summaries_say_what_was_left_out(
    real_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], cheap_figures: None
) -> None:
    """The report and compare crashes of the issue (KeyError -1, AttributeError,
    OverflowError, a hang over 2**63 ranks): each a note naming the field now."""
    record = json.loads((real_run / "summary.json").read_text())
    cases = {
        "key-error": {"epochs": {"a": 1}},
        "attribute-error": {"epochs": ["x"], "stages_s": [1, 2]},
        "overflow": {"wall_time_s": 10**400},
        "hang": {"world_size": 2**63},
        "key-error-low": {"steady_state": {"step_s": {"median": 0.1}}},
    }
    for name, patch in cases.items():
        run = copy_run(real_run, tmp_path / name)
        (run / "summary.json").write_text(json.dumps({**record, **patch}))
        assert main(["report", str(run)]) == 0, name
        err = capsys.readouterr().err.strip().splitlines()
        assert err and all(str(run / "summary.json") in line for line in err), err
        assert all(f"'{field}" in " ".join(err) for field in patch), err
        md = (run / "report" / "report.md").read_text(encoding="utf-8")
        assert "Damaged record:" in md
        assert main(["compare", str(run), str(real_run), "--out", str(tmp_path / "c"), "-q"]) == 0
        assert capsys.readouterr().err == ""  # -q: errors only
    # A summary without its required field is refused in one line, never "internal error".
    run = copy_run(real_run, tmp_path / "no-status")
    (run / "summary.json").write_text(
        json.dumps({k: v for k, v in record.items() if k != "status"})
    )
    assert main(["report", str(run), "-q"]) == 1
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert f"{run / 'summary.json'}: required field 'status' is missing" in line


def test_a_run_folder_named_in_bytes_that_are_not_utf8_is_reported(
    real_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = copy_run(real_run, Path(os.fsdecode(os.fsencode(tmp_path) + b"/run\xff")))
    assert main(["report", str(run)]) == 0
    out = capsys.readouterr()
    assert "internal error" not in out.err and "run\\xff" in out.out
    md = (run / "report" / "report.md").read_text(encoding="utf-8")
    assert "run\\xff" in md  # the byte shown as an escape, in every output
    assert (run / "report" / "plots" / "memory.png").read_bytes()[:8] == PNG
    assert main(["compare", str(run), str(real_run), "--out", str(tmp_path / "c"), "-q"]) == 0


def test_quantize_refuses_a_summary_that_is_not_one(
    real_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = copy_run(real_run, tmp_path / "run")
    for text, words in (("[1, 2]", "holds list, not an object"), ("{}", "required field 'status'")):
        (run / "summary.json").write_text(text)
        assert main(["quantize", str(run), "--repeats", "1"]) == 1
        (line,) = capsys.readouterr().err.strip().splitlines()
        assert str(run / "summary.json") in line and words in line
        assert not (run / "quantize.json").exists()


# ---------------------------------------------------------------------------------------
# A checkpoint: COMPLETE.json and trainer.json (resume's reader)
# ---------------------------------------------------------------------------------------


def test_every_damaged_trainer_state_is_refused_by_name_or_loads(
    real_run: Path, tmp_path: Path
) -> None:
    """Resume's checkpoint reader (train.checkpoint.checked_state, which load_checkpoint
    and the resume's precheck call) on each damage of trainer.json: refused naming the
    file and the field (and the resume falls back, see below), or let through. What it
    lets through is resumed from in the next test; here each case is checked without
    writing and re-hashing the checkpoint 300 times (the same check, minus the files)."""
    from trainscope.records.record_specs import TRAINER_STATE
    from trainscope.records.schema import validate
    from trainscope.train.checkpoint import Checkpoint, load_checkpoint

    run = copy_run(real_run, tmp_path / "run", checkpoints=True)
    ckpt = Checkpoint(run / "checkpoints" / "step-3", 3)
    path = ckpt.path / "trainer.json"
    record = json.loads(path.read_text())
    failures, cases, refused = Failures(), 0, 0
    # The RNG states are lists of 625 and 624 numbers: their first item stands for all.
    for name, at, text in corpus(record, opaque=(("run", "config"),)):
        cases += 1
        case = f"trainer.json with {dotted(at)} {name}"
        check = functools.partial(validate, json.loads(text), TRAINER_STATE, path)
        _, _, error = run_reader(check, "checked_state", case, failures)
        refused += error is not None
        if error is not None and not names_it(str(error), path, at):
            failures.add("checked_state", case, f"the error does not name it: {error}")
    assert cases > 250 and refused > 100
    failures.check()
    # The same through the files, once: a field missing, the manifest re-hashed to match.
    path.write_text(json.dumps({k: v for k, v in record.items() if k != "rng"}))
    rehash(ckpt.path, "trainer.json")
    with pytest.raises(RecordError, match=rf"{path}: required field 'rng' is missing"):
        load_checkpoint(ckpt)


def test_resume_goes_on_from_what_the_trainer_state_schema_lets_through(
    real_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``run --resume`` from a newest checkpoint whose trainer.json holds, at once in
    every field that takes it, each damage the schema lets through: it trains on, or
    refuses in one line. What the run is compared on (its config, world size, device
    and data) is left alone: any change there is refused by design (test_resume.py)."""
    from trainscope.records.record_specs import TRAINER_STATE

    compared = tuple(("run", k) for k in ("config", "world_size", "device_type", "data"))

    state = json.loads((real_run / "checkpoints" / "step-3" / "trainer.json").read_text())
    failures, resumed, seen = Failures(), 0, set()
    for name, value in DAMAGES.items():
        if value is DROP:
            continue
        case = f"trainer.json with {name} in every field that takes it"
        damaged_state = accepted_everywhere(state, value, TRAINER_STATE, True, compared)
        if json.dumps(damaged_state) in seen:
            continue
        seen.add(json.dumps(damaged_state))
        run = copy_run(real_run, tmp_path / name.replace("*", "x"), checkpoints=True)
        ckpt = run / "checkpoints" / "step-3"
        (ckpt / "trainer.json").write_text(json.dumps(damaged_state))
        rehash(ckpt, "trainer.json")
        code = main(["run", "--resume", str(run), "--epochs", "2", "-q"])
        err = capsys.readouterr().err.strip().splitlines()
        if code == 0 and err or code != 0 and (len(err) != 1 or "internal error" in err[0]):
            failures.add("run --resume", case, f"exit {code}: {err}")
        resumed += code == 0
    failures.check()
    assert resumed >= 5  # most go on: the damage left is what a resume can take


def test_a_damaged_manifest_is_named(real_run: Path, tmp_path: Path) -> None:
    from trainscope.train.checkpoint import Checkpoint, verify

    run = copy_run(real_run, tmp_path / "run", checkpoints=True)
    ckpt = Checkpoint(run / "checkpoints" / "step-3", 3)
    path = ckpt.path / "COMPLETE.json"
    record = json.loads(path.read_text())
    failures = Failures()
    for name, at, text in corpus(record):
        case = f"COMPLETE.json with {dotted(at)} {name}"
        path.write_text(text)
        _, _, error = run_reader(lambda: verify(ckpt), "verify", case, failures)
        # A manifest that fits its schema but not the files names the file it describes.
        if isinstance(error, RecordError) and not names_it(str(error), path, at):
            failures.add("verify", case, f"the error does not name it: {error}")
        if error is not None and not isinstance(error, RecordError):
            if str(ckpt.path) not in str(error):
                failures.add("verify", case, f"the error names no file: {error}")
    failures.check()


def _damage_trainer_state(ckpt: Path) -> None:
    state = json.loads((ckpt / "trainer.json").read_text())
    del state["optimizer"]  # valid JSON, a field missing, the manifest re-hashed to match
    (ckpt / "trainer.json").write_text(json.dumps(state))
    rehash(ckpt, "trainer.json")


def test_resume_falls_back_past_a_damaged_trainer_state_and_names_it(
    real_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = copy_run(real_run, tmp_path / "run", checkpoints=True)
    _damage_trainer_state(run / "checkpoints" / "step-3")
    assert main(["run", "--resume", str(run), "--epochs", "2", "-q"]) == 0
    assert capsys.readouterr().err == ""
    summary = load_run(run).summary
    assert summary["status"] == "completed" and len(summary["epochs"]) == 2
    assert summary["attempts"][-1]["checkpoint"] == "checkpoints/step-2"
    damaged = f"{run / 'checkpoints' / 'step-3' / 'trainer.json'}: required field 'optimizer'"
    assert any(damaged in n and "falling back" in n for n in summary["notes"])


def test_resume_with_every_checkpoint_damaged_names_them_under_q(
    real_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = copy_run(real_run, tmp_path / "run", checkpoints=True)
    before = (run / "summary.json").read_bytes()
    for step in (1, 2, 3):
        _damage_trainer_state(run / "checkpoints" / f"step-{step}")
    assert main(["run", "--resume", str(run), "--epochs", "2", "-q"]) == 1
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "internal error" not in line and "--checkpoint-every" not in line
    assert "every checkpoint" in line and "damaged" in line
    for step in (1, 2, 3):
        assert f"step-{step}/trainer.json: required field 'optimizer' is missing" in line
    assert (run / "summary.json").read_bytes() == before  # refused before writing anything


# ---------------------------------------------------------------------------------------
# study.json (the study loader) and a collectives sweep's cost model
# ---------------------------------------------------------------------------------------

FIT = {"op": "all_reduce", "alpha_s": 3e-5, "beta_s_per_byte": 5e-10, "world_size": 2,
       "points": 3, "max_rel_error": 0.01, "algorithm": "ring", "source": "fitted",
       "bandwidth_GBps": 2.0}  # fmt: skip
COST_MODEL = {"source": "a sweep", "world_size": 2, "backend": "gloo", "fits": {"all_reduce": FIT}}


def test_the_study_loader_on_a_damaged_study_file(real_run: Path, tmp_path: Path) -> None:
    study = tmp_path / "study"
    copy_run(real_run, study / "runs" / "single" / "r1")
    record = {
        "schema_version": 1,
        "status": "completed",
        "kind": "strategies",
        "options": {"repeats": 1, "warmup": False, "nproc": 2, "strategies": ["single"],
                    "device": "cpu", "bucket_mb": 25.0, "cost_model": COST_MODEL},
        "base_config": {"workload": {"name": "digits"}},
        "runs": [{"config": "single", "repeat": 1, "group": "main", "applicable": True,
                  "labels": {"strategy": "single", "processes": 1}, "overrides": {},
                  "reason": None}],
        "failures": {},
        "argv": ["study", "strategies"],
    }  # fmt: skip
    path = study / "study.json"
    failures = Failures()
    for name, at, text in corpus(record, depth=4):
        case = f"study.json with {dotted(at)} {name}"
        path.write_text(text)
        loaded, notes, error = run_reader(lambda: load_study(study), "load_study", case, failures)
        if error is not None and not names_it(str(error), path, at):
            failures.add("load_study", case, f"the error does not name it: {error}")
        if notes and not all(names_it(n, path, at) for n in notes):
            failures.add("load_study", case, f"the note does not name it: {notes}")
        if loaded is not None:
            run_reader(loaded.failed, "StudyRecord.failed", case, failures)
            run_reader(loaded.interrupted, "StudyRecord.interrupted", case, failures)
    failures.check()


def _sweep(d: Path, **record: Any) -> Path:
    from trainscope.comm import cost_model as model

    n = record.get("options", {}).get("world_size", 2)
    results = []
    for op in ("all_reduce", "broadcast"):
        lat, bw = model.terms(op, n)
        for m in (1024, 1 << 20, 1 << 24):
            t = 30e-6 * lat + bw * m / 2e9
            results.append({"op": op, "bytes": m, "time_s": t, "world_size": n, "wrong": 0})
    d.mkdir(parents=True, exist_ok=True)
    (d / "study.json").write_text(json.dumps({"kind": "collectives", "results": results, **record}))
    return d


def test_the_cost_model_reader_on_a_damaged_sweep(tmp_path: Path) -> None:
    from trainscope.studies.strategies_model import study_options

    sweep = _sweep(tmp_path / "sweep", options={"world_size": 2, "nproc": 2, "nnodes": 1,
                   "backend": "gloo"}, cost_model=COST_MODEL)  # fmt: skip
    path = sweep / "study.json"
    record = json.loads(path.read_text())
    failures = Failures()
    for name, at, text in corpus(record, depth=4):
        case = f"sweep study.json with {dotted(at)} {name}"
        path.write_text(text)
        fn = lambda: study_options(25, str(sweep), ["allreduce"], nproc=2)  # noqa: E731
        options, _, error = run_reader(fn, "study_options", case, failures)
        if isinstance(error, RecordError) or (error and "field" in str(error)):
            if not names_it(str(error), path, at):
                failures.add("study_options", case, f"the error does not name it: {error}")
        if options is not None:
            world = options["cost_model"]["world_size"]
            if not (isinstance(world, int) and 1 <= world <= 1 << 20):
                failures.add("study_options", case, f"kept world size {world!r}")
    failures.check()


def test_a_cost_model_from_another_world_size_is_noted_and_an_absurd_one_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sweep = _sweep(tmp_path / "wide", options={"world_size": 4096, "backend": "gloo"})
    argv = ["study", "strategies", "--nproc", "2", "--strategies", "allreduce", "--dry-run"]
    assert main([*argv, "--cost-model", str(sweep)]) == 0
    err = capsys.readouterr().err
    assert "note:" in err and "fitted on 4096 processes, the study runs 2" in err
    from trainscope.studies.strategies_model import study_options

    options = study_options(25, str(sweep), ["allreduce"], nproc=2)
    assert options["cost_model"]["world_size"] == 4096 and options["cost_model"]["notes"]
    assert not study_options(25, str(sweep), ["allreduce"], nproc=4096)["cost_model"]["notes"]

    fits = {"all_reduce": {**FIT, "world_size": 2**40}}
    absurd = _sweep(tmp_path / "absurd", cost_model={"fits": fits})
    assert main([*argv, "--cost-model", str(absurd)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert str(absurd / "study.json") in line
    assert "field 'cost_model.fits.all_reduce.world_size' should be an integer in 2..2**20" in line
