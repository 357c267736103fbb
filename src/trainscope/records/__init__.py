"""The run record: the contract between training and everything that reads its results.

A run directory holds::

    config.yaml      the resolved RunConfig (feed it back with --config to rerun)
    env.json         versions, devices, host, git sha
    metrics.jsonl    append-only events: {"event": "step" | "epoch" | "eval" | ...}
    system.jsonl     sampled CPU / RAM / GPU metrics with timestamps
    summary.json     written last and atomically; "status" is "running" until the end
    .trainscope      the marker: trainscope wrote this directory, and which files in it

This package is torch-free so that reports can be built on any machine.
"""

from trainscope.records.jsonio import atomic_write_json
from trainscope.records.ownership import OwnedDir, claim_dir, clear_owned
from trainscope.records.run_dir import (
    RUN_FILES,
    STAGE_LABELS,
    STAGES,
    RunRecord,
    RunWriter,
    load_run,
    prepare_run_dir,
    reopen_run_dir,
)

__all__ = [
    "RUN_FILES",
    "STAGES",
    "STAGE_LABELS",
    "RunRecord",
    "RunWriter",
    "OwnedDir",
    "claim_dir",
    "clear_owned",
    "atomic_write_json",
    "load_run",
    "prepare_run_dir",
    "reopen_run_dir",
]
