"""The schema of each record file: what its readers index, as :mod:`trainscope.records.schema`
field specs (torch-free).

- :data:`SUMMARY`: a run's ``summary.json`` (reports, ``compare``, studies, ``quantize``);
- :data:`MANIFEST` and :data:`TRAINER_STATE`: a checkpoint's ``COMPLETE.json`` and
  ``trainer.json`` (``--resume``);
- :data:`STUDY`: any study's ``study.json``, with the α–β :data:`COST_MODEL` (and its
  :data:`FIT` per op) a collectives sweep saves and a strategies study keeps in its plan.

Ranges are what a run can produce (see the bounds in :mod:`~trainscope.records.schema`);
the JSON a record holds is unchanged by them. Every field is optional unless a record
names it ``required``: readers handle a missing one, not a wrong one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from trainscope.records.schema import (
    BYTES,
    CLOCK,
    COUNT,
    COUNT_OR_NULL,
    FRACTION,
    MAX_COUNT,
    MAX_REAL,
    MAX_SECONDS,
    MAX_WORLD,
    RANK,
    RATE,
    REAL,
    SECONDS,
    SIGNED_SECONDS,
    TEXT,
    TEXTS,
    Bool,
    Int,
    ListOf,
    MapOf,
    Num,
    Obj,
    OneOf,
    Spec,
    Text,
    Tuple,
)


def _obj(fields: Mapping[str, Spec], *required: str, null: bool = True) -> Obj:
    return Obj(fields, tuple(required), null=null)


# ---------------------------------------------------------------------------------------
# The run summary (summary.json): what reports, compare, studies and quantize index
# ---------------------------------------------------------------------------------------

STAGES_S = MapOf(SIGNED_SECONDS, null=True)
"""Stage name -> seconds (``stages_s``; a checkpoint's ``stages``)."""
_STEP_SPREAD = _obj(
    {k: Num(0.0, MAX_SECONDS) for k in ("median", "low", "high")} | {"kind": Text()},
    "median", "low", "high", "kind",
)  # fmt: skip
STEADY = _obj(
    {
        "warmup_steps": COUNT_OR_NULL,
        "warmup_time_s": SECONDS,
        "steps": COUNT_OR_NULL,
        "warmup_step_s_median": SECONDS,
        "step_s": _STEP_SPREAD,
        "time_s": SECONDS,
        "samples_per_s": RATE,
        "stage_s_median": MapOf(SIGNED_SECONDS, null=True),
        "note": TEXT,
    }
)
EPOCH_ROW = Obj(
    {
        "epoch": COUNT_OR_NULL,
        "train_loss": REAL,
        "val_loss": REAL,
        "val_accuracy": FRACTION,
        "perplexity": REAL,
        "duration_s": SECONDS,
        "samples_per_s": RATE,
        "loader_start_s": SECONDS,
        "t_start": CLOCK,
        "t_end": CLOCK,
        "val_t": CLOCK,
        "val_s": SECONDS,
        "steps": COUNT_OR_NULL,
        "samples": COUNT_OR_NULL,
    }
)
MEMORY = _obj(
    {
        "step": COUNT_OR_NULL,
        **{
            f"{k}_bytes": BYTES
            for k in (
                "parameters",
                "buffers",
                "gradients",
                "optimizer_states",
                "activations",
                "model_states",
                "total",
            )
        },
        "activations": MapOf(OneOf((BYTES, TEXT, Bool())), null=True),
        "checkpointing": _obj({"policy": TEXT, "blocks": COUNT_OR_NULL}),
        "cuda": _obj({"stage_peak_allocated_bytes": MapOf(BYTES, null=True)}),
        "sharded": Bool(null=True),
    }
)
CLOCK_SECTION = _obj({"unix_at_origin": CLOCK})
CPU = _obj(
    {
        "threads": Num(0, MAX_WORLD, null=True),
        "processes_on_node": Num(0, MAX_WORLD, null=True),
        "cores": Num(0, MAX_WORLD, null=True),
        "other_cores": Num(0, MAX_WORLD, null=True),
        "other_cores_at_start": Num(0, MAX_WORLD, null=True),
        "other_cores_sampled": _obj(
            {"min": Num(0, MAX_WORLD), "max": Num(0, MAX_WORLD), "n": Int(0, 10**9)}
        ),
        "oversubscribed": Bool(null=True),
        "threads_source": TEXT,
        "note": TEXT,
        "load_change": TEXT,
    }
)
# Who placed the ranks (runtime.scheduler.Placement.record).
SCHEDULER_SECTION = _obj(
    {
        "name": TEXT,
        "job_id": TEXT,
        "nodes": TEXTS,
        "nnodes": Int(1, MAX_WORLD, null=True),
        "tasks": Int(1, MAX_WORLD, null=True),
        "tasks_per_node": Int(1, MAX_WORLD, null=True),
        "master_addr": TEXT,
        "master_port": Int(1, 65535, null=True),
    }
)
# How a scheduler stopped the run (train.preemption), and the requeue asked of SLURM.
PREEMPTION = _obj(
    {
        "signal": TEXT,
        "step": COUNT_OR_NULL,
        "checkpoint": TEXT,
        "requeue": _obj({"requeued": Bool(null=True), "command": TEXT, "why": TEXT}),
    }
)
_SHARE = _obj(
    {
        "tensors": COUNT_OR_NULL,
        "parameters": COUNT_OR_NULL,
        "lr": REAL,
        "newton_schulz": TEXT,
        "newton_schulz_steps": COUNT_OR_NULL,
    }
)
# The stop rule (train.target): the target, how the run ended, when the target was met.
TARGET_SECTION = _obj(
    {
        "target": TEXT,
        "metric": TEXT,
        "op": TEXT,
        "threshold": REAL,
        "eval_every_steps": COUNT_OR_NULL,
        "time_limit_s": SECONDS,
        "evaluations": COUNT_OR_NULL,
        "stopped_by": TEXT,
        "reached": Bool(null=True),
        "step": COUNT_OR_NULL,
        "epoch": COUNT_OR_NULL,
        "value": REAL,
        "train_time_s": SECONDS,
        "run_time_s": SECONDS,
        "process_time_s": SECONDS,
        "process_time_note": TEXT,
        "best": _obj({"value": REAL, "step": COUNT_OR_NULL, "train_time_s": SECONDS}),
    }
)
# Muon's and AdamW's shares of a muon run (train.optimizers.MuonWithAdamW.describe).
OPTIMIZER_SHARES = _obj({"name": TEXT, "muon": _SHARE, "adamw": _SHARE})
# What each rank of a multi-process run reports to rank 0 (train.ranks.rank_summary).
RANK_ROW = Obj(
    {
        "rank": RANK,
        "local_rank": Int(0, MAX_WORLD, null=True),
        "host": TEXT,
        "stages_s": STAGES_S,
        "samples": COUNT_OR_NULL,
        "steps": COUNT_OR_NULL,
        "train_time_s": SECONDS,
        "wall_time_s": SECONDS,
        "peak_memory_bytes": BYTES,
        "peak_memory_kind": TEXT,
        "peak_rss_bytes": BYTES,
        "device": TEXT,
        "comm": _obj({}),
        "clock": CLOCK_SECTION,
        "steady_state": STEADY,
        "memory": MEMORY,
        "cpu": CPU,
    },
    ("rank",),
)
ATTEMPT_ROW = Obj(
    {
        "attempt": Int(1, MAX_COUNT, null=True),
        "started_at": TEXT,
        "finished_at": TEXT,
        "from_step": COUNT_OR_NULL,
        "from_epoch": COUNT_OR_NULL,
        "epoch_step": COUNT_OR_NULL,
        "checkpoint": TEXT,
        "steps_redone": COUNT_OR_NULL,
        "ended": TEXT,
        "by": TEXT,
    }
)

SUMMARY = Obj(
    {
        "schema_version": Int(0, 10**6, null=True),
        "status": Text(),
        "error": TEXT,
        "launch_error": TEXT,
        **dict.fromkeys(
            (
                "workload",
                "model",
                "device",
                "device_name",
                "precision",
                "loader",
                "strategy",
                "task",
                "timing_mode",
                "workload_description",
                "started_at",
                "finished_at",
                "peak_memory_kind",
                "mfu_note",
                "after_wall_not_timed",
            ),
            TEXT,
        ),
        **dict.fromkeys(
            (
                "batch_size",
                "local_batch_size",
                "num_parameters",
                "train_samples",
                "steps",
                "samples",
                "skipped_steps",
            ),
            COUNT_OR_NULL,
        ),
        **dict.fromkeys(
            ("peak_rss_bytes", "peak_memory_bytes", "peak_memory_bytes_max_rank"), BYTES
        ),
        "num_workers": OneOf((Int(0, MAX_WORLD), Text()), null=True),
        "data_only": Bool(null=True),
        "world_size": Int(1, MAX_WORLD, null=True),
        "rank": Int(0, MAX_WORLD, null=True),
        "lr": REAL,
        "clock": CLOCK_SECTION,
        "process": _obj({"startup_s": SECONDS, "time_s": SECONDS, "runs_before": COUNT_OR_NULL}),
        "parallel": _obj(
            {
                "strategy": TEXT,
                "world_size": Int(1, MAX_WORLD, null=True),
                "backend": TEXT,
                "comm_stage": Bool(null=True),
                "comm_note": TEXT,
            }
        ),
        "gradients": _obj({"tensor_bytes": ListOf(Int()), "unit_bytes": ListOf(Int())}),
        "scheduler": SCHEDULER_SECTION,
        "preemption": PREEMPTION,
        "optimizer": OPTIMIZER_SHARES,
        "target": TARGET_SECTION,
        "workload_info": _obj(
            {"trainable_parameters": COUNT_OR_NULL, "total_parameters": COUNT_OR_NULL}
        ),
        "wall_time_s": SECONDS,
        "train_time_s": SECONDS,
        "stages_s": STAGES_S,
        "samples_per_s": RATE,
        "tokens_per_s": RATE,
        "epochs": ListOf(EPOCH_ROW, null=True),
        "first_losses": ListOf(REAL, null=True),
        "test_loss": REAL,
        "test_accuracy": FRACTION,
        "test_metrics": _obj(
            {
                "loss": REAL,
                "accuracy": FRACTION,
                "perplexity": REAL,
                "mse": REAL,
                "mae": REAL,
                "r2": REAL,
                "samples": COUNT_OR_NULL,
            }
        ),
        "per_class_accuracy": MapOf(FRACTION, null=True),
        "comm": _obj({"hook_inflight_s": SECONDS}),
        "steady_state": STEADY,
        "compile": _obj({}),
        "memory": MEMORY,
        "mfu": Num(0.0, 1e6, null=True),
        "flops_per_sample": RATE,
        "peak_flops_per_device": RATE,
        "after_wall_s": MapOf(SECONDS, null=True),
        "weights": _obj({"file": TEXT, "bytes": BYTES, "tensor_bytes": BYTES}),
        "system": _obj(
            {
                "samples": COUNT_OR_NULL,
                "interval_s": SECONDS,
                "cpu_percent_mean": Num(0.0, 1e8, null=True),
                "rss_max_bytes": BYTES,
            }
        ),
        "cpu": CPU,
        "ranks": ListOf(RANK_ROW, max_items=MAX_WORLD, null=True),
        "stage_spread": MapOf(
            _obj(
                {
                    "min": SIGNED_SECONDS,
                    "mean": SIGNED_SECONDS,
                    "max": SIGNED_SECONDS,
                    "max_rank": Int(0, MAX_WORLD, null=True),
                },
                null=False,
            ),
            null=True,
        ),
        "attempts": ListOf(ATTEMPT_ROW, null=True),
        "notes": TEXTS,
        "tracking": _obj({}),
    },
    ("status",),
    name="a run summary (an object)",
)
"""summary.json (:class:`~trainscope.records.run_dir.RunWriter`); ``status`` required."""


# ---------------------------------------------------------------------------------------
# A checkpoint: COMPLETE.json (the manifest) and trainer.json (the trainer state)
# ---------------------------------------------------------------------------------------

CHECKPOINT_FORMAT = 1
MANIFEST = Obj(
    {
        "format": Int(CHECKPOINT_FORMAT, CHECKPOINT_FORMAT),
        "step": COUNT,
        "files": MapOf(
            Obj({"bytes": COUNT, "sha256": Text()}, ("bytes", "sha256")), keys=r"[^/\\\x00]+"
        ),
    },
    ("format", "files"),
    name="a checkpoint manifest (an object)",
)
"""A checkpoint's COMPLETE.json: every file's size and SHA-256 (train.checkpoint)."""

_WORD = Int(0, (1 << 32) - 1)


@dataclass(frozen=True)
class _MersenneState(Spec):
    """Python's Mersenne Twister state: 624 words, then the position in them (0..624)."""

    expect = "a list of 624 integers in 0..2**32-1 and a position in 0..624"  # type: ignore[assignment]

    def _fits(self, value: Any, at: str, dropped: Any) -> Any:
        words = ListOf(_WORD, min_items=625, max_items=625).fits(value, at, None)
        Int(0, 624).fits(words[-1], f"{at}[624]", None)
        return words


# What random.setstate and numpy's set_state accept back (train.checkpoint._rng_split).
RNG = Obj(
    {
        "python": Tuple((Int(2, 3), _MersenneState(), REAL)),
        "numpy": Tuple(
            (
                Text(choices=("MT19937",)),
                ListOf(_WORD, min_items=624, max_items=624),
                Int(0, 624),
                Int(0, 1),
                Num(),
            )
        ),
    },
    ("python", "numpy"),
)
EPOCH_PROGRESS = _obj(
    {
        "stage_s": MapOf(Num(-MAX_SECONDS, MAX_SECONDS)),
        "samples": COUNT,
        "loss_sum": Num(),
        "loss_samples": COUNT,
        "elapsed_s": Num(0.0, MAX_SECONDS),
        "loader_start_s": Num(0.0, MAX_SECONDS),
        "t_start": CLOCK,
        "paused_s": Num(0.0, MAX_SECONDS),
    }
)
# A Precision's state (trainscope.techniques.precision: skipped steps, fp16's GradScaler) and an
# LR scheduler's (torch's LambdaLR), as load_state_dict takes them back.
PRECISION_STATE = _obj(
    {
        "skipped_steps": COUNT,
        "scaler": _obj(
            {
                "scale": Num(0.0, MAX_REAL),
                "growth_factor": Num(0.0, MAX_REAL),
                "backoff_factor": Num(0.0, MAX_REAL),
                "growth_interval": COUNT,
                "_growth_tracker": COUNT,
            }
        ),
    }
)
SCHEDULER_STATE = _obj(
    {
        "base_lrs": ListOf(Num()),
        "last_epoch": Int(-1, MAX_COUNT),
        "_step_count": COUNT,
        "_last_lr": ListOf(Num()),
        "lr_lambdas": ListOf(Obj(null=True)),
    }
)
# What the run had recorded by the checkpoint: a resume goes on from it (train.resume).
RUN_STATE = _obj(
    {
        "config": _obj({}),
        "world_size": Int(1, MAX_WORLD, null=True),
        "device_type": TEXT,
        "data": _obj({"samples": COUNT_OR_NULL, "sha256": TEXT}),
        "attempt": Int(1, MAX_COUNT, null=True),
        "stages": MapOf(Num(-MAX_SECONDS, MAX_SECONDS), null=True),
        "samples": COUNT,
        "steps": COUNT,
        "train_time": Num(0.0, MAX_SECONDS),
        "epochs": ListOf(EPOCH_ROW, null=True),
        "first_losses": ListOf(REAL, null=True),
        "epoch_progress": EPOCH_PROGRESS,
        "stop_rule": _obj(
            {
                "evaluations": COUNT,
                "best_value": REAL,
                "best_step": COUNT_OR_NULL,
                "best_train_time_s": SECONDS,
            }
        ),
        "wall_s": SECONDS,
    }
)
TRAINER_STATE = Obj(
    {
        "format": Int(CHECKPOINT_FORMAT, CHECKPOINT_FORMAT),
        "step": COUNT,
        "epoch": COUNT,
        "epoch_step": COUNT,
        "optimizer": Obj(
            {
                "param_groups": ListOf(Obj({"params": ListOf(COUNT)}, ("params",)), min_items=1),
                "scalars": MapOf(MapOf(), keys=r"\d{1,9}", null=True),
            },
            ("param_groups",),
        ),
        "precision": PRECISION_STATE,
        "scheduler": SCHEDULER_STATE,
        "rng": RNG,
        "run": RUN_STATE,
        "aliases": _obj({"model": MapOf(Text(), null=True), "optimizer": MapOf(Text(), null=True)}),
    },
    ("format", "step", "epoch", "optimizer", "rng"),
    name="a trainer state (an object)",
)
"""A checkpoint's trainer.json: step, epoch, optimizer scalars, RNG states, the run so far."""


# ---------------------------------------------------------------------------------------
# Studies: study.json, and the α–β cost model a collectives sweep keeps in it
# ---------------------------------------------------------------------------------------

FIT = Obj(
    {
        "op": TEXT,
        "alpha_s": Num(0.0, 1e3),
        "beta_s_per_byte": Num(0.0, 1.0),
        "world_size": Int(2, MAX_WORLD),
        "points": Int(0, 10**9),
        "max_rel_error": Num(0.0, MAX_REAL),
        "algorithm": TEXT,
        "source": Text(choices=("fitted", "given"), null=True),
        "bandwidth_GBps": RATE,
    },
    ("alpha_s", "beta_s_per_byte", "world_size"),
    name="an α–β fit (an object)",
)
"""One op's fit (collectives.cost_model.Fit.to_dict)."""
COST_MODEL = _obj(
    {
        "source": TEXT,
        "world_size": Int(1, MAX_WORLD, null=True),
        "backend": TEXT,
        "fits": MapOf(FIT),
        "notes": TEXTS,
    }
)
"""The cost model a collectives sweep saves, and a strategies study keeps in its plan."""
PLANNED_RUN = Obj(
    {
        "config": Text(),
        "repeat": Int(0, 10**6),
        "group": Text(),
        "labels": Obj(),
        "overrides": Obj(),
        "applicable": Bool(),
        "reason": TEXT,
    },
    ("config", "repeat"),
)
STUDY = Obj(
    {
        "schema_version": Int(0, 10**6, null=True),
        "kind": Text(),
        "status": TEXT,
        "options": _obj(
            {
                "repeats": Int(0, 10**6, null=True),
                "nproc": Int(1, MAX_WORLD, null=True),
                "world_size": Int(1, MAX_WORLD, null=True),
                "cost_model": COST_MODEL,
            }
        ),
        "base_config": _obj({}),
        "runs": ListOf(PLANNED_RUN),
        "failures": MapOf(null=True),
        "remeasure": _obj(
            {
                "bound": _obj({"attempts": Int(0, 100), "seconds": Num(0, 1e9)}),
                "attempts": MapOf(ListOf(_obj({})), null=True),
                "still_loaded": TEXTS,
                "out_of_time": Bool(null=True),
            }
        ),
        "argv": TEXTS,
        "cost_model": COST_MODEL,
    },
    ("kind",),
    name="a study record (an object)",
    vital=("runs",),
)
"""study.json of any study kind (records.study_dir, collectives.record)."""
