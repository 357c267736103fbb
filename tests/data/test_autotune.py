"""Tests for ``--num-workers auto``: candidates, one measurement, the choice and its cache.

Timings here are planted, never measured: :class:`Planted` swaps the module's clock and
loader for a fake clock that a fake loader advances by chosen amounts per batch, so the
real ``measure``/``_search``/``decide`` code runs on known numbers. Planted seconds are
powers of two where a test counts batches, so the fake clock adds them exactly. The few
tests that build real loaders assert only structure and relations, no timing.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import TensorDataset

from trainscope.config import DataConfig
from trainscope.data import autotune
from trainscope.data.autotune import (
    CACHE_FILE,
    CACHE_VERSION,
    MIN_BATCHES,
    AutoWorkers,
    Trial,
    cache_key,
    choose_num_workers,
    decide,
    default_candidates,
    entry_problem,
    measure,
    summarise,
)

pytestmark = pytest.mark.timeout(120)

CPU = torch.device("cpu")

RESULT_KEYS = {"chosen", "fastest", "within_noise", "reason", "trials", "cached", "seconds", "key"}


def small_dataset(n: int = 64) -> TensorDataset:
    g = torch.Generator().manual_seed(0)
    return TensorDataset(torch.randn(n, 1, 8, 8, generator=g), torch.arange(n) % 10)


def auto_cfg(batch_size: int = 8) -> DataConfig:
    return DataConfig(batch_size=batch_size, num_workers="auto")


def strict_json(result: AutoWorkers) -> dict[str, Any]:
    """``to_dict()`` through strict JSON (no NaN or infinity) and back."""
    return json.loads(json.dumps(result.to_dict(), allow_nan=False))


# ---------------------------------------------------------------------- planted timings


class FakeClock:
    """A clock that moves only when told to."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Plan:
    """What one worker count's loader costs: start-up, then per-batch seconds (cycled)."""

    startup_s: float
    batch_s: list[float]
    epoch_batches: int = 100


class PlantedLoader:
    """Yields tiny batches, advancing the fake clock by the plan's seconds for each."""

    def __init__(self, plan: Plan, clock: FakeClock) -> None:
        self.plan, self.clock = plan, clock

    def __len__(self) -> int:
        return self.plan.epoch_batches

    def __iter__(self):
        x, y = torch.zeros(2, 1), torch.zeros(2)
        costs = self.plan.batch_s
        for i in range(self.plan.epoch_batches):
            self.clock.now += self.plan.startup_s if i == 0 else costs[(i - 1) % len(costs)]
            yield x, y


@dataclass
class Planted:
    clock: FakeClock
    plans: dict[int, Plan] = field(default_factory=dict)
    tried: list[int] = field(default_factory=list)


@pytest.fixture
def planted(monkeypatch: pytest.MonkeyPatch) -> Planted:
    """The module's clock and loaders replaced by planted ones (fill ``.plans``)."""
    p = Planted(FakeClock())

    def fake_make_loader(dataset, cfg, *, train, device, num_workers):
        p.tried.append(num_workers)
        return PlantedLoader(p.plans[num_workers], p.clock)

    monkeypatch.setattr(autotune, "clock", p.clock)
    monkeypatch.setattr(autotune, "make_loader", fake_make_loader)
    return p


def choose(candidates: list[int], budget_s: float = 60.0, **kwargs: Any) -> AutoWorkers:
    return choose_num_workers(
        small_dataset(),
        auto_cfg(),
        CPU,
        workload="w",
        cache_dir=None,
        candidates=candidates,
        budget_s=budget_s,
        **kwargs,
    )


class FakeMeasure:
    """Stands in for :func:`measure`: a steady per-batch time per worker count, no loaders."""

    def __init__(self, per_batch: dict[int, float]) -> None:
        self.per_batch = per_batch
        self.calls: list[tuple[int, float]] = []  # (num_workers, time limit)

    def __call__(self, dataset, cfg, device, num_workers, max_batches, time_limit_s, **kw):
        self.calls.append((num_workers, time_limit_s))
        return summarise(num_workers, 0.1, [self.per_batch[num_workers]] * 12, 100)

    @property
    def tried(self) -> list[int]:
        return [n for n, _ in self.calls]


