"""Directories trainscope wrote before they carried a marker (torch-free): recognised by
the names it wrote there and by the file only it writes, as it writes it. Such a
directory, holding nothing else, is taken as trainscope's (a study resumed, a report
rebuilt); anything else in it and it is refused like any other folder
(:func:`trainscope.records.ownership.claim_dir`)."""

from __future__ import annotations

import json
import os
from collections.abc import Collection
from pathlib import Path

# Names that trainscope wrote before directories carried a marker, by kind.
LEGACY_FILES = {
    "run": {"config.yaml", "env.json", "metrics.jsonl", "system.jsonl", "summary.json",
            "model.safetensors", "vocab.json", "gpt_config.json"},
    "report": {"report.md", "report.html", "tables.tex", "stages.png", "stages.svg",
               "loss.png", "loss.svg"},
    "study": {"study.json"},
}  # fmt: skip
_LEGACY_DIRS = {"report": "plots", "study": "runs"}

# The figures trainscope draws in a report's plots/, each as .png and .svg: those of a run
# report, then those of the study reports, and precision_wall, which versions before
# markers drew where precision_time is now. A pre-marker plots/ holding any other file
# (a user's own figure) is not recognised, so nothing in it is taken or removed.
# tests/records/test_ownership.py checks that every figure name the report modules write
# is here.
REPORT_FIGURES = (
    "stages", "loss", "memory", "timeline",
    "loader_sweep", "loader_per_iteration",
    "precision_loss", "precision_time", "precision_wall", "precision_memory",
    "strategies_time_per_iter", "strategies_stages",
    "checkpointing_frontier", "collectives_busbw",
    # Drawn only by versions with markers (never in a pre-marker folder), listed so
    # that the list stays every figure a report draws.
    "finetune_loss", "precision_system", "time_to_target", "scaling_speedup",
)  # fmt: skip
_LEGACY_FIGURE_FILES = {f"{name}.{ext}" for name in REPORT_FIGURES for ext in ("png", "svg")}


def legacy_files(p: Path, kind: str, bookkeeping: Collection[str]) -> list[str] | None:
    """What an earlier trainscope wrote in the ``kind`` directory ``p`` (sorted relative
    paths), passing over the ``bookkeeping`` names; None if anything else in it is not a
    name trainscope writes (or is a link), or the file only trainscope writes is not
    there as it writes it."""
    known, folder = LEGACY_FILES.get(kind, set()), _LEGACY_DIRS.get(kind)
    files: list[str] = []
    for entry in os.scandir(p):
        if entry.name in bookkeeping:
            continue
        if entry.is_file(follow_symlinks=False) and entry.name in known:
            files.append(entry.name)
        elif entry.name == folder and entry.is_dir(follow_symlinks=False) and kind == "report":
            # The figures an earlier build drew: plain files with the names it draws only.
            for fig in os.scandir(entry.path):
                if not (fig.is_file(follow_symlinks=False) and fig.name in _LEGACY_FIGURE_FILES):
                    return None
                files.append(f"{folder}/{fig.name}")
        elif entry.name == folder and entry.is_dir(follow_symlinks=False):
            pass  # a study's runs/: kept, never listed (resuming deletes nothing)
        else:
            return None
    if not _looks_like_trainscope(p, kind):
        return None
    return sorted(files)


def _looks_like_trainscope(p: Path, kind: str) -> bool:
    """The file that only trainscope writes in such a directory, as it writes it (names
    like summary.json alone are too common to prove anything)."""
    if kind == "report":
        try:
            with open(p / "tables.tex", "rb") as f:
                return f.read(64).startswith(b"% Tables of trainscope")
        except OSError:
            return False
    try:
        data = json.loads((p / f"{'study' if kind == 'study' else 'summary'}.json").read_bytes())
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and data.get("schema_version") == 1 and "status" in data
