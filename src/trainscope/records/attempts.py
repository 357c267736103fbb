"""A resumed run's record: several attempts writing one ``metrics.jsonl``.

A run resumed from a checkpoint at step S (``trainscope run --resume``, or a restart by
torchrun) appends to the same ``metrics.jsonl``: first a ``resume`` line naming the step
and epoch it goes on from, then its own lines, each with ``"attempt": n`` (lines without
the field were written by the first attempt). What an earlier attempt recorded after
that checkpoint (steps it took before it died, an epoch it did not finish, a test it did
not reach) is done again by the new attempt: :func:`current_events` leaves those
superseded lines out, so readers see each step once, as the run that went on did it.
"""

from __future__ import annotations

from typing import Any


def _superseded(event: dict[str, Any], step: int, epoch: int) -> bool:
    """Whether an earlier attempt's ``event`` comes after a resume from (step, epoch)."""
    kind = event.get("event")
    if kind in ("step", "checkpoint"):
        return _int(event.get("step")) > step
    if kind == "epoch":
        return _int(event.get("epoch")) > epoch
    return kind == "test"  # the test comes at the end: an attempt that resumed redoes it


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def current_events(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``metrics.jsonl`` events without those a later attempt redid (see the module)."""
    out: list[dict[str, Any]] = []
    for ev in events:
        if ev.get("event") == "resume":
            step, epoch = _int(ev.get("from_step")), _int(ev.get("from_epoch"))
            out = [e for e in out if not _superseded(e, step, epoch)]
        out.append(ev)
    return out


def resumes(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The ``resume`` lines of a record, in order (none for a run that never resumed)."""
    return [e for e in events if e.get("event") == "resume"]