def refuse_to_measure(*args, **kwargs):
    raise AssertionError("measure() must not run: the cached choice should be used")


# ------------------------------------------------------------------------- candidates


@pytest.mark.parametrize(
    ("cpus", "want"),
    [
        (1, [0, 1]),
        (2, [0, 1, 2]),
        (3, [0, 1, 2, 3]),
        (6, [0, 1, 2, 4, 6]),
        (8, [0, 1, 2, 4, 8]),
        (12, [0, 1, 2, 4, 8, 12]),
        (64, [0, 1, 2, 4, 8, 16]),  # capped at the limit
    ],
)
def test_default_candidates(cpus: int, want: list[int]) -> None:
    assert default_candidates(cpus) == want


def test_default_candidates_limit_and_this_machine() -> None:
    assert default_candidates(64, limit=6) == [0, 1, 2, 4, 6]
    mine = default_candidates()
    assert mine[0] == 0 and mine == sorted(set(mine)) and len(mine) >= 2


# ------------------------------------------------------------------- measure, for real


def test_measure_returns_a_plausible_trial() -> None:
    trial = measure(small_dataset(), auto_cfg(), CPU, 0, max_batches=5, time_limit_s=30.0)
    assert isinstance(trial, Trial) and trial.num_workers == 0
    # 8 batches of 8: the first is in the start-up, the other 7 are timed one by one (the
    # minimum of batches asks for more than max_batches=5, and the epoch has only 7).
    assert trial.epoch_batches == 8 and trial.n == 7 and trial.min_batches == 7
    assert trial.complete and trial.spread == "IQR"
    assert trial.startup_s >= 0 and trial.measured_s >= 0
    assert trial.per_batch_low_s <= trial.per_batch_s <= trial.per_batch_high_s
    assert trial.epoch_low_s <= trial.epoch_estimate_s <= trial.epoch_high_s
    assert trial.epoch_estimate_s == pytest.approx(trial.startup_s + 7 * trial.per_batch_s)


def test_measure_never_times_more_batches_than_an_epoch_has() -> None:
    trial = measure(small_dataset(20), auto_cfg(), CPU, 0, max_batches=50, time_limit_s=30.0)
    assert trial.epoch_batches == 3 and trial.n == 2  # 20 samples in batches of 8
    assert trial.complete and trial.spread == "min–max"  # n < 5: the full range


def test_measure_with_a_worker_process() -> None:
    trial = measure(small_dataset(), auto_cfg(), CPU, 1, max_batches=3, time_limit_s=30.0)
    assert trial.num_workers == 1 and 0 <= trial.n <= 7 and trial.epoch_estimate_s > 0


# ------------------------------------------------------------ measure, planted timings


def test_measure_times_start_up_apart_and_each_batch(planted: Planted) -> None:
    planted.plans[0] = Plan(0.25, [0.0078125, 0.015625], epoch_batches=13)
    trial = measure(small_dataset(), auto_cfg(), CPU, 0, max_batches=50, time_limit_s=60)
    assert trial.startup_s == 0.25 and trial.n == 12  # the epoch ran out
    assert trial.measured_s == 6 * 0.0078125 + 6 * 0.015625
    assert trial.per_batch_s == pytest.approx((0.0078125 + 0.015625) / 2)  # the median
    assert (trial.per_batch_low_s, trial.per_batch_high_s) == (0.0078125, 0.015625)
    assert trial.epoch_estimate_s == pytest.approx(0.25 + 12 * trial.per_batch_s)
    assert trial.epoch_low_s == pytest.approx(0.25 + 12 * 0.0078125)
    assert trial.epoch_high_s == pytest.approx(0.25 + 12 * 0.015625)


