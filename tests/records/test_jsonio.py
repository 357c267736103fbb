"""Strict JSON from records: non-finite floats become null wherever they sit, and the
common all-finite record is written in one pass."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from trainscope.records.jsonio import dumps


def test_finite_records_are_written_as_they_are() -> None:
    rec = {"step": 3, "loss": 0.25, "stages": {"forward": 1e-4}, "t": (1.0, 2)}
    assert dumps(rec) == json.dumps(rec)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, np.float32("nan")])
def test_non_finite_floats_become_null_at_any_depth(bad: float) -> None:
    rec = {"loss": 1.0, "stages": {"forward": bad}, "losses": [0.5, (bad, 2)], "x": Path("a")}
    text = dumps(rec)
    assert "NaN" not in text and "Infinity" not in text
    assert json.loads(text) == {
        "loss": 1.0, "stages": {"forward": None}, "losses": [0.5, [None, 2]], "x": "a"
    }  # fmt: skip


def test_what_json_cannot_hold_is_refused() -> None:
    with pytest.raises(TypeError, match="not JSON serialisable: object"):
        dumps({"x": object()})
