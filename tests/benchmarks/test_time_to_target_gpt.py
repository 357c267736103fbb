"""benchmarks/time_to_target_gpt.py: its summary (planted times, with and without the
evaluations before the one that met the target), the evaluation spans it times in
nanoGPT's process, and the earlier evaluations it reads from a trainscope run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.benchmarks.scripts import load_benchmark

pytestmark = pytest.mark.timeout(30)


ttt = load_benchmark("time_to_target_gpt")


def run(side: str, seed: int, t: float | None, one: float | None = None) -> dict:
    return {"side": side, "seed": seed, "reached": t is not None, "time_to_target_s": t,
            "one_eval_time_to_target_s": one}  # fmt: skip


def test_the_summary_claims_a_ratio_only_where_the_ranges_do_not_overlap() -> None:
    runs = [run("nanogpt", 0, 120.0, 100.0), run("trainscope", 0, 50.0, 50.0),
            run("nanogpt", 1, 130.0, 104.0), run("trainscope", 1, 60.0, 60.0),
            run("nanogpt", 2, None), run("trainscope", 2, 55.0, 55.0)]  # fmt: skip
    s = ttt.summarize(runs)
    assert s["nanogpt"] == {"n": 2, "runs": 3, "never_reached": [2], "median_s": 125.0,
                            "min_s": 120.0, "max_s": 130.0}  # fmt: skip
    assert s["trainscope"]["median_s"] == 55.0 and s["trainscope"]["n"] == 3
    assert s["ratio_nanogpt_over_trainscope"] == pytest.approx(125.0 / 55.0)
    one = ttt.summarize(runs, "one_eval_time_to_target_s")
    assert one["nanogpt"]["median_s"] == 102.0
    assert one["ratio_nanogpt_over_trainscope"] == pytest.approx(102.0 / 55.0)
    overlapping = [run("nanogpt", 0, 60.0), run("trainscope", 0, 59.0), run("trainscope", 1, 61.0)]
    assert ttt.summarize(overlapping)["ratio_nanogpt_over_trainscope"] is None


def test_evaluation_spans_are_timed_between_eval_and_train_and_torch_is_restored() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Sequential(torch.nn.ReLU()))
    spans = ttt.EvalSpans()
    real = (torch.nn.Module.eval, torch.nn.Module.train)
    spans.install()
    try:
        for _ in range(3):  # as estimate_loss(): eval(), the batches, train()
            model.eval()
            assert not any(m.training for m in model.modules())
            model.train()
            assert all(m.training for m in model.modules())
        spans.add_to_last(5.0)  # a checkpoint written after the third evaluation
    finally:
        spans.restore()
    assert (torch.nn.Module.eval, torch.nn.Module.train) == real
    assert len(spans.spans) == 3  # the children's train() calls add no span
    assert spans.spans[-1] >= 5.0 and spans.before_last() == sum(spans.spans[:2]) < 1.0


def test_a_trainscope_runs_earlier_evaluations_are_read_from_its_metrics(tmp_path: Path) -> None:
    lines = [{"event": "step", "step": 5},
             {"event": "eval", "split": "val", "step": 100, "seconds": 2.0},
             {"event": "eval", "split": "test", "step": 100, "seconds": 9.0},
             {"event": "eval", "split": "val", "step": 200, "seconds": 2.5},
             {"event": "eval", "split": "val", "step": 300, "seconds": 3.0}]  # fmt: skip
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    assert ttt._earlier_evals_s(tmp_path, 300) == 4.5
    assert ttt._earlier_evals_s(tmp_path, 100) == 0.0