def test_a_trial_keeps_going_to_its_minimum_time(planted: Planted) -> None:
    # Ten fast batches are only 0.16 s: the trial goes on until 0.5 s of them.
    planted.plans[0] = Plan(0.0, [0.015625], epoch_batches=1000)
    trial = measure(small_dataset(), auto_cfg(), CPU, 0, max_batches=10, time_limit_s=60)
    assert trial.n == 32 and trial.measured_s == 0.5 and trial.complete


def test_a_trial_keeps_going_to_its_minimum_of_batches(planted: Planted) -> None:
    planted.plans[0] = Plan(0.0, [0.25], epoch_batches=1000)
    trial = measure(small_dataset(), auto_cfg(), CPU, 0, max_batches=3, time_limit_s=60)
    assert trial.n == MIN_BATCHES and trial.complete


def test_a_trial_cut_short_by_its_time_limit_says_so(planted: Planted) -> None:
    planted.plans[0] = Plan(0.5, [0.125], epoch_batches=100)
    trial = measure(small_dataset(), auto_cfg(), CPU, 0, max_batches=50, time_limit_s=1.0)
    assert trial.n == 4 and trial.min_batches == MIN_BATCHES and not trial.complete
    assert "cut short: 4 of 10 batches" in trial.describe()


def test_start_up_longer_than_the_limit_leaves_a_short_trial(planted: Planted) -> None:
    planted.plans[0] = Plan(2.0, [0.125], epoch_batches=100)
    trial = measure(small_dataset(), auto_cfg(), CPU, 0, max_batches=50, time_limit_s=1.0)
    assert trial.n == 0 and trial.spread == "none" and not trial.complete
    # No batch after the first: the first (start-up included) bounds one from above.
    assert trial.per_batch_s == 2.0 and trial.epoch_estimate_s == 2.0 + 99 * 2.0


# ----------------------------------------------------------------- the honest choice


def test_noisy_candidates_within_noise_choose_the_fewest_workers(planted: Planted) -> None:
    planted.plans[0] = Plan(0.01, [0.029, 0.030, 0.031])
    planted.plans[1] = Plan(0.2, [0.009, 0.012, 0.015])
    planted.plans[2] = Plan(0.2, [0.008, 0.011, 0.014])  # lowest median, same noise as 1
    lines: list[str] = []
    got = choose([0, 1, 2], log=lines.append)
    assert planted.tried == [0, 1, 2]
    t0, t1, t2 = got.trials
    assert t2.epoch_estimate_s < t1.epoch_estimate_s < t0.epoch_estimate_s
    assert t1.epoch_low_s <= t2.epoch_high_s  # the intervals of 1 and 2 overlap
    assert got.fastest == 2 and got.within_noise == [1, 2] and got.chosen == 1
    assert got.reason.startswith("within noise") and "fewest (1)" in got.reason
    assert "-> 1" in lines[-1] and "within noise" in lines[-1]
    d = strict_json(got)
    assert d["within_noise"] == [1, 2] and "within noise" in d["reason"]


def test_a_clearly_faster_candidate_is_chosen(planted: Planted) -> None:
    planted.plans[0] = Plan(0.1, [0.029, 0.030, 0.031])
    planted.plans[1] = Plan(0.1, [0.019, 0.020, 0.021])
    planted.plans[2] = Plan(0.1, [0.009, 0.010, 0.011])
    got = choose([0, 1, 2])
    assert got.chosen == got.fastest == 2 and got.within_noise == [2]
    assert got.reason.startswith("fastest: 2 workers") and "within noise" not in got.reason
    assert "next best: 1 workers" in got.reason


