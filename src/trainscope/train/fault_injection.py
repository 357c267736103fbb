"""Test support, shipped in the package: fault injection for the tests of checkpoints,
resume and restarts (and for anyone checking their own recovery): a process that kills
itself with SIGKILL at a chosen point, as a crash, the OOM killer or a lost node would.

Set ``TRAINSCOPE_FAULT`` to ``step=K[,stage=S][,rank=R][,attempt=A][,signal=SIG]``: the
process of rank ``R`` (default: every rank) dies at step ``K`` (global, counted from 1),
right after stage ``S`` of it (``data_wait``, ``h2d``, ``forward``, ``backward``,
``comm``, ``optimizer``; default ``forward``), or with ``stage=checkpoint`` while
writing the checkpoint of step ``K``, after its first file, or with ``stage=weights``
while writing the final weights (after the run's last step ``K``), once the file is
written and before it is in place. Only in attempt ``A`` (default 1), so the resumed or
restarted run goes on. With ``signal=USR1`` (or ``TERM``, ...) the process sends itself
that signal there instead of SIGKILL, as a scheduler about to preempt it would.
trainscope never sets it; nothing else reads it.
"""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass
from typing import Any

from trainscope.errors import ConfigError

ENV_VAR = "TRAINSCOPE_FAULT"
STAGES = (
    "data_wait", "h2d", "forward", "backward", "comm", "pipeline_wait", "optimizer",
    "checkpoint", "weights",
)  # fmt: skip


@dataclass(frozen=True)
class Fault:
    """Where this process is to die."""

    step: int
    stage: str = "forward"
    signum: int = signal.SIGKILL

    def die_at(self, stage: str, step: int) -> None:
        """SIGKILL this process (or send it the fault's signal) if (stage, step) is the
        chosen point."""
        if stage == self.stage and step == self.step:
            os.kill(os.getpid(), self.signum)


def from_env(rank: int, attempt: int) -> Fault | None:
    """The fault ``TRAINSCOPE_FAULT`` asks of this rank in this attempt, if any."""
    text = os.environ.get(ENV_VAR, "").strip()
    if not text:
        return None
    try:
        fields = dict(part.split("=", 1) for part in text.split(","))
        step = int(fields.pop("step"))
        stage = fields.pop("stage", "forward")
        ranks = fields.pop("rank", None)
        when = int(fields.pop("attempt", "1"))
        signum = signal.Signals["SIG" + fields.pop("signal", "KILL").upper()]
    except (KeyError, ValueError):
        raise ConfigError(
            f"{ENV_VAR}={text!r}: expected step=K[,stage=S][,rank=R][,attempt=A][,signal=SIG]"
        ) from None
    if fields or stage not in STAGES:
        raise ConfigError(f"{ENV_VAR}={text!r}: unknown field or stage")
    if when != attempt or (ranks is not None and int(ranks) != rank):
        return None
    return Fault(step, stage, signum)


class FaultTimer:
    """A stage timer that dies at the fault's point; otherwise the timer it wraps."""

    def __init__(self, timer: Any, fault: Fault, next_step: Any) -> None:
        self.timer, self.fault, self.next_step = timer, fault, next_step
        self.kind = timer.kind

    def start_step(self) -> None:
        self.timer.start_step()

    def mark(self, stage: str) -> None:
        self.timer.mark(stage)
        self.fault.die_at(stage, self.next_step())

    def mark_split(self, parts: dict[str, float], rest: str) -> None:
        self.timer.mark_split(parts, rest)
        for stage in (*parts, rest):
            self.fault.die_at(stage, self.next_step())

    def end_step(self) -> None:
        self.timer.end_step()

    def resolve(self, block: bool = False) -> Any:
        return self.timer.resolve(block=block)
