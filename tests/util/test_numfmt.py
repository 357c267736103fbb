"""Counts with their nouns (fmt_sig itself: tests/reports/test_stats.py)."""

from __future__ import annotations

from trainscope.util.numfmt import cores_text


def test_a_count_of_cores_has_its_noun() -> None:
    assert [cores_text(n) for n in (1, 1.0, 2, 1.5, 0)] == [
        "1 core", "1 core", "2 cores", "1.5 cores", "0 cores"
    ]  # fmt: skip
    assert cores_text(float("nan")) == "– cores"
