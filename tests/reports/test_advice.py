"""What to optimise first: pure-function tests of the biggest-stage and threshold rules."""

from __future__ import annotations

import pytest

from trainscope.records.run_dir import STAGE_LABELS
from trainscope.reports.advice import DATA_WAIT_STEP_SHARE, EVALUATION_WALL_SHARE, Finding, findings

pytestmark = pytest.mark.timeout(60)

CTX = {"device": "cpu", "loader": "torch", "num_workers": 0, "eval_every": 1, "log_every": 10}

# Compute-bound: forward is biggest; every secondary rule stays below its threshold.
COMPUTE_BOUND = {
    "setup": 0.4,
    "data_wait": 1.0,
    "h2d": 0.1,
    "forward": 5.0,
    "backward": 2.0,
    "optimizer": 0.5,
    "evaluation": 0.5,
    "other": 0.5,
}  # wall 10.0


def stages_of(out: list[Finding]) -> list[str]:
    return [f.stage for f in out]


def test_biggest_stage_is_named_first_with_its_share() -> None:
    out = findings(COMPUTE_BOUND, 10.0, CTX)
    assert stages_of(out) == ["forward"]
    first = out[0]
    assert first.share == pytest.approx(0.5)
    assert first.of == "wall"
    assert first.text.startswith("Biggest stage: forward is 50.0% of the wall time: ")
    # On a CPU the compute suggestion points at batch size / threads / a GPU.
    assert "a larger batch" in first.text and "a GPU" in first.text


def test_compute_suggestion_on_cuda_names_mixed_precision() -> None:
    out = findings({"backward": 6.0, "forward": 2.0}, 10.0, {**CTX, "device": "cuda:0"})
    assert out[0].stage == "backward"
    assert out[0].text.startswith(f"Biggest stage: {STAGE_LABELS['backward']} is 60.0% of")
    assert "mixed precision (bf16, or fp16 with GradScaler" in out[0].text


def test_data_wait_above_30_percent_of_step_fires_when_not_biggest() -> None:
    stages = {"data_wait": 4.0, "forward": 5.0, "backward": 2.0, "optimizer": 1.0}
    out = findings(stages, 15.0, CTX)
    assert stages_of(out) == ["forward", "data_wait"]
    dw = out[1]
    assert dw.of == "step" and dw.share == pytest.approx(4.0 / 12.0)
    assert dw.share > DATA_WAIT_STEP_SHARE
    assert dw.text.startswith("Above 30.0%: data wait is 33.3% of the training step: ")
    assert "Raise num_workers (now 0;" in dw.text
    assert "`trainscope study loader`" in dw.text
    assert "--loader fast" in dw.text


def test_data_wait_at_exactly_the_threshold_does_not_fire() -> None:
    stages = {"data_wait": 3.0, "forward": 5.0, "backward": 1.0, "optimizer": 1.0}  # 30.0%
    assert stages_of(findings(stages, 12.0, CTX)) == ["forward"]


def test_data_wait_share_is_of_the_step_not_the_wall_time() -> None:
    # 4 s of 12 s of step, but only 4% of a 100 s wall: still a finding.
    stages = {"data_wait": 4.0, "forward": 5.0, "backward": 2.0, "optimizer": 1.0, "setup": 20.0}
    out = findings(stages, 100.0, CTX)
    assert "data_wait" in stages_of(out)


def test_data_wait_as_the_biggest_stage_is_not_repeated() -> None:
    stages = {"data_wait": 6.0, "forward": 2.0, "backward": 1.0}
    out = findings(stages, 10.0, CTX)
    assert stages_of(out) == ["data_wait"]
    assert out[0].text.startswith("Biggest stage: data wait is 60.0% of the wall time: ")
    assert "Raise num_workers (now 0;" in out[0].text


def test_loader_fast_context_changes_the_data_wait_text() -> None:
    stages = {"data_wait": 4.0, "forward": 5.0, "backward": 2.0, "optimizer": 1.0}
    torch_text = findings(stages, 15.0, CTX)[1].text
    fast_text = findings(stages, 15.0, {**CTX, "loader": "fast"})[1].text
    assert fast_text != torch_text
    assert "already sit on the device (--loader fast)" in fast_text
    assert "lighter augmentation or larger batches" in fast_text
    assert "num_workers" not in fast_text


