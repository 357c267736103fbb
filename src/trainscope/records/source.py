"""What a run ran: trainscope's own loop, or the user's code (torch-free)."""

from __future__ import annotations

from typing import Any

SCRIPT_KINDS = ("script", "module", "python", "lightning", "hf")
"""``source.kind`` of a run of the user's own code: ``trainscope profile SCRIPT``,
``trainscope profile -m MODULE``, ``with trainscope.profile()``, and a Lightning or
Hugging Face Trainer run measured by trainscope's integration (``trainscope.integrations``)."""

COMMAND_KINDS = ("script", "module")
"""The kinds whose record holds a command that runs again under ``trainscope profile``
(the others ran inside code trainscope was not started with)."""

SCRIPT_WALL = (
    "Wall time runs from trainscope's start (after interpreter start-up and importing "
    "torch) to the end of the user's code; the stages partition it."
)


SCRIPT_STAGE_LABELS = {
    "setup": "setup (to the first stage)",
    "backward": "backward",
    "evaluation": "evaluation",
}
"""Where a script run's stage means less than a native run's label says: its backward
holds no loss (a loss computed outside the model is in ``other``, one inside it in
``forward``), its evaluation is whatever ran without gradients, not "val + test"."""


def stage_labels(summary: dict[str, Any], labels: dict[str, str]) -> dict[str, str]:
    """``labels`` (stage -> words, as ``records.STAGE_LABELS``) for this record: a script
    run's stages named as they were measured (:data:`SCRIPT_STAGE_LABELS`)."""
    return {**labels, **SCRIPT_STAGE_LABELS} if is_script_record(summary) else labels


def is_script_record(summary: dict[str, Any]) -> bool:
    """Whether ``summary`` is a run of the user's own code (its ``source`` says so)."""
    source = summary.get("source")
    return isinstance(source, dict) and source.get("kind") in SCRIPT_KINDS


def script_argv(summary: dict[str, Any]) -> str | None:
    """The script's command line as the record holds it (None: not a script run)."""
    source = summary.get("source")
    if not is_script_record(summary):
        return None
    argv = source.get("argv") if isinstance(source, dict) else None
    return " ".join(str(a) for a in argv) if isinstance(argv, list) else None


def other_holds(summary: dict[str, Any]) -> str | None:
    """What a script run's ``other`` stage holds, in words (None: not a script run)."""
    script = summary.get("script")
    if not is_script_record(summary) or not isinstance(script, dict):
        return None
    text = script.get("other_holds")
    return text if isinstance(text, str) else None


__all__ = [
    "SCRIPT_KINDS",
    "SCRIPT_STAGE_LABELS",
    "SCRIPT_WALL",
    "is_script_record",
    "other_holds",
    "script_argv",
    "stage_labels",
]
