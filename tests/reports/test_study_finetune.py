"""The finetune study's report: a real tiny study of MiniLM-L6 on SST-2 (full vs LoRA,
skipped without ../shared/data), its numbers checked against the run records, and the
equal-training-time rule on hand-made records."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainscope.cli import main
from trainscope.render.table import fmt_int
from trainscope.reports.study_finetune import dev_accuracy_by


def test_dev_accuracy_at_a_training_time_is_the_last_evaluation_made_by_then() -> None:
    summary = {"epochs": [{"duration_s": 2.0, "val_accuracy": 0.6},
                          {"duration_s": 2.0, "val_accuracy": 0.7},
                          {"duration_s": 2.0, "val_accuracy": 0.65}]}  # fmt: skip
    assert dev_accuracy_by(summary, 1.9) is None  # no evaluation yet
    assert dev_accuracy_by(summary, 4.0) == 0.7  # the second epoch ends at exactly 4 s
    assert dev_accuracy_by(summary, 100.0) == 0.65
    assert dev_accuracy_by({"epochs": []}, 5.0) is None


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_full_against_lora_on_minilm_numbers_come_from_the_records(
    tmp_path: Path, shared_data: Path
) -> None:
    pytest.importorskip("peft")
    out = tmp_path / "study"
    # What the assertions need, no more: two repeats of each configuration, one optimizer
    # step each (the counts of parameters and optimizer states, one loss point per curve)
    # and one evaluation (the dev accuracy after the same steps). The workload reads 16
    # training and 8 dev sentences instead of all 67,349 + 872: encoding the whole train
    # split took most of the study's minutes, and no figure asserted here depends on it.
    argv = ["study", "finetune", "--pretrained", str(shared_data / "minilm-l6"), "--data-dir",
            str(shared_data / "sst2"), "--max-length", "8", "--epochs", "1",
            "--max-steps-per-epoch", "1", "--batch-size", "8", "--lora-ranks", "0,4",
            "--set", "workload.options.train_limit=16", "--set", "workload.options.eval_limit=8",
            "--repeats", "2", "--no-warmup", "--no-fresh-processes", "--out", str(out),
            "-q"]  # fmt: skip
    assert main(argv) == 0
    md = (out / "report" / "report.md").read_text()
    summaries = {
        name: [json.loads(p.read_text()) for p in sorted((out / "runs" / name).glob("r*/summ*"))]
        for name in ("full", "lora-r4")
    }
    assert all(len(s) == 2 for s in summaries.values())
    info = {k: v[0]["workload_info"] for k, v in summaries.items()}
    assert info["lora-r4"]["trainable_parameters"] < info["full"]["trainable_parameters"]
    for name, i in info.items():  # the table's trainable parameters are the records'
        assert f"| {name}" in md and fmt_int(i["trainable_parameters"]) in md
    finding = next(line for line in md.splitlines() if line.startswith("lora-r4 vs full:"))
    ratio = info["full"]["trainable_parameters"] / info["lora-r4"]["trainable_parameters"]
    assert f"trainable parameters {ratio:.0f}x fewer" in finding
    assert "optimizer states" in finding and "dev accuracy after the same steps" in finding
    assert (out / "report" / "plots" / "finetune_loss.png").is_file()