def test_one_wild_batch_does_not_move_the_estimate(planted: Planted) -> None:
    steady, wild = 0.0078125, 1.0
    planted.plans[0] = Plan(0.25, [steady] * 20, epoch_batches=21)
    planted.plans[1] = Plan(0.25, [steady] * 7 + [wild] + [steady] * 12, epoch_batches=21)
    clean = measure(small_dataset(), auto_cfg(), CPU, 0, max_batches=50, time_limit_s=60)
    noisy = measure(small_dataset(), auto_cfg(), CPU, 1, max_batches=50, time_limit_s=60)
    assert clean.n == noisy.n == 20 and noisy.outliers == 1 and clean.outliers == 0
    assert noisy.per_batch_s == clean.per_batch_s == steady
    assert noisy.epoch_estimate_s == clean.epoch_estimate_s == 0.25 + 20 * steady
    # A mean per batch, extrapolated, would have more than tripled the estimate.
    mean_based = 0.25 + 20 * (noisy.measured_s / noisy.n)
    assert mean_based > 3 * noisy.epoch_estimate_s
    assert "1 outlier" in noisy.describe()


def test_a_trial_cut_short_by_the_budget_is_not_chosen(planted: Planted) -> None:
    # 0 workers: complete. 4 workers: its start-up eats its share of the budget, it times
    # 8 batches (fewer than the minimum) and looks three times faster on them.
    planted.plans[0] = Plan(0.0625, [0.03125], epoch_batches=1000)
    planted.plans[4] = Plan(2.3125, [0.0078125], epoch_batches=1000)
    lines: list[str] = []
    got = choose([0, 4], budget_s=4.0, log=lines.append)
    full, short = got.trials
    assert full.complete and full.n == 50
    assert not short.complete and short.n == 8
    assert short.epoch_estimate_s < full.epoch_estimate_s / 3
    assert got.chosen == 0 and got.fastest == 0
    assert "4 workers cut short by the budget" in got.reason
    assert "cut short: 8 of 10 batches" in lines[1]
    assert "4: " in lines[-1] and "cut short" in lines[-1]


def test_when_every_trial_is_short_the_choice_says_so(planted: Planted) -> None:
    planted.plans[0] = Plan(0.5, [0.125])
    planted.plans[1] = Plan(0.5, [0.0625])
    got = choose([0, 1], budget_s=2.0)
    assert not any(t.complete for t in got.trials)
    assert got.reason.startswith("no candidate timed its minimum of batches")
    assert got.chosen in (0, 1)


def test_search_stops_at_a_clearly_slower_candidate(planted: Planted) -> None:
    planted.plans[0] = Plan(0.1, [0.009, 0.010, 0.011])
    planted.plans[1] = Plan(0.1, [0.019, 0.020, 0.021])  # whole interval > 1.5x the best's
    planted.plans[2] = Plan(0.1, [0.001])
    got = choose([0, 1, 2])
    assert planted.tried == [0, 1] and got.chosen == 0


def test_search_goes_on_past_a_slower_but_overlapping_candidate(planted: Planted) -> None:
    planted.plans[0] = Plan(0.1, [0.005, 0.010, 0.015])
    planted.plans[1] = Plan(0.1, [0.010, 0.016, 0.022])  # median 1.6x, but within noise
    planted.plans[2] = Plan(0.1, [0.001])
    got = choose([0, 1, 2])
    assert planted.tried == [0, 1, 2] and got.chosen == 2


def test_decide_prefers_a_complete_trial_and_breaks_ties_by_fewer_workers() -> None:
    a = summarise(0, 0.1, [0.02] * 12, 100)
    b = summarise(2, 0.1, [0.02] * 12, 100)  # same estimate
    assert decide([b, a]).chosen == 0
    short = summarise(8, 0.1, [0.001] * 3, 100)
    assert not short.complete and decide([a, short]).chosen == 0
    with pytest.raises(ValueError):
        decide([])


def test_a_one_batch_epoch_is_complete_with_nothing_to_extrapolate() -> None:
    t = summarise(0, 0.3, [], 1)
    assert t.complete and t.n == 0 and t.min_batches == 0 and t.epoch_estimate_s == 0.3


