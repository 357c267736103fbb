"""The rule that keeps a repeat measured under other load out of every comparison
(util.load), and the n >= 3 rule for claims (util.spread)."""

from __future__ import annotations

import pytest

from trainscope.util.load import IGNORE_LOAD_ENV, LOADED_CORES_ENV, load_of, loaded, not_a_finding
from trainscope.util.spread import differ, no_difference_text, spread


def cpu(other: float | None, threads: int = 1, procs: int = 1, cores: int = 2) -> dict:
    return {"cpu": {"threads": threads, "processes_on_node": procs, "cores": cores,
                    "other_cores": other}}  # fmt: skip


@pytest.fixture(autouse=True)
def rule_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(IGNORE_LOAD_ENV, raising=False)  # the suite switches it off
    monkeypatch.delenv(LOADED_CORES_ENV, raising=False)


def test_a_repeat_is_loaded_from_half_a_core_of_other_load() -> None:
    assert not loaded(cpu(0.05)) and not loaded(cpu(0.4))
    assert loaded(cpu(0.5)) and loaded(cpu(1.9))


def test_threads_that_did_not_fit_beside_the_load_count_too() -> None:
    # 2 threads on 2 cores beside 0.3 cores of other load: spin-waiting threads.
    assert loaded(cpu(0.3, threads=2))
    assert not loaded(cpu(0.3, threads=1))
    assert not loaded(cpu(0.2, threads=2))  # within the margin of daemons and the sampler


def test_records_without_the_section_and_the_switches() -> None:
    assert not loaded({}) and not loaded({"cpu": "damaged"}) and not loaded(cpu(None))


def test_the_limit_can_be_moved_and_the_rule_switched_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(LOADED_CORES_ENV, "1.2")
    assert not loaded(cpu(0.9, cores=4)) and loaded(cpu(1.3, cores=4))
    monkeypatch.setenv(LOADED_CORES_ENV, "nonsense")
    assert loaded(cpu(0.6))  # the default, not an error
    monkeypatch.setenv(IGNORE_LOAD_ENV, "1")
    assert not loaded(cpu(1.9))


def test_the_sentence_that_replaces_a_ratio() -> None:
    assert load_of([cpu(1.85)]) == "1.9 cores"
    assert load_of([cpu(1.2), cpu(1.9), cpu(1.5)]) == "1.2–1.9 cores (3 repeats)"
    text = not_a_finding("all 3 repeats of workers=2", [cpu(1.8)] * 3)
    assert text == (
        "not a finding: other processes kept 1.8 cores busy during all 3 repeats of workers=2"
    )


def test_two_repeats_with_one_outlier_are_not_a_finding() -> None:
    """The loader study's "25.18x for 2 workers": one 58 s spell among 2.3 s epochs at
    n=2. Two repeats are too few to conclude, whatever their spreads."""
    slow, fast = spread([2.3, 58.0]), spread([0.09, 0.1])
    assert not differ(slow, fast)
    assert "too few repeats to conclude at n=2" in no_difference_text(slow, fast)
    assert differ(spread([2.3, 2.4, 2.5]), spread([0.09, 0.1, 0.11]))
