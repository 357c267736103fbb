"""``trainscope lab --script train.py``: the lab's chapters on the user's own script.

The chapters whose question a script can answer are measured by the same studies run on
the unchanged script (``trainscope study NAME -- SCRIPT``, its settings injected): where
its time goes, its DataLoader workers, its precision, and its activation memory against
recomputation. The others (distributing, DP vs DDP, hand-written sync, the collectives,
LoRA, GPT-2's memory, INT8) compare strategies or models a script does not offer to
swap: the lab says they need trainscope's reference workloads, and measures nothing for
them.
"""

from __future__ import annotations

import dataclasses

from trainscope.lab.chapters import Chapter, all_chapters

_REPEATS = ("--repeats", "3")
SCRIPT_CHAPTERS: dict[str, tuple[str, str, tuple[str, ...], tuple[str, ...]]] = {
    # slug: (study, question on a script, --quick flags, full flags)
    "time": ("profile", "Which stage of your script's step takes the time, and what to do "
             "about it?", (*_REPEATS, "--steps", "20"), ("--repeats", "5", "--steps", "60")),
    "workers": ("loader", "How many DataLoader workers does your script want?",
                ("--iter-workers", "0,2", *_REPEATS, "--steps", "20"),
                ("--iter-workers", "0,1,2,4", "--repeats", "5", "--steps", "60")),
    "precision": ("precision", "What does bf16 autocast cost or save per step of your "
                  "script, and does its loss follow fp32's?",
                  ("--precisions", "fp32,bf16,fp16", *_REPEATS, "--steps", "20"),
                  ("--repeats", "5", "--steps", "60")),
    "checkpointing": ("checkpointing", "How much activation memory does recomputing your "
                      "model's blocks save, and what does it cost in time?",
                      ("--policies", "none,full", *_REPEATS, "--steps", "20"),
                      ("--repeats", "5", "--steps", "60")),
}  # fmt: skip
"""The chapters a script answers, by slug: the study that measures it on the script."""
REFERENCE_ONLY = (
    "it compares strategies or models a script does not offer to swap: run `trainscope "
    "lab` without --script for trainscope's reference workloads"
)
AMP_SEEN = "chapter 2 measures the same question (fp32 against autocast) on your script"


def script_chapters(command: list[str], threads: str | None = None) -> tuple[Chapter, ...]:
    """Every chapter of the lab, those a script answers made studies of ``command``
    (``[SCRIPT, *ARGS]`` or ``["-m", MODULE, *ARGS]``), the others marked as needing
    trainscope's workloads (:attr:`Chapter.elsewhere`)."""
    extra = ("--threads", threads) if threads else ()
    out = []
    for c in all_chapters():
        if c.slug in SCRIPT_CHAPTERS:
            study, question, quick, full = SCRIPT_CHAPTERS[c.slug]
            out.append(dataclasses.replace(
                c, question=question, study=study, maker=None, command=(), data=(), fit=False,
                quick=(*quick, *extra), full=(*full, *extra), after=tuple(command),
                not_yet=None,
            ))  # fmt: skip
        else:
            why = AMP_SEEN if c.slug == "amp" else REFERENCE_ONLY
            out.append(dataclasses.replace(c, study=None, maker=None, elsewhere=why))
    return tuple(out)


__all__ = ["REFERENCE_ONLY", "SCRIPT_CHAPTERS", "script_chapters"]