def test_to_dict_is_strict_json(planted: Planted) -> None:
    planted.plans[0] = Plan(0.0625, [0.03125], epoch_batches=1000)
    planted.plans[1] = Plan(4.0, [0.0078125], epoch_batches=1000)  # no batch after start-up
    got = choose([0, 1], budget_s=2.0)
    assert got.trials[1].n == 0
    d = strict_json(got)
    assert set(d) == RESULT_KEYS
    assert d["chosen"] == 0 and d["fastest"] == 0 and d["within_noise"] == [0]
    assert isinstance(d["reason"], str) and d["reason"]
    assert set(d["trials"][0]) == {f for f in asdict(got.trials[0])}
    assert d["trials"][1]["complete"] is False and d["trials"][1]["spread"] == "none"


def test_auto_workers_to_dict_and_describe() -> None:
    trial = summarise(0, 0.1, [0.01] * 10, 5)
    result = AutoWorkers.from_trials([trial], seconds=1.5, key="k")
    d = strict_json(result)
    assert set(d) == RESULT_KEYS and d["cached"] is False and d["key"] == "k"
    assert d["chosen"] == 0 and d["reason"] == "0 workers is the only candidate"
    assert d["trials"][0]["n"] == 10 and d["trials"][0]["spread"] == "IQR"
    assert d["trials"][0]["epoch_estimate_s"] == pytest.approx(0.14)
    assert result.describe().startswith("num_workers auto -> 0 (measured in 1.5 s")
    assert "n=10" in result.describe()


# ------------------------------------------------------------ choose_num_workers, cache


def test_choice_is_measured_then_cached(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ds, cfg = small_dataset(), auto_cfg()
    first = choose_num_workers(
        ds, cfg, CPU, workload="tiny", cache_dir=tmp_path / "cache", candidates=[0, 1]
    )
    assert first.cached is False and first.chosen in (0, 1)
    assert [t.num_workers for t in first.trials][0] == 0 and 1 <= len(first.trials) <= 2
    assert first.chosen == decide(first.trials).chosen
    assert first.seconds > 0 and first.key == cache_key(ds, cfg, CPU, "tiny")
    assert set(strict_json(first)) == RESULT_KEYS

    path = tmp_path / "cache" / CACHE_FILE
    data = json.loads(path.read_text())
    assert data["version"] == CACHE_VERSION
    entry = data["entries"][first.key]
    assert entry["chosen"] == first.chosen and entry["workload"] == "tiny"
    assert len(entry["trials"]) == len(first.trials)

    # Second call: the cached answer, no measurement at all.
    monkeypatch.setattr(autotune, "measure", refuse_to_measure)
    second = choose_num_workers(
        ds, cfg, CPU, workload="tiny", cache_dir=tmp_path / "cache", candidates=[0, 1]
    )
    assert second.cached is True and second.chosen == first.chosen
    assert second.key == first.key and second.seconds == 0.0
    assert second.to_dict()["trials"] == first.to_dict()["trials"]
    assert second.reason == first.reason and second.within_noise == first.within_noise
    assert "cached choice" in second.describe()


def test_cache_key_depends_on_what_changes_the_answer() -> None:
    ds = small_dataset()
    key = cache_key(ds, auto_cfg(8), CPU, "tiny")
    assert key == cache_key(ds, auto_cfg(8), CPU, "tiny")  # stable
    assert len(key) == 16
    assert cache_key(ds, auto_cfg(16), CPU, "tiny") != key  # batch size
    assert cache_key(ds, auto_cfg(8), CPU, "other") != key  # workload
    assert cache_key(small_dataset(32), auto_cfg(8), CPU, "tiny") != key  # samples
    pinned = DataConfig(batch_size=8, num_workers="auto", pin_memory=True)
    assert cache_key(ds, pinned, CPU, "tiny") != key


def test_a_different_batch_size_is_measured_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeMeasure({0: 0.02, 1: 0.01})
    monkeypatch.setattr(autotune, "measure", fake)
    ds = small_dataset()
    a = choose_num_workers(
        ds, auto_cfg(8), CPU, workload="w", cache_dir=tmp_path, candidates=[0, 1]
    )
    b = choose_num_workers(
        ds, auto_cfg(16), CPU, workload="w", cache_dir=tmp_path, candidates=[0, 1]
    )
    assert a.key != b.key and not a.cached and not b.cached
    assert fake.tried == [0, 1, 0, 1]
    entries = json.loads((tmp_path / CACHE_FILE).read_text())["entries"]
    assert set(entries) == {a.key, b.key}  # the second entry did not replace the first
    # Both are now cached.
    monkeypatch.setattr(autotune, "measure", refuse_to_measure)
    for bs, want in ((8, a), (16, b)):
        hit = choose_num_workers(
            ds, auto_cfg(bs), CPU, workload="w", cache_dir=tmp_path, candidates=[0, 1]
        )
        assert hit.cached and hit.key == want.key and hit.chosen == want.chosen


@pytest.mark.parametrize(
    "content",
    [
        "{not json",
        "",
        "[1, 2, 3]",
        '"a string"',
        json.dumps({"version": CACHE_VERSION + 1, "entries": {}}),
        json.dumps({"version": CACHE_VERSION - 1, "entries": {}}),
        json.dumps({"version": CACHE_VERSION, "entries": None}),
        json.dumps({"version": CACHE_VERSION, "entries": [1, 2]}),
    ],
    ids=[
        "bad-json",
        "empty",
        "list",
        "string",
        "other-version",
        "previous-version",
        "null-entries",
        "list-entries",
    ],
)
def test_a_corrupt_cache_is_ignored_and_replaced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, content: str
) -> None:
    (tmp_path / CACHE_FILE).write_text(content)
    fake = FakeMeasure({0: 0.01, 1: 0.03})
    monkeypatch.setattr(autotune, "measure", fake)
    ds, cfg = small_dataset(), auto_cfg()
    got = choose_num_workers(ds, cfg, CPU, workload="w", cache_dir=tmp_path, candidates=[0, 1])
    assert got.cached is False and got.chosen == 0 and fake.tried == [0, 1]
    data = json.loads((tmp_path / CACHE_FILE).read_text())  # rewritten, valid again
    assert data["version"] == CACHE_VERSION and data["entries"][got.key]["chosen"] == 0


