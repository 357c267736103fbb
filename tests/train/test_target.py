"""The stop rule: evaluations every N steps (kept out of training, not changing it), a
target met at the first evaluation that meets it, a target never met (the time limit, the
end of training), a target on the test split, a resume that meets it at the same step."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tests.train.test_muon import killed_and_resumed
from trainscope.config import from_dict
from trainscope.errors import ConfigError
from trainscope.reports.tables import overview_table
from trainscope.train.console import RunConsole
from trainscope.train.run import run

pytestmark = pytest.mark.timeout(120)


def digits(tmp_path: Path, name: str, **train: object) -> dict:
    """A digits run (in this process) with ``train`` settings; its summary."""
    cfg = from_dict({
        "workload": {"name": "digits"}, "out": str(tmp_path / name),
        "train": {"epochs": 4, "save_weights": True, **train},
        "runtime": {"threads": 1, "progress": False},
    })  # fmt: skip
    return run(cfg, RunConsole(enabled=False))


def lines(run_dir: Path, event: str) -> list[dict]:
    text = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, text) if r["event"] == event]


def test_the_run_stops_at_the_first_evaluation_that_meets_the_target(tmp_path: Path) -> None:
    summary = digits(tmp_path, "hit", epochs=45, eval_every_steps=10,
                     target="val_accuracy>=0.6")  # fmt: skip
    t = summary["target"]
    assert summary["status"] == "completed" and t["reached"] is True
    assert t["stopped_by"] == "target" and t["step"] % 10 == 0
    assert summary["steps"] == t["step"]  # not one step more
    evals = lines(tmp_path / "hit", "eval")
    assert [e["step"] for e in evals] == list(range(10, t["step"] + 1, 10))
    assert all(e["accuracy"] < 0.6 for e in evals[:-1]) and evals[-1]["accuracy"] >= 0.6
    assert t["value"] == evals[-1]["accuracy"] == t["best"]["value"]
    # Training time: the epochs' durations, evaluations kept out; the run's clock is longer.
    # (The run's own adds the epoch's close: the last records read, the loader let go.)
    assert t["train_time_s"] <= summary["train_time_s"] <= t["train_time_s"] + 0.05
    assert 0 < t["train_time_s"] < t["run_time_s"]
    assert summary["stages_s"]["evaluation"] >= sum(e["seconds"] for e in evals)
    # Several runs in this test process: its process time is not this run's own.
    if summary["process"]["runs_before"]:
        assert t["process_time_s"] is None and "not this run's own" in t["process_time_note"]
    rows = {r[0]: r[1] for r in overview_table(summary).cells()}
    assert rows["Target"].startswith(f"val_accuracy>=0.6 met at step {t['step']}")
    assert summary["epochs"][-1]["val_accuracy"] == t["value"]  # the same evaluation, once


def test_evaluating_between_steps_does_not_change_the_training(tmp_path: Path) -> None:
    plain = digits(tmp_path, "plain", epochs=3)
    evaluated = digits(tmp_path, "evaluated", epochs=3, eval_every_steps=7)
    assert len(lines(tmp_path / "evaluated", "eval")) >= 3 * 40 // 7
    losses = [[r["loss"] for r in lines(tmp_path / name, "step")]
              for name in ("plain", "evaluated")]  # fmt: skip
    assert losses[0] == losses[1]
    a = load_file(str(tmp_path / "plain" / "model.safetensors"))
    b = load_file(str(tmp_path / "evaluated" / "model.safetensors"))
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert plain["test_accuracy"] == evaluated["test_accuracy"]
    assert evaluated["target"]["target"] is None and evaluated["target"]["reached"] is None


def test_a_target_not_met_within_the_time_limit_says_so(tmp_path: Path) -> None:
    summary = digits(tmp_path, "limit", epochs=45, eval_every_steps=5,
                     target="val_loss<=0.0001", time_limit_s=0.3)  # fmt: skip
    t = summary["target"]
    assert t["reached"] is False and t["stopped_by"] == "time_limit"
    assert t["step"] is None and t["train_time_s"] is None  # nothing extrapolated
    assert summary["train_time_s"] >= 0.3 and summary["steps"] < 45 * 40
    assert t["best"]["value"] > 0.0001 and t["best"]["step"] % 5 == 0
    assert any("not met within 0.3 s of training" in n for n in summary["notes"])
    rows = {r[0]: r[1] for r in overview_table(summary).cells()}
    assert rows["Target"].startswith("val_loss<=0.0001 not met within the time limit")


def test_a_target_not_met_by_the_end_of_training(tmp_path: Path) -> None:
    summary = digits(tmp_path, "end", epochs=1, target="val_accuracy>=1.01")
    t = summary["target"]
    assert t["reached"] is False and t["stopped_by"] is None and t["evaluations"] == 1
    assert summary["steps"] == 40  # the whole run: epoch-end validation only
    assert any("not met by the end of training" in n for n in summary["notes"])


def test_a_target_on_the_test_split(tmp_path: Path) -> None:
    summary = digits(tmp_path, "test", epochs=45, eval_every_steps=20,
                     target="test_accuracy>=0.5")  # fmt: skip
    t = summary["target"]
    assert t["reached"] is True and t["metric"] == "test_accuracy"
    tests = [e for e in lines(tmp_path / "test", "eval") if e["split"] == "test"]
    assert tests[-1]["step"] == t["step"] and tests[-1]["accuracy"] == t["value"]
    assert summary["test_accuracy"] == t["value"]  # the final test is that evaluation


def test_a_figure_the_evaluation_does_not_have_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"has no bleu \(it has val_loss, val_accuracy"):
        digits(tmp_path, "bad", epochs=1, eval_every_steps=10, target="val_bleu>=1")
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "input.txt").write_text("To be, or not to be: that is the question.\n" * 60)
    with pytest.raises(ConfigError, match="no test split"):
        run(from_dict({
            "workload": {"name": "gpt-char", "data_dir": str(corpus),
                         "options": {"preset": "tiny", "block_size": 16}},
            "train": {"target": "test_loss<=1", "epochs": 1}, "out": str(tmp_path / "lm"),
            "runtime": {"threads": 1, "progress": False},
        }), RunConsole(enabled=False))  # fmt: skip
    for bad in ("loss<=1", "val_loss=1", "val_loss<=nan", "train_loss<=1", "val_loss<=x"):
        with pytest.raises(ConfigError, match="--target"):
            from_dict({"train": {"target": bad}})
    with pytest.raises(ConfigError, match="data_only"):
        from_dict({"train": {"target": "val_loss<=1", "data_only": True}})


@pytest.mark.slow
def test_a_resumed_run_meets_the_target_at_the_same_step(tmp_path: Path) -> None:
    args = ["--epochs", "45", "--eval-every-steps", "10", "--target", "val_accuracy>=0.8",
            "--checkpoint-every", "10", "--threads", "1", "-q", "--no-progress"]  # fmt: skip
    ref, cut = killed_and_resumed(args, tmp_path, "step=95,stage=forward")
    a, b = (json.loads((d / "summary.json").read_text())["target"] for d in (ref, cut))
    assert a["reached"] and b["reached"] and a["step"] == b["step"] and a["value"] == b["value"]
    assert a["step"] > 95 and a["evaluations"] == b["evaluations"] == a["step"] // 10
    assert a["process_time_s"] > a["run_time_s"] > a["train_time_s"] > 0
    assert b["process_time_s"] is None  # a resumed run's process is not the whole run's


def test_a_workload_without_a_validation_split_evaluates_the_test_split(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "noval_workload.py").write_text(
        "from trainscope.workloads.builtin import digits\n"
        "def factory(cfg):\n"
        "    wl = digits(cfg, None)\n"
        "    wl.val_set = None\n"
        "    return wl\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    cfg = from_dict({
        "workload": {"name": "noval_workload:factory"}, "out": str(tmp_path / "nv"),
        "train": {"epochs": 45, "eval_every_steps": 20, "target": "test_accuracy>=0.5"},
        "runtime": {"threads": 1, "progress": False},
    })  # fmt: skip
    summary = run(cfg, RunConsole(enabled=False))
    assert summary["target"]["reached"] is True
    assert {e["split"] for e in lines(tmp_path / "nv", "eval")} == {"test"}
    with pytest.raises(ConfigError, match="no validation split"):
        digits_cfg = {"train": {"target": "val_loss<=1", "epochs": 1}}
        run(from_dict({**digits_cfg, "workload": {"name": "noval_workload:factory"},
                       "out": str(tmp_path / "nv2")}), RunConsole(enabled=False))  # fmt: skip
