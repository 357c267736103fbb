"""The record schema layer (records.schema, records.record_specs): types, ranges, the
one-line messages naming file and field, strict and lenient checks (torch-free)."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

from tests.reports.runs import COMPLETED, FAILED
from trainscope.errors import RecordError, TrainscopeError
from trainscope.records import record_specs as specs
from trainscope.records.schema import (
    MAX_WORLD,
    Bool,
    Int,
    ListOf,
    MapOf,
    Num,
    Obj,
    OneOf,
    Text,
    Tuple,
    check,
    got,
    read,
    validate,
)

P = "runs/a/summary.json"


def message(data: object, spec: object) -> str:
    with pytest.raises(RecordError) as info:
        validate(data, spec, P)  # type: ignore[arg-type]
    text = str(info.value)
    assert "\n" not in text and text.startswith(f"{P}: ")
    return text


def test_the_message_names_the_file_the_field_what_it_should_be_and_what_it_is() -> None:
    spec = Obj({"stages_s": MapOf(Num())})
    assert message({"stages_s": [1, 2]}, spec) == (
        "runs/a/summary.json: field 'stages_s' should be an object of numbers, got a list"
    )
    assert message({}, Obj({"status": Text()}, ("status",))) == (
        "runs/a/summary.json: required field 'status' is missing"
    )
    nested = Obj({"epochs": ListOf(Obj({"train_loss": Num()}))})
    text = message({"epochs": [{"train_loss": 1.0}, {"train_loss": "x"}]}, nested)
    assert "field 'epochs[1].train_loss' should be a number in -1e200..1e200, got a string" in text
    err = pytest.raises(RecordError, validate, [1], Obj(), P).value
    assert err.field == "" and "the record should be an object, got a list" in str(err)
    assert isinstance(err, TrainscopeError) and err.problem == str(err).removeprefix(f"{P}: ")


@pytest.mark.parametrize(
    ("value", "shown"),
    [(None, "null"), (True, "true"), (-1, "-1"), (2**63, "9223372036854775808"),
     (10**400, "an integer of 401 digits"), (1e308, "1e+308"), (math.nan, "NaN"),
     (math.inf, "inf"), ("x", "a string"), ([], "a list"), ({}, "an object")],
)  # fmt: skip
def test_what_a_value_is_shown_as(value: object, shown: str) -> None:
    assert got(value) == shown


@pytest.mark.parametrize(
    ("spec", "good", "bad"),
    [
        (Num(0.0, 1.0), [0, 0.5, 1], [-0.1, 1.5, math.nan, math.inf, -math.inf, True, "1", None]),
        (Int(1, MAX_WORLD), [1, 4096, MAX_WORLD], [0, MAX_WORLD + 1, 2**63, 1.0, False, 10**400]),
        (Int(), [0, 2**63 - 1], [-1, 2**63, 3.0]),
        (Num(null=True), [None, -1e200, 1e200, 3], [1e308, math.nan, "NaN"]),
        (Text(choices=("a", "b")), ["a"], ["c", 1, None]),
        (Bool(), [True, False], [0, 1, "true", None]),
        (ListOf(Int(), min_items=1, max_items=2), [[1], [1, 2]], [[], [1, 2, 3], [1, "x"], {}]),
        (Tuple((Text(), Int())), [["a", 1]], [["a"], ["a", "b"], ("a", 1), [1, 1]]),
        (MapOf(Num(), keys=r"\d+"), [{}, {"0": 1.5}], [{"a": 1}, {"0": "x"}, []]),
        (OneOf((Int(), Text())), [3, "auto"], [1.5, None, [3]]),
        (Obj({"a": Int()}), [{}, {"a": 1, "other": [1, {}]}], [{"a": -1}, [], None]),
    ],
)
def test_types_and_ranges(spec: object, good: list, bad: list) -> None:
    for value in good:
        assert validate(value, spec, P) == value  # type: ignore[arg-type]
    for value in bad:
        with pytest.raises(RecordError):
            validate(value, spec, P)  # type: ignore[arg-type]


def test_lenient_check_leaves_out_bad_optional_fields_and_keeps_the_rest() -> None:
    spec = Obj(
        {"status": Text(), "wall": Num(0.0, 1e9), "inner": Obj({"a": Int(), "b": Int()}, ("b",))},
        ("status",),
    )
    data = {"status": "completed", "wall": math.nan, "inner": {"a": "x", "b": 2}, "new": [1]}
    out, lines = check(data, spec, P)
    assert out == {"status": "completed", "inner": {"b": 2}, "new": [1]}  # unknown: kept
    assert data["wall"] is not None and "a" in data["inner"]  # the input is not changed
    assert lines == [
        f"{P}: field 'wall' should be a number in 0..1e9, got NaN; left out",
        f"{P}: field 'inner.a' should be an integer >= 0, got a string; left out",
    ]
    # A required field inside an optional object takes the object out, and says which.
    out, lines = check({"status": "x", "inner": {"a": 1}}, spec, P)
    assert out == {"status": "x"}
    assert lines == [f"{P}: required field 'inner.b' is missing; 'inner' left out"]
    # A required field of the record itself is the record's fault: refused.
    with pytest.raises(RecordError, match="field 'status' should be a string, got a list"):
        check({"status": ["completed"]}, spec, P)


def test_a_vital_field_is_refused_rather_than_left_out() -> None:
    spec = Obj({"runs": ListOf(Int()), "note": Text()}, vital=("runs",))
    assert check({"note": 3}, spec, P)[0] == {}
    with pytest.raises(RecordError, match=r"field 'runs\[0\]'"):
        check({"runs": ["x"]}, spec, P)


def test_read_names_the_file(tmp_path) -> None:
    path = tmp_path / "COMPLETE.json"
    path.write_text(json.dumps({"format": 2, "files": {}}))
    with pytest.raises(RecordError, match=rf"{path}: field 'format' should be 1, got 2"):
        read(path, specs.MANIFEST)
    path.write_text('{"format": 1, "step": NaN, "files": {}}')  # Python's parser takes NaN
    with pytest.raises(RecordError, match="field 'step' should be an integer >= 0, got NaN"):
        read(path, specs.MANIFEST)
    path.write_text("[]")
    with pytest.raises(TrainscopeError, match="holds list, not an object"):
        read(path, specs.MANIFEST)


def test_summaries_trainscope_writes_fit_their_schema() -> None:
    for summary in (COMPLETED, FAILED):
        assert check(summary, specs.SUMMARY, P) == (summary, [])


@pytest.mark.parametrize(
    ("patch", "field"),
    [
        ({"epochs": {"a": 1}}, "epochs"),  # was KeyError -1 in the overview table
        ({"epochs": ["x"]}, "epochs[0]"),  # was AttributeError: 'str' has no 'get'
        ({"wall_time_s": 10**400}, "wall_time_s"),  # was OverflowError in stage shares
        ({"world_size": 2**63}, "world_size"),  # was a report looping over 2**63 ranks
        ({"steady_state": {"step_s": {"median": 1.0}}}, "steady_state.step_s.low"),
        ({"first_losses": {"a": 1}}, "first_losses"),
        ({"stages_s": {"forward": "1"}}, "stages_s.forward"),
        ({"ranks": [{"rank": -1}]}, "ranks[0].rank"),
        ({"memory": {"parameters_bytes": 1e308}}, "memory.parameters_bytes"),
    ],
)
def test_what_crashed_the_reports_is_named_and_left_out(patch: dict, field: str) -> None:
    out, lines = check({**COMPLETED, **patch}, specs.SUMMARY, P)
    (line,) = lines
    assert f"'{field}'" in line and line.endswith("left out")
    top = next(iter(patch))
    assert out.get(top, {}) != patch[top]


def test_record_specs_cover_a_cost_model_and_refuse_absurd_world_sizes() -> None:
    fit = {"op": "all_reduce", "alpha_s": 3e-5, "beta_s_per_byte": 5e-10, "world_size": 2,
           "points": 3, "max_rel_error": 0.01, "algorithm": "ring", "source": "fitted",
           "bandwidth_GBps": 2.0}  # fmt: skip
    study = {"kind": "collectives", "options": {"world_size": 2}, "cost_model": {"fits": {
        "all_reduce": fit}}}  # fmt: skip
    assert validate(study, specs.STUDY, "s/study.json") == study
    for key, value in (("world_size", 2**40), ("world_size", 1), ("alpha_s", -1.0)):
        bad = {**study, "cost_model": {"fits": {"all_reduce": {**fit, key: value}}}}
        text = pytest.raises(RecordError, validate, bad, specs.STUDY, "s/study.json").value
        assert f"field 'cost_model.fits.all_reduce.{key}'" in str(text)


def test_the_schema_modules_do_not_import_torch() -> None:
    code = (
        "import sys, trainscope.records.schema, trainscope.records.record_specs; "
        "sys.exit('torch' in sys.modules)"
    )
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_a_trainer_state_is_refused_where_loading_it_would_fail_later(tmp_path) -> None:
    import random

    import numpy as np

    version, words, gauss = random.getstate()
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    state = {
        "format": 1,
        "step": 3,
        "epoch": 0,
        "optimizer": {"param_groups": [{"params": [0, 1], "lr": 0.1}]},
        "rng": {
            "python": [version, list(words), gauss],
            "numpy": [kind, [int(k) for k in keys], int(pos), int(has_gauss), float(cached)],
        },
        "precision": {"skipped_steps": 0},
    }
    assert validate(state, specs.TRAINER_STATE, "t.json") == state
    bad = {**state, "rng": {**state["rng"], "python": [version, [*words[:-1], 625], gauss]}}
    with pytest.raises(RecordError, match=r"field 'rng.python\[1\]\[624\]' should be an"):
        validate(bad, specs.TRAINER_STATE, "t.json")  # random.setstate: "invalid state"
    bad = {**state, "precision": {"skipped_steps": "x"}}
    with pytest.raises(RecordError, match="field 'precision.skipped_steps'"):
        validate(bad, specs.TRAINER_STATE, "t.json")
    for field in ("optimizer", "rng", "step"):
        with pytest.raises(RecordError, match=f"required field '{field}' is missing"):
            validate({k: v for k, v in state.items() if k != field}, specs.TRAINER_STATE, "t")