def test_a_version_1_entry_is_not_trusted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ds, cfg = small_dataset(), auto_cfg()
    old = {"num_workers": 1, "startup_s": 0.1, "per_batch_s": 0.01, "batches": 4}
    entry = {"chosen": 1, "trials": [{**old, "epoch_estimate_s": 114.0}]}
    assert "fields of a measurement" in (entry_problem(entry) or "")
    (tmp_path / CACHE_FILE).write_text(
        json.dumps({"version": 1, "entries": {cache_key(ds, cfg, CPU, "w"): entry}})
    )
    fake = FakeMeasure({0: 0.01, 1: 0.03})
    monkeypatch.setattr(autotune, "measure", fake)
    got = choose_num_workers(ds, cfg, CPU, workload="w", cache_dir=tmp_path, candidates=[0, 1])
    assert not got.cached and got.chosen == 0


def test_no_cache_dir_means_no_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(autotune, "measure", FakeMeasure({0: 0.01, 1: 0.005}))
    got = choose_num_workers(
        small_dataset(), auto_cfg(), CPU, workload="w", cache_dir=None, candidates=[0, 1]
    )
    assert got.chosen == 1 and not got.cached
    assert list(tmp_path.iterdir()) == []


def test_an_unwritable_cache_is_not_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    monkeypatch.setattr(autotune, "measure", FakeMeasure({0: 0.01, 1: 0.005}))
    got = choose_num_workers(
        small_dataset(), auto_cfg(), CPU, workload="w", cache_dir=blocker / "sub", candidates=[0, 1]
    )
    assert got.chosen == 1
    assert blocker.read_text() == "not a folder"


