"""Tests for ``--num-workers auto``: candidates, one measurement, the choice and its cache."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch.utils.data import TensorDataset

from trainscope.config import DataConfig
from trainscope.data import autotune
from trainscope.data.autotune import (
    CACHE_FILE,
    CACHE_VERSION,
    AutoWorkers,
    Trial,
    cache_key,
    choose_num_workers,
    default_candidates,
    measure,
)

pytestmark = pytest.mark.timeout(120)

CPU = torch.device("cpu")


def small_dataset(n: int = 64) -> TensorDataset:
    g = torch.Generator().manual_seed(0)
    return TensorDataset(torch.randn(n, 1, 8, 8, generator=g), torch.arange(n) % 10)


def auto_cfg(batch_size: int = 8) -> DataConfig:
    return DataConfig(batch_size=batch_size, num_workers="auto")


class FakeMeasure:
    """Stands in for :func:`measure`: a fixed epoch estimate per worker count, no loaders."""

    def __init__(self, estimates: dict[int, float]) -> None:
        self.estimates = estimates
        self.calls: list[tuple[int, float]] = []  # (num_workers, time limit)

    def __call__(self, dataset, cfg, device, num_workers, max_batches, time_limit_s) -> Trial:
        self.calls.append((num_workers, time_limit_s))
        est = self.estimates[num_workers]
        return Trial(num_workers, est / 10, est / 100, 3, est)

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


# ----------------------------------------------------------------------------- measure


def test_measure_returns_a_plausible_trial() -> None:
    trial = measure(small_dataset(), auto_cfg(), CPU, 0, max_batches=5, time_limit_s=10.0)
    assert isinstance(trial, Trial) and trial.num_workers == 0
    assert 1 <= trial.batches <= 5
    assert trial.startup_s >= 0 and trial.per_batch_s >= 0
    assert trial.epoch_estimate_s > 0
    # The estimate is start-up plus the rest of the epoch (8 batches of 8) at the timed rate.
    want = trial.startup_s + 7 * trial.per_batch_s
    assert trial.epoch_estimate_s == pytest.approx(want)


def test_measure_never_times_more_batches_than_an_epoch_has() -> None:
    trial = measure(small_dataset(20), auto_cfg(), CPU, 0, max_batches=50, time_limit_s=10.0)
    assert 1 <= trial.batches <= 3  # 20 samples in batches of 8


def test_measure_with_a_worker_process() -> None:
    trial = measure(small_dataset(), auto_cfg(), CPU, 1, max_batches=3, time_limit_s=10.0)
    assert trial.num_workers == 1 and trial.batches >= 1 and trial.epoch_estimate_s > 0


# ------------------------------------------------------------------ choose_num_workers


def test_choice_is_measured_then_cached(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ds, cfg = small_dataset(), auto_cfg()
    first = choose_num_workers(
        ds, cfg, CPU, workload="tiny", cache_dir=tmp_path / "cache", candidates=[0, 1]
    )
    assert first.cached is False and first.chosen in (0, 1)
    assert [t.num_workers for t in first.trials][0] == 0 and 1 <= len(first.trials) <= 2
    assert first.chosen in [t.num_workers for t in first.trials]
    best = min(first.trials, key=lambda t: t.epoch_estimate_s)
    assert first.chosen == best.num_workers
    assert first.seconds > 0 and first.key == cache_key(ds, cfg, CPU, "tiny")

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
    fake = FakeMeasure({0: 2.0, 1: 1.0})
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
        json.dumps({"version": CACHE_VERSION, "entries": None}),
        json.dumps({"version": CACHE_VERSION, "entries": [1, 2]}),
    ],
    ids=["bad-json", "empty", "list", "string", "other-version", "null-entries", "list-entries"],
)
def test_a_corrupt_cache_is_ignored_and_replaced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, content: str
) -> None:
    (tmp_path / CACHE_FILE).write_text(content)
    fake = FakeMeasure({0: 1.0, 1: 3.0})
    monkeypatch.setattr(autotune, "measure", fake)
    ds, cfg = small_dataset(), auto_cfg()
    got = choose_num_workers(ds, cfg, CPU, workload="w", cache_dir=tmp_path, candidates=[0, 1])
    assert got.cached is False and got.chosen == 0 and fake.tried == [0, 1]
    data = json.loads((tmp_path / CACHE_FILE).read_text())  # rewritten, valid again
    assert data["version"] == CACHE_VERSION and data["entries"][got.key]["chosen"] == 0


def test_no_cache_dir_means_no_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(autotune, "measure", FakeMeasure({0: 1.0, 1: 0.5}))
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
    monkeypatch.setattr(autotune, "measure", FakeMeasure({0: 1.0, 1: 0.5}))
    got = choose_num_workers(
        small_dataset(), auto_cfg(), CPU, workload="w", cache_dir=blocker / "sub", candidates=[0, 1]
    )
    assert got.chosen == 1
    assert blocker.read_text() == "not a folder"


def test_log_names_the_tried_counts_and_the_choice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(autotune, "measure", FakeMeasure({0: 2.0, 1: 1.5, 2: 1.0}))
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
        assert f"{n} workers" in line
    assert "-> 2" in lines[-1] and "measured" in lines[-1]
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
    fake = FakeMeasure({0: 4.0, 1: 2.0, 2: 1.0, 4: 0.5})
    monkeypatch.setattr(autotune, "measure", fake)
    got = choose_num_workers(
        small_dataset(),
        auto_cfg(),
        CPU,
        workload="w",
        cache_dir=None,
        candidates=[0, 1, 2, 4],
        budget_s=0,
    )
    assert fake.tried == [0] and got.chosen == 0 and len(got.trials) == 1
    assert fake.calls[0][1] > 0  # even then, the one trial gets some time to run


def test_ample_budget_tries_every_improving_candidate(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeMeasure({0: 4.0, 1: 2.0, 2: 1.0, 4: 0.5})
    monkeypatch.setattr(autotune, "measure", fake)
    got = choose_num_workers(
        small_dataset(),
        auto_cfg(),
        CPU,
        workload="w",
        cache_dir=None,
        candidates=[0, 1, 2, 4],
        budget_s=60,
    )
    assert fake.tried == [0, 1, 2, 4] and got.chosen == 4
    # The budget is shared out: no single trial may take all of it.
    assert all(limit <= 60 / 4 + 1e-6 for _, limit in fake.calls[:1])
    assert all(0 < limit <= 60 for _, limit in fake.calls)


def test_search_stops_at_a_clearly_slower_candidate(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeMeasure({0: 1.0, 1: 2.0, 2: 0.1})
    monkeypatch.setattr(autotune, "measure", fake)
    got = choose_num_workers(
        small_dataset(), auto_cfg(), CPU, workload="w", cache_dir=None, candidates=[0, 1, 2]
    )
    assert fake.tried == [0, 1] and got.chosen == 0


def test_default_candidates_are_used_without_a_list(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(autotune, "default_candidates", lambda: [0, 3])
    fake = FakeMeasure({0: 1.0, 3: 0.9})
    monkeypatch.setattr(autotune, "measure", fake)
    got = choose_num_workers(small_dataset(), auto_cfg(), CPU, workload="w", cache_dir=None)
    assert fake.tried == [0, 3] and got.chosen == 3


def test_auto_workers_to_dict_is_json() -> None:
    result = AutoWorkers(chosen=1, trials=[Trial(0, 0.1, 0.01, 5, 0.5)], seconds=1.5, key="k")
    d = json.loads(json.dumps(result.to_dict()))
    assert d["chosen"] == 1 and d["cached"] is False and d["key"] == "k"
    assert d["trials"][0] == {
        "num_workers": 0,
        "startup_s": 0.1,
        "per_batch_s": 0.01,
        "batches": 5,
        "epoch_estimate_s": 0.5,
    }
    assert result.describe().startswith("num_workers auto -> 1 (measured in 1.5 s")


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
    fake = FakeMeasure({0: 1.0, 1: 3.0})
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


def _trial(n: int, est: float = 1.0) -> dict[str, object]:
    return {
        "num_workers": n,
        "startup_s": 0.1,
        "per_batch_s": 0.01,
        "batches": 3,
        "epoch_estimate_s": est,
    }


@pytest.mark.parametrize(
    ("entry", "why"),
    [
        ({"chosen": 100_000, "trials": [_trial(0), _trial(100_000)]}, "not a worker count"),
        ({"chosen": 4, "trials": [_trial(0), _trial(1)]}, "not among the worker counts"),
        ({"chosen": 1, "trials": []}, "not a list of measurements"),
        ({"chosen": 1}, "not a list of measurements"),
        ({"chosen": True, "trials": [_trial(1)]}, "not a worker count"),
        ({"chosen": 1, "trials": [_trial(1, float("nan"))]}, "not a finite number"),
        ({"chosen": 1, "trials": [{**_trial(1), "batches": "3"}]}, "not a count"),
        ({"chosen": 1, "trials": [{**_trial(1), "extra": 1}]}, "fields of a measurement"),
    ],
    ids=["huge", "not-tried", "no-trials", "trials-missing", "bool", "nan", "str", "extra"],
)
def test_a_tampered_entry_is_measured_again_with_a_note(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, entry: dict, why: str
) -> None:
    ds, cfg = small_dataset(), auto_cfg()
    key = cache_key(ds, cfg, CPU, "w")
    path = tmp_path / CACHE_FILE
    path.write_text(json.dumps({"version": CACHE_VERSION, "entries": {key: entry}}))
    fake = FakeMeasure({0: 1.0, 1: 3.0})
    monkeypatch.setattr(autotune, "measure", fake)
    notes: list[str] = []
    got = choose_num_workers(
        ds, cfg, CPU, workload="w", cache_dir=tmp_path, candidates=[0, 1], log=notes.append
    )
    assert got.cached is False and got.chosen == 0 and fake.tried == [0, 1]
    assert f"ignoring the cached choice in {path}" in notes[0] and why in notes[0]
    assert json.loads(path.read_text())["entries"][key]["chosen"] == 0  # replaced


def test_a_valid_entry_is_still_trusted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from trainscope.data.autotune import entry_problem

    entry = {"chosen": 1, "trials": [_trial(0, 2.0), _trial(1, 1.0)], "workload": "w"}
    assert entry_problem(entry) is None
    ds, cfg = small_dataset(), auto_cfg()
    (tmp_path / CACHE_FILE).write_text(
        json.dumps({"version": CACHE_VERSION, "entries": {cache_key(ds, cfg, CPU, "w"): entry}})
    )
    monkeypatch.setattr(autotune, "measure", refuse_to_measure)
    got = choose_num_workers(ds, cfg, CPU, workload="w", cache_dir=tmp_path, candidates=[0, 1])
    assert got.cached is True and got.chosen == 1


def test_an_oversized_cache_file_is_not_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ds, cfg = small_dataset(), auto_cfg()
    entry = {"chosen": 1, "trials": [_trial(1)], "pad": "x" * (2 << 20)}
    (tmp_path / CACHE_FILE).write_text(
        json.dumps({"version": CACHE_VERSION, "entries": {cache_key(ds, cfg, CPU, "w"): entry}})
    )
    fake = FakeMeasure({0: 1.0, 1: 3.0})
    monkeypatch.setattr(autotune, "measure", fake)
    got = choose_num_workers(ds, cfg, CPU, workload="w", cache_dir=tmp_path, candidates=[0, 1])
    assert got.cached is False and fake.tried == [0, 1]
