"""Tests of the optional tracking sinks, and the fake run data they share."""

from __future__ import annotations

from typing import Any

STAGE_NAMES = ("data_wait", "h2d", "forward", "backward", "optimizer")


def fake_steps(epoch: int, first_step: int, n: int) -> list[dict[str, Any]]:
    """Step records as train_epoch hands them out, with distinct losses and stage times."""
    return [
        {
            "step": s,
            "epoch": epoch,
            "loss": 2.5 / s,
            "batch_size": 32,
            "stages": {k: 0.001 * (i + 1) + 1e-5 * s for i, k in enumerate(STAGE_NAMES)},
        }
        for s in range(first_step, first_step + n)
    ]


def fake_epoch(epoch: int, *, val: bool) -> dict[str, Any]:
    """An epoch row; the validation values are None on epochs without validation."""
    return {
        "epoch": epoch,
        "train_loss": 1.0 / epoch,
        "val_loss": 0.9 / epoch if val else None,
        "val_accuracy": 0.5 + 0.1 * epoch if val else None,
        "duration_s": 1.25,
        "samples_per_s": 1000.0 + epoch,
    }


def fake_sample(t: float, *, gpu: bool = True) -> dict[str, Any]:
    """A system sample; with ``gpu``, one working GPU and one whose query failed."""
    sample: dict[str, Any] = {
        "t": t,
        "cpu_percent": 150.0,
        "rss_bytes": 512 * 1024 * 1024,
        "system_memory_percent": 40.0,
    }
    if gpu:
        sample["gpus"] = [
            {
                "index": 0,
                "util_percent": 87,
                "memory_used_bytes": 2 * 1024**3,
                "memory_total_bytes": 80 * 1024**3,
                "power_w": 312.5,
            },
            {"index": 1, "error": "NVML: GPU is lost"},
        ]
    return sample


def fake_summary(status: str = "completed") -> dict[str, Any]:
    """A final summary with nested dicts and lists, as run.py writes it."""
    return {
        "status": status,
        "error": None if status == "completed" else "RuntimeError: boom",
        "workload": "digits-mlp",
        "device": "cpu",
        "test_accuracy": 0.9375,
        "wall_time_s": 12.5,
        "steps": 8,
        "stages_s": {"setup": 1.0, "forward": 2.0, "other": 0.5},
        "epochs": [fake_epoch(1, val=False), fake_epoch(2, val=True)],
        "first_losses": [2.5, 1.25],
        "per_class_accuracy": {"0": 1.0, "1": 0.875},
    }


CONFIG: dict[str, Any] = {
    "workload": {"name": "digits-mlp"},
    "train": {"epochs": 2, "lr": 0.1, "optimizer": "sgd"},
    "data": {"batch_size": 32},
    "out": None,
}