def test_log_names_the_tried_counts_and_the_choice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(autotune, "measure", FakeMeasure({0: 0.02, 1: 0.015, 2: 0.01}))
    lines: list[str] = []
    got = choose_num_workers(
        small_dataset(),
        auto_cfg(),
        CPU,
        workload="w",
        cache_dir=tmp_path,
        candidates=[0, 1, 2],
        log=lines.append,
    )
    assert got.chosen == 2
    assert len(lines) == 4  # one per candidate, then the choice
    for n, line in zip((0, 1, 2), lines):
        assert f"{n} workers" in line and "n=12" in line
    assert "-> 2" in lines[-1] and "measured" in lines[-1] and "fastest" in lines[-1]
    for n in (0, 1, 2):
        assert f"{n}: " in lines[-1]  # the summary line names every tried count

    # A cached answer is logged too, as one line.
    lines.clear()
    choose_num_workers(
        small_dataset(),
        auto_cfg(),
        CPU,
        workload="w",
        cache_dir=tmp_path,
        candidates=[0, 1, 2],
        log=lines.append,
    )
    assert len(lines) == 1 and "-> 2" in lines[0] and "cached" in lines[0]


def test_zero_budget_tries_only_the_first_candidate(monkeypatch: pytest.MonkeyPatch) -> None:
    # Estimates improve with workers, so only the budget can stop the search early.
    fake = FakeMeasure({0: 0.04, 1: 0.02, 2: 0.01, 4: 0.005})
    monkeypatch.setattr(autotune, "measure", fake)
    got = choose([0, 1, 2, 4], budget_s=0)
    assert fake.tried == [0] and got.chosen == 0 and len(got.trials) == 1
    assert fake.calls[0][1] > 0  # even then, the one trial gets some time to run