def test_num_workers_unknown_shows_a_question_mark() -> None:
    out = findings({"data_wait": 6.0, "forward": 2.0}, 10.0, {})
    assert "Raise num_workers (now ?;" in out[0].text


def test_evaluation_above_30_percent_of_wall_suggests_eval_every() -> None:
    stages = {"evaluation": 3.0, "forward": 4.0, "backward": 1.0, "optimizer": 0.5}
    out = findings(stages, 9.0, {**CTX, "eval_every": 2})
    assert stages_of(out) == ["forward", "evaluation"]
    ev = out[1]
    assert ev.of == "wall" and ev.share == pytest.approx(1 / 3)
    assert ev.share > EVALUATION_WALL_SHARE
    assert ev.text.startswith(
        f"Above 30.0%: {STAGE_LABELS['evaluation']} is 33.3% of the wall time: "
    )
    assert "--eval-every, now 2" in ev.text


def test_evaluation_as_the_biggest_stage_suggests_eval_every_once() -> None:
    out = findings({"evaluation": 5.0, "forward": 3.0}, 10.0, CTX)
    assert stages_of(out) == ["evaluation"]
    assert "--eval-every, now 1" in out[0].text


def test_setup_dominance_suggests_a_longer_run() -> None:
    stages = {"setup": 6.0, "forward": 2.0, "backward": 1.0, "data_wait": 0.2, "other": 0.1}
    out = findings(stages, 10.0, CTX)
    assert out[0].stage == "setup"
    assert out[0].text.startswith(f"Biggest stage: {STAGE_LABELS['setup']} is 60.0% of the wall")
    assert "Profile a longer run (more --epochs)" in out[0].text


def test_setup_above_threshold_when_not_biggest() -> None:
    out = findings({"forward": 5.0, "setup": 3.5, "backward": 1.0}, 10.0, CTX)
    assert stages_of(out) == ["forward", "setup"]
    assert out[1].text.startswith("Above 30.0%: ")
    assert "longer run" in out[1].text


def test_other_and_h2d_rules() -> None:
    stages = {"forward": 5.0, "h2d": 2.0, "backward": 2.0, "optimizer": 0.5, "other": 1.5}
    out = findings(stages, 11.0, {**CTX, "log_every": 50})
    # h2d: 2 / 9.5 of the step > 20%; other: 1.5 / 11 of the wall > 10%.
    assert stages_of(out) == ["forward", "h2d", "other"]
    assert out[1].of == "step" and "--pin-memory" in out[1].text
    assert out[2].of == "wall" and "Raise --log-every (now 50)" in out[2].text


def test_secondary_rules_come_in_a_fixed_order() -> None:
    stages = {
        "setup": 40.0,
        "data_wait": 5.0,
        "h2d": 3.0,
        "forward": 1.0,
        "backward": 1.0,
        "evaluation": 35.0,
        "other": 15.0,
    }  # wall 100
    out = findings(stages, 100.0, CTX)
    assert stages_of(out) == ["setup", "data_wait", "h2d", "evaluation", "other"]
    assert all(f.text.startswith("Above ") for f in out[1:])


def test_no_input_gives_no_findings() -> None:
    assert findings({}, 10.0, CTX) == []
    assert findings({"forward": 1.0}, 0.0, CTX) == []
    assert findings({"forward": 1.0}, -1.0) == []


def test_only_unknown_stages_give_no_findings() -> None:
    assert findings({"warp_drive": 2.0}, 5.0, CTX) == []


def test_compile_stage_is_named_as_a_one_off_cost() -> None:
    out = findings({"compile": 2.0, "forward": 1.0}, 5.0, CTX)
    assert out[0].stage == "compile" and "one-off" in out[0].text


def test_context_is_optional() -> None:
    out = findings(COMPUTE_BOUND, 10.0)
    assert stages_of(out) == ["forward"]


def test_hand_written_comm_above_its_share_points_to_ddp() -> None:
    stages = {"data_wait": 0.1, "forward": 1.0, "backward": 1.5, "comm": 1.2, "optimizer": 0.2}
    found = findings({**stages, "setup": 3.0}, 7.0, {"strategy": "allreduce"})
    comm = [f for f in found if f.stage == "comm"]
    assert len(comm) == 1 and comm[0].of == "step"
    assert comm[0].share == pytest.approx(1.2 / 4.0)
    assert "--strategy ddp" in comm[0].text and "strategy allreduce" in comm[0].text
