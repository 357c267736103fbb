"""A resumed run's metrics.jsonl read back: each step once, as the run that went on took it."""

from __future__ import annotations

from trainscope.records.attempts import current_events, resumes


def step(n: int, loss: float, attempt: int | None = None) -> dict:
    line = {"event": "step", "step": n, "loss": loss}
    return line if attempt is None else {**line, "attempt": attempt}


def test_steps_an_attempt_redid_are_read_once_from_the_attempt_that_went_on() -> None:
    lines = [
        {"event": "setup", "seconds": 1.0},
        step(1, 2.0), step(2, 1.9), {"event": "checkpoint", "step": 2},
        step(3, 1.8), {"event": "epoch", "epoch": 1}, step(4, 1.7),
        # attempt 1 died after step 4; attempt 2 goes on from the checkpoint of step 2
        {"event": "resume", "from_step": 2, "from_epoch": 0, "attempt": 2},
        {"event": "setup", "seconds": 1.0, "attempt": 2},
        step(3, 1.8, 2), {"event": "epoch", "epoch": 1, "attempt": 2}, step(4, 1.7, 2),
        {"event": "test", "loss": 1.6, "attempt": 2},
    ]  # fmt: skip
    kept = current_events(lines)
    assert [(e["step"], e.get("attempt")) for e in kept if e["event"] == "step"] == [
        (1, None), (2, None), (3, 2), (4, 2)
    ]  # fmt: skip
    assert [e.get("attempt") for e in kept if e["event"] == "epoch"] == [2]
    assert [e["step"] for e in kept if e["event"] == "checkpoint"] == [2]
    assert len([e for e in kept if e["event"] == "setup"]) == 2  # each attempt's setup
    assert [r["attempt"] for r in resumes(kept)] == [2]


def test_a_run_never_resumed_reads_as_written() -> None:
    lines = [step(1, 2.0), {"event": "epoch", "epoch": 1}, {"event": "test", "loss": 1.0}]
    assert current_events(lines) == lines


def test_odd_values_in_a_resume_line_do_not_break_reading() -> None:
    lines = [
        step(1, 2.0),
        {"event": "resume", "from_step": "x", "from_epoch": None},
        step(1, 2.0, 2),
    ]
    assert [e.get("attempt") for e in current_events(lines) if e["event"] == "step"] == [2]