def test_ample_budget_tries_every_improving_candidate(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeMeasure({0: 0.04, 1: 0.02, 2: 0.01, 4: 0.005})
    monkeypatch.setattr(autotune, "measure", fake)
    got = choose([0, 1, 2, 4], budget_s=60)
    assert fake.tried == [0, 1, 2, 4] and got.chosen == 4
    # The budget is shared out: no single trial may take all of it.
    assert all(limit <= 60 / 4 + 1e-6 for _, limit in fake.calls[:1])
    assert all(0 < limit <= 60 for _, limit in fake.calls)


def test_default_candidates_are_used_without_a_list(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(autotune, "default_candidates", lambda: [0, 3])
    fake = FakeMeasure({0: 0.01, 3: 0.009})
    monkeypatch.setattr(autotune, "measure", fake)
    got = choose_num_workers(small_dataset(), auto_cfg(), CPU, workload="w", cache_dir=None)
    assert fake.tried == [0, 3] and got.chosen == 3


@pytest.mark.parametrize(
    "entry",
    [{"chosen": "many"}, {"chosen": 1, "trials": [{"bogus": 1}]}, "not a mapping"],
    ids=["chosen-word", "bad-trials", "entry-string"],
)
def test_a_damaged_entry_is_measured_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, entry: object
) -> None:
    ds, cfg = small_dataset(), auto_cfg()
    key = cache_key(ds, cfg, CPU, "w")
    (tmp_path / CACHE_FILE).write_text(
        json.dumps({"version": CACHE_VERSION, "entries": {key: entry}})
    )
    fake = FakeMeasure({0: 0.01, 1: 0.03})
    monkeypatch.setattr(autotune, "measure", fake)
    got = choose_num_workers(ds, cfg, CPU, workload="w", cache_dir=tmp_path, candidates=[0, 1])
    assert got.cached is False and got.chosen == 0


def test_choosing_leaves_the_global_rng_alone(tmp_path: Path) -> None:
    from trainscope.data.augment import RandomAffine
    from trainscope.workloads.builtin import ImageSet

    ds = ImageSet(torch.rand(32, 1, 8, 8), torch.arange(32), RandomAffine())
    torch.manual_seed(0)
    before = torch.get_rng_state()
    choose_num_workers(ds, auto_cfg(), CPU, workload="w", cache_dir=tmp_path, candidates=[0])
    assert torch.equal(torch.get_rng_state(), before)


def _trial(n: int, per_batch: float = 0.01) -> dict[str, Any]:
    return asdict(summarise(n, 0.1, [per_batch] * 12, 100))


@pytest.mark.parametrize(
    ("entry", "why"),
    [
        ({"chosen": 100_000, "trials": [_trial(0), _trial(100_000)]}, "not a worker count"),
        ({"chosen": 4, "trials": [_trial(0), _trial(1)]}, "not among the worker counts"),
        ({"chosen": 1, "trials": []}, "not a list of measurements"),
        ({"chosen": 1}, "not a list of measurements"),
        ({"chosen": True, "trials": [_trial(1)]}, "not a worker count"),
        (
            {"chosen": 1, "trials": [{**_trial(1), "epoch_estimate_s": float("nan")}]},
            "not a finite number",
        ),
        ({"chosen": 1, "trials": [{**_trial(1), "n": "3"}]}, "not a count"),
        ({"chosen": 1, "trials": [{**_trial(1), "extra": 1}]}, "fields of a measurement"),
        ({"chosen": 1, "trials": [{**_trial(1), "complete": "yes"}]}, "completeness"),
        ({"chosen": 1, "trials": [{**_trial(1), "spread": "wide"}]}, "spread kind"),
        (
            {"chosen": 1, "trials": [{**_trial(1), "per_batch_low_s": 1.0}]},
            "low <= median <= high",
        ),
        (
            {"chosen": 0, "trials": [_trial(0, 0.02), _trial(1, 0.01)]},
            "not what its measurements give (1)",
        ),
    ],
    ids=[
        "huge",
        "not-tried",
        "no-trials",
        "trials-missing",
        "bool",
        "nan",
        "str",
        "extra",
        "complete-str",
        "spread-kind",
        "unordered",
        "not-the-decision",
    ],
)
def test_a_tampered_entry_is_measured_again_with_a_note(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, entry: dict, why: str
) -> None:
    ds, cfg = small_dataset(), auto_cfg()
    key = cache_key(ds, cfg, CPU, "w")
    path = tmp_path / CACHE_FILE
    path.write_text(json.dumps({"version": CACHE_VERSION, "entries": {key: entry}}))
    fake = FakeMeasure({0: 0.01, 1: 0.03})
    monkeypatch.setattr(autotune, "measure", fake)
    notes: list[str] = []
    got = choose_num_workers(
        ds, cfg, CPU, workload="w", cache_dir=tmp_path, candidates=[0, 1], log=notes.append
    )
    assert got.cached is False and got.chosen == 0 and fake.tried == [0, 1]
    assert f"ignoring the cached choice in {path}" in notes[0] and why in notes[0]
    assert json.loads(path.read_text())["entries"][key]["chosen"] == 0  # replaced


def test_a_valid_entry_is_still_trusted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    entry = {"chosen": 1, "trials": [_trial(0, 0.02), _trial(1, 0.01)], "workload": "w"}
    assert entry_problem(entry) is None
    ds, cfg = small_dataset(), auto_cfg()
    (tmp_path / CACHE_FILE).write_text(
        json.dumps({"version": CACHE_VERSION, "entries": {cache_key(ds, cfg, CPU, "w"): entry}})
    )
    monkeypatch.setattr(autotune, "measure", refuse_to_measure)
    got = choose_num_workers(ds, cfg, CPU, workload="w", cache_dir=tmp_path, candidates=[0, 1])
    assert got.cached is True and got.chosen == 1 and got.reason.startswith("fastest: 1")


def test_an_oversized_cache_file_is_not_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ds, cfg = small_dataset(), auto_cfg()
    entry = {"chosen": 1, "trials": [_trial(1)], "pad": "x" * (2 << 20)}
    (tmp_path / CACHE_FILE).write_text(
        json.dumps({"version": CACHE_VERSION, "entries": {cache_key(ds, cfg, CPU, "w"): entry}})
    )
    fake = FakeMeasure({0: 0.01, 1: 0.03})
    monkeypatch.setattr(autotune, "measure", fake)
    got = choose_num_workers(ds, cfg, CPU, workload="w", cache_dir=tmp_path, candidates=[0, 1])
    assert got.cached is False and fake.tried == [0, 1]
