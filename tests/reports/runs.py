"""Hand-written run directories for report tests (test helper, no torch, no GPU).

Summaries shaped like the ones training writes: a completed CPU run and a run that
failed with a traceback; :func:`write_run` lays one out as a run directory.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import yaml

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

COMPLETED: dict[str, Any] = {
    "schema_version": 1,
    "status": "completed",
    "error": None,
    "workload": "digits",
    "model": "LeNet5",
    "num_parameters": 44426,
    "device": "cpu",
    "device_name": "x86_64 CPU",
    "precision": "fp32",
    "timing_mode": "perf_counter",
    "wall_time_s": 4.2,
    "train_time_s": 3.1,
    "stages_s": {
        "setup": 0.3,
        "data_wait": 0.4,
        "h2d": 0.01,
        "forward": 0.9,
        "backward": 1.2,
        "optimizer": 0.4,
        "evaluation": 0.5,
        "other": 0.49,
    },
    "steps": 20,
    "samples": 1280,
    "samples_per_s": 6100.0,
    "batch_size": 64,
    "skipped_steps": 0,
    "test_accuracy": 0.974,
    "test_loss": 0.09,
    "per_class_accuracy": {str(i): 0.9 + i / 100 for i in range(10)},
    "first_losses": [2.30, 2.29, 2.27, 2.21, 2.15],
    "epochs": [
        {
            "epoch": 1,
            "train_loss": 1.2,
            "val_loss": 0.5,
            "val_accuracy": 0.85,
            "duration_s": 0.31,
            "samples_per_s": 6000.0,
        },
        {
            "epoch": 2,
            "train_loss": 0.4,
            "val_loss": 0.3,
            "val_accuracy": None,
            "duration_s": 0.29,
            "samples_per_s": 6200.0,
        },
    ],
    "peak_memory_bytes": 350_000_000,
    "peak_memory_kind": "process_peak_rss",
    "memory": {
        "step": 2,
        "parameters_bytes": 177_704,
        "buffers_bytes": 0,
        "gradients_bytes": 177_704,
        "optimizer_states_bytes": 177_704,
        "activations_bytes": 406_016,
        "activations": {
            "saved_by_autograd_bytes": 406_016,
            "selective_saved_bytes": 0,
            "autocast_weight_copies_bytes": 0,
            "storages": 12,
        },
        "model_states_bytes": 533_112,
        "total_bytes": 939_128,
        "checkpointing": {"policy": "none", "blocks": 0},
        "sharded": False,
    },
    "system": {"samples": 4, "cpu_percent_mean": 180.0, "rss_max_bytes": 350_000_000},
}

FAILED: dict[str, Any] = {
    "schema_version": 1,
    "status": "failed",
    "error": "RuntimeError: loss became nan at step 7\nTraceback (most recent call last): ...",
    "workload": "digits",
    "model": "LeNet5",
    "device": "cpu",
    "precision": "fp32",
    "wall_time_s": 0.8,
    "test_accuracy": None,
}

ENV = {"python": "3.11.2", "torch": "2.6.0", "cuda": None, "hostname": "box"}


def write_run(root: Path, name: str, summary: dict[str, Any], steps: int = 20) -> Path:
    """A run directory as training writes it, with ``steps`` step events over 2 epochs."""
    run = root / name
    run.mkdir(parents=True)
    (run / "summary.json").write_text(json.dumps(summary))
    (run / "env.json").write_text(json.dumps(ENV))
    (run / "config.yaml").write_text(yaml.safe_dump({"workload": summary.get("workload")}))
    lines = [
        {
            "event": "step",
            "epoch": 1 + (i - 1) * 2 // steps,
            "step": i,
            "loss": 2.3 * math.exp(-i / 6),
            "lr": 0.1,
        }
        for i in range(1, steps + 1)
    ]
    lines.append({"event": "epoch", "epoch": 2, "train_loss": 0.4})
    text = "".join(json.dumps(x) + "\n" for x in lines)
    (run / "metrics.jsonl").write_text(text + '{"event": "step", "ep')  # killed mid-line
    return run


def section(md: str, heading: str) -> str:
    """The text of one '## heading' section of report.md."""
    return md.split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]


def pipe_rows(text: str) -> list[list[str]]:
    """Body rows of the first pipe table in ``text`` (header and rule dropped)."""
    rows = [ln for ln in text.splitlines() if ln.startswith("|")]
    return [[c.strip() for c in ln.strip("|").split(" | ")] for ln in rows[2:]]


def assert_png(path: Path) -> None:
    """``path`` is a PNG of plausible size (not an empty or placeholder figure)."""
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC, f"{path} is not a PNG"
    assert len(data) > 10_000, f"{path} is suspiciously small ({len(data)} bytes)"
