"""The integrations' Driver keeps the stages a framework's events open and closes them by
name: a leave matches its own enter, one for a stage never entered is ignored, and a
stage the clock does not time apart is matched and left untimed."""

from __future__ import annotations

from types import SimpleNamespace

from trainscope.integrations.driver import Driver


class Clock:
    """Times every stage except ``data`` (as the clock does not time a nested one)."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def enter(self, stage: str) -> bool:
        self.calls.append(f"+{stage}")
        return stage != "data"

    def leave(self, stage: str) -> None:
        self.calls.append(f"-{stage}")


def _driver() -> tuple[Driver, Clock]:
    driver, clock = Driver("toy", None), Clock()
    driver.session = SimpleNamespace(hooks=SimpleNamespace(clock=clock))  # type: ignore[assignment]
    return driver, clock


def test_leave_closes_the_stage_it_names_and_ignores_one_never_entered() -> None:
    driver, clock = _driver()
    driver.enter("forward")
    driver.leave("backward")  # never entered: nothing closes
    assert driver.holds("forward") and not driver.holds("backward")
    driver.enter("data")  # untimed, yet matched
    driver.leave("data")
    driver.leave("forward")
    assert clock.calls == ["+forward", "+data", "-forward"] and not driver.holds("forward")


def test_leaving_an_outer_stage_closes_what_was_left_open_inside_it() -> None:
    driver, clock = _driver()
    driver.enter("step")
    driver.enter("backward")  # its end event never comes (the framework raised)
    driver.leave("step")
    assert clock.calls == ["+step", "+backward", "-backward", "-step"]
    assert not driver.holds("step") and not driver.holds("backward")
