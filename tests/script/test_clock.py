"""The stage clock alone, on a clock the test moves by hand: every boundary's interval
goes to the right stage, and the stages with ``other`` add up to the wall time."""

from __future__ import annotations

import pytest

from trainscope.script.clock import SCRIPT_STAGES, HostTicks, StageClock, stage_totals


class Hand:
    """A clock that moves only when told."""

    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t

    def go(self, seconds: float) -> None:
        self.t += seconds


def make() -> tuple[Hand, StageClock]:
    hand = Hand()
    return hand, StageClock(HostTicks(hand), origin=hand.t)


def timed(hand: Hand, clock: StageClock, stage: str, seconds: float) -> None:
    assert clock.enter(stage)
    hand.go(seconds)
    clock.leave(stage)


def one_step(hand: Hand, clock: StageClock, gap: float = 0.0) -> None:
    timed(hand, clock, "data_wait", 0.1)
    hand.go(gap)  # the script's own code: other
    timed(hand, clock, "forward", 0.2)
    timed(hand, clock, "backward", 0.3)
    assert clock.enter("optimizer")
    hand.go(0.05)
    clock.leave("optimizer")
    clock.step_end({"0: SGD": clock.steps_done + 1})


def test_setup_stages_and_other_partition_the_wall_time() -> None:
    hand, clock = make()
    hand.go(2.0)  # imports and model building before the first stage
    one_step(hand, clock, gap=0.04)
    one_step(hand, clock, gap=0.04)
    hand.go(0.5)  # after the last step
    records = clock.resolve(block=True)
    assert clock.close() == hand.t
    clock.resolve(block=True)
    stages = stage_totals(clock.totals, hand.t - 100.0)
    assert stages["setup"] == pytest.approx(2.0)
    assert stages["data_wait"] == pytest.approx(0.2)
    assert stages["forward"] == pytest.approx(0.4)
    assert stages["backward"] == pytest.approx(0.6)
    assert stages["optimizer"] == pytest.approx(0.1)
    assert stages["other"] == pytest.approx(0.08 + 0.5)
    assert sum(stages.values()) == pytest.approx(hand.t - 100.0)
    assert [r["step"] for r in records] == [1, 2]
    first = records[0]
    assert first["t"] == pytest.approx(2.0)
    assert sum(first["stages"].values()) == pytest.approx(0.69)
    assert first["stages"]["other"] == pytest.approx(0.04)


def test_an_evaluation_loop_keeps_its_own_gaps_and_stays_out_of_the_step() -> None:
    hand, clock = make()
    one_step(hand, clock)
    hand.go(0.01)  # model.eval(): the script's own code
    for _ in range(3):
        timed(hand, clock, "evaluation", 0.1)
        hand.go(0.02)  # get_batch() between evaluation forwards: the evaluation's
    timed(hand, clock, "evaluation", 0.1)
    one_step(hand, clock)
    assert clock.close() == hand.t
    assert len(clock.resolve(block=True)) == 2
    stages = stage_totals(clock.totals, hand.t - 100.0)
    assert stages["evaluation"] == pytest.approx(0.4 + 0.06)
    assert clock.resolve() == []  # resolved already
    clock2_hand, clock2 = make()
    one_step(clock2_hand, clock2)
    clock2_hand.go(0.01)
    timed(clock2_hand, clock2, "evaluation", 0.1)
    one_step(clock2_hand, clock2)
    second = clock2.resolve(block=True)[1]
    assert second["between"] == {"evaluation": pytest.approx(0.1)}
    assert sum(second["stages"].values()) == pytest.approx(0.65 + 0.01)  # not the evaluation


def test_a_closure_inside_the_optimizer_step_is_timed_as_forward_and_backward() -> None:
    hand, clock = make()
    assert clock.enter("optimizer")  # Lightning: optimizer.step(closure)
    hand.go(0.01)
    timed(hand, clock, "forward", 0.2)
    timed(hand, clock, "backward", 0.3)
    hand.go(0.05)  # the update itself
    clock.leave("optimizer")
    clock.step_end({"0: Adam": 1})
    (record,) = clock.resolve(block=True)
    assert record["stages"]["forward"] == pytest.approx(0.2)
    assert record["stages"]["backward"] == pytest.approx(0.3)
    assert record["stages"]["optimizer"] == pytest.approx(0.06)


def test_stages_inside_backward_data_wait_and_evaluation_are_theirs() -> None:
    hand, clock = make()
    assert clock.enter("backward")
    assert not clock.enter("forward")  # activation checkpointing's recompute
    assert not clock.enter("backward")
    hand.go(0.3)
    clock.leave("backward")
    assert clock.enter("evaluation")
    assert not clock.enter("data_wait") and not clock.enter("forward")
    hand.go(0.1)
    clock.leave("evaluation")
    assert clock.close() == hand.t
    clock.resolve(block=True)
    totals = clock.totals
    assert totals["backward"] == pytest.approx(0.3)
    assert totals["forward"] == 0.0
    assert totals["evaluation"] == pytest.approx(0.1)


def test_a_stage_left_by_an_exception_closes_what_it_held() -> None:
    hand, clock = make()
    assert clock.enter("optimizer")
    assert clock.enter("forward")
    hand.go(0.2)
    clock.leave("optimizer")  # forward's leave never came: the closure raised
    assert clock.current is None
    assert clock.close() == hand.t
    clock.resolve(block=True)
    assert clock.totals["forward"] == pytest.approx(0.2)


def test_a_run_with_no_stage_is_all_setup() -> None:
    hand, clock = make()
    hand.go(1.5)
    assert clock.close() == hand.t
    stages = stage_totals(clock.totals, 1.5)
    assert stages["setup"] == pytest.approx(1.5)
    assert stages["other"] == pytest.approx(0.0)
    assert set(stages) == {*SCRIPT_STAGES, "other"}


def test_samples_losses_and_micro_batches_belong_to_their_step() -> None:
    hand, clock = make()
    for _ in range(4):  # gradient accumulation: four forwards, one step
        timed(hand, clock, "forward", 0.1)
        clock.add_micro()
        clock.add_samples(8)
        clock.add_loss("l")
    clock.step_end({"0: SGD": 1})
    (record,) = clock.resolve(block=True)
    assert record["batch_size"] == 32
    assert record["micro_batches"] == 4
    assert record["losses"] == ["l"] * 4


def test_steps_wait_until_their_tokens_can_be_read() -> None:
    class Late(HostTicks):  # tokens readable later, as CUDA events are
        deferred = True
        ready_now = False

        def ready(self, token: float, block: bool) -> bool:
            return block or self.ready_now

    hand = Hand()
    ticks = Late(hand)
    clock = StageClock(ticks, origin=hand.t)
    one_step(hand, clock)
    assert clock.resolve(block=False) == []
    assert len(clock.resolve(block=True)) == 1


def test_the_wall_ends_at_the_closing_boundary_so_other_keeps_its_time() -> None:
    """Time passes on every reading (as on a real clock, or a loaded machine that
    deschedules the process between two of them): the run's end is the closing
    boundary itself, so no interval reaches past the wall and ``other`` loses nothing."""
    hand, clock = make()
    ticking = HostTicks(lambda: (hand.go(0.05), hand.t)[1])
    clock.ticks = ticking
    one_step(hand, clock, gap=0.04)
    hand.go(0.3)  # the script's own code after its last step
    end = clock.close()
    clock.resolve(block=True)
    stages = stage_totals(clock.totals, end - 100.0)
    assert sum(stages.values()) == pytest.approx(end - 100.0)
    assert stages["other"] >= 0.3 + 0.04
