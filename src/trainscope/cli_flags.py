"""The flags of ``trainscope run`` (and of every study): each maps to one config key.

Kept apart from :mod:`trainscope.cli` so the parser module stays short; like it, this
module must not import torch.
"""

from __future__ import annotations

import argparse
from typing import Any

from trainscope import registry
from trainscope.config import BUILTIN_WORKLOADS  # torch-free
from trainscope.errors import ConfigError


def _workers(text: str) -> int | str:
    """--num-workers, --threads: a count or the word auto."""
    if text == "auto":
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer or auto, got {text!r}") from None


# CLI flag -> (dotted config key, argparse keyword arguments). Defaults are SUPPRESSed so
# that only the flags a user typed override the YAML file.
RUN_FLAGS: dict[str, tuple[str, dict[str, Any]]] = {
    "--workload": (
        "workload.name",
        {
            "metavar": "NAME",
            "help": " | ".join(BUILTIN_WORKLOADS) + " | pkg.module:factory (default digits)",
        },
    ),
    "--data-dir": (
        "workload.data_dir",
        {"metavar": "DIR", "help": "local data folder (mnist: the four IDX files)"},
    ),
    "--download": (
        "workload.download",
        {
            "action": argparse.BooleanOptionalAction,
            "help": "allow downloading missing data (default on)",
        },
    ),
    "--augment": (
        "workload.augment",
        {
            "action": argparse.BooleanOptionalAction,
            "help": "random-affine augmentation of training images",
        },
    ),
    "--synthetic-samples": ("workload.synthetic_samples", {"type": int, "metavar": "N"}),
    "--synthetic-shape": (
        "workload.synthetic_shape",
        {"type": int, "nargs": 3, "metavar": ("C", "H", "W")},
    ),
    "--num-classes": (
        "workload.num_classes",
        {"type": int, "metavar": "N", "help": "synthetic: number of classes"},
    ),
    # Workload options (workload.options.*): each workload checks the ones it knows.
    "--preset": (
        "workload.options.preset",
        {"metavar": "NAME", "help": "gpt-char: tiny | shakespeare (6 layers x 384, block 256)"},
    ),
    "--n-layer": ("workload.options.n_layer", {"type": int, "metavar": "N", "help": "gpt-char"}),
    "--n-head": ("workload.options.n_head", {"type": int, "metavar": "N", "help": "gpt-char"}),
    "--n-embd": ("workload.options.n_embd", {"type": int, "metavar": "N", "help": "gpt-char"}),
    "--block-size": (
        "workload.options.block_size",
        {"type": int, "metavar": "T", "help": "gpt-char: context length"},
    ),
    "--dropout": ("workload.options.dropout", {"type": float, "metavar": "P", "help": "gpt-char"}),
    "--model": ("workload.options.model", {"metavar": "NAME", "help": "text-cls: bert | roberta"}),
    "--model-size": (
        "workload.options.size",
        {"metavar": "SIZE", "help": "text-cls: tiny | mini | small | base (random weights)"},
    ),
    "--pretrained": (
        "workload.options.pretrained",
        {
            "metavar": "NAME",
            "help": "text-cls: a hub model (e.g. bert-base-cased; downloaded once, then "
            "cached) or a local folder in Hugging Face layout (offline)",
        },
    ),
    "--task": ("workload.options.task", {"metavar": "NAME", "help": "text-cls: SST-2 | RTE"}),
    "--max-length": (
        "workload.options.max_length",
        {"type": int, "metavar": "N", "help": "text-cls: truncate to N tokens"},
    ),
    "--lora-r": (
        "workload.options.lora_r",
        {"type": int, "metavar": "R", "help": "text-cls: LoRA rank (0: full fine-tuning)"},
    ),
    "--lora-alpha": ("workload.options.lora_alpha", {"type": float, "metavar": "A"}),
    "--lora-targets": (
        "workload.options.lora_targets",
        {
            "type": lambda text: [name for name in text.split(",") if name],
            "metavar": "LIST",
            "help": "text-cls: modules LoRA adapts (default query,value)",
        },
    ),
    "--batch-size": (
        "data.batch_size",
        {"type": int, "metavar": "N", "help": "samples per step (default 32)"},
    ),
    "--num-workers": (
        "data.num_workers",
        {
            "type": _workers,
            "metavar": "N|auto",
            "help": "DataLoader workers (default 0); auto measures and picks (cached)",
        },
    ),
    "--loader": (
        "data.loader",
        {"metavar": "KIND", "help": "torch (DataLoader, default) | fast (tensors on the device)"},
    ),
    "--pin-memory": ("data.pin_memory", {"action": argparse.BooleanOptionalAction}),
    "--persistent-workers": ("data.persistent_workers", {"action": argparse.BooleanOptionalAction}),
    "--prefetch-factor": ("data.prefetch_factor", {"type": int, "metavar": "N"}),
    "--shuffle-seed": ("data.shuffle_seed", {"type": int, "metavar": "N"}),
    "--drop-last": ("data.drop_last", {"action": argparse.BooleanOptionalAction}),
    "--epochs": ("train.epochs", {"type": int, "metavar": "N", "help": "default 30"}),
    "--max-steps-per-epoch": ("train.max_steps_per_epoch", {"type": int, "metavar": "N"}),
    "--optimizer": (
        "train.optimizer",
        {"metavar": "NAME", "help": "sgd | adam | adamw (default sgd)"},
    ),
    "--lr": ("train.lr", {"type": float, "metavar": "LR", "help": "learning rate (default 0.05)"}),
    "--momentum": ("train.momentum", {"type": float, "metavar": "M"}),
    "--weight-decay": ("train.weight_decay", {"type": float, "metavar": "WD"}),
    "--betas": (
        "train.betas",
        {
            "type": lambda text: [float(b) for b in text.split(",")],
            "metavar": "B1,B2",
            "help": "Adam/AdamW betas (default 0.9,0.999)",
        },
    ),
    "--schedule": (
        "train.schedule",
        {
            "metavar": "NAME",
            "help": "lr schedule: constant (default) | cosine | linear | one-cycle",
        },
    ),
    "--warmup-steps": (
        "train.warmup_steps",
        {"type": int, "metavar": "N", "help": "linear lr warm-up over the first N steps"},
    ),
    "--min-lr-ratio": (
        "train.min_lr_ratio",
        {"type": float, "metavar": "R", "help": "cosine/linear decay ends at R x lr (default 0)"},
    ),
    "--grad-clip": (
        "train.grad_clip",
        {"type": float, "metavar": "NORM", "help": "clip the gradients' global norm (0: off)"},
    ),
    "--seed": ("train.seed", {"type": int, "metavar": "N", "help": "model/initialisation seed"}),
    "--eval-every": (
        "train.eval_every",
        {"type": int, "metavar": "N", "help": "validate every N epochs"},
    ),
    "--data-only": (
        "train.data_only",
        {"action": "store_true", "help": "iterate the training batches only (no model)"},
    ),
    "--log-every": (
        "train.log_every",
        {"type": int, "metavar": "N", "help": "read timings and losses every N steps"},
    ),
    "--device": ("runtime.device", {"metavar": "DEV", "help": "auto | cpu | cuda | cuda:N"}),
    "--threads": (
        "runtime.threads",
        {
            "type": _workers,
            "metavar": "N|auto",
            "help": "torch intra-op threads per process (default auto: OMP_NUM_THREADS if "
            "set, else the usable cores / the run's processes on this machine); in a "
            "study, the core budget every configuration shares: threads x processes",
        },
    ),
    "--precision": ("runtime.precision", {"metavar": "P", "help": "fp32 | tf32 | fp16 | bf16"}),
    "--checkpointing": (
        "runtime.checkpointing",
        {
            "metavar": "POLICY",
            "help": "activation checkpointing of the model's blocks: none (default) | full | "
            "every-K | selective",
        },
    ),
    "--compile": (
        "runtime.compile",
        {
            "action": argparse.BooleanOptionalAction,
            "help": "torch.compile the model; compile time is its own stage (default off)",
        },
    ),
    "--timing": (
        "runtime.timing",
        {"metavar": "MODE", "help": "auto (events on GPU) | exact (sync per stage)"},
    ),
    "--system-interval": (
        "runtime.system_interval_s",
        {"type": float, "metavar": "S", "help": "seconds between system samples"},
    ),
    "--timing-warmup": (
        "runtime.timing_warmup_steps",
        {
            "type": int,
            "metavar": "K",
            "help": "first K steps reported apart from the steady state (default 5)",
        },
    ),
    "--track": (
        "runtime.track",
        {
            "type": lambda text: [name for name in text.split(",") if name],
            "metavar": "SINKS",
            "help": "also log to wandb and/or tensorboard (comma-separated; default none)",
        },
    ),
    "--checkpoint-every": (
        "train.checkpoint_every",
        {"type": int, "metavar": "N", "help": "write a checkpoint every N steps (default off)"},
    ),
    "--checkpoint-every-epoch": (
        "train.checkpoint_every_epoch",
        {"action": "store_true", "help": "write a checkpoint at the end of every epoch"},
    ),
    "--keep-checkpoints": (
        "train.keep_checkpoints",
        {"type": int, "metavar": "K", "help": "complete checkpoints kept (default 2)"},
    ),
    "--save-weights": (
        "train.save_weights",
        {"action": argparse.BooleanOptionalAction, "help": "write model.safetensors (default on)"},
    ),
    "--strategy": (
        "dist.strategy",
        {
            "metavar": "NAME",
            # Read when the parser is built: every registered strategy (trainscope.registry).
            "help": lambda: " | ".join(registry.strategy_names()) + " (default single)",
        },
    ),
    "--nproc": (
        "dist.nproc",
        {"type": int, "metavar": "N", "help": "processes per node, launched by torchrun"},
    ),
    "--nnodes": ("dist.nnodes", {"type": int, "metavar": "N", "help": "machines (default 1)"}),
    "--node-rank": ("dist.node_rank", {"type": int, "metavar": "R", "help": "this machine"}),
    "--master-addr": ("dist.master_addr", {"metavar": "HOST", "help": "node 0's address"}),
    "--master-port": ("dist.master_port", {"type": int, "metavar": "PORT"}),
    "--rdzv-endpoint": (
        "dist.rdzv_endpoint",
        {"metavar": "HOST:PORT", "help": "c10d rendezvous instead of master addr/port"},
    ),
    "--backend": ("dist.backend", {"metavar": "NAME", "help": "auto | nccl | gloo"}),
    "--scale-lr": (
        "dist.scale_lr",
        {"action": argparse.BooleanOptionalAction, "help": "lr x world size (linear scaling)"},
    ),
    "--bucket-mb": (
        "dist.bucket_mb",
        {
            "type": float,
            "metavar": "MB",
            "help": "allreduce: flatten gradients into buckets of at most MB MiB, one "
            "all_reduce per bucket (default: one per tensor)",
        },
    ),
    "--stall-timeout": (
        "dist.stall_timeout_s",
        {
            "type": float,
            "metavar": "S",
            "help": "stop a multi-process run when no rank progressed for S seconds, naming "
            "the ranks behind (default 60)",
        },
    ),
    "--max-restarts": (
        "dist.max_restarts",
        {
            "type": int,
            "metavar": "K",
            "help": "torchrun restarts every rank up to K times after one fails; they resume "
            "from the last checkpoint (default 0)",
        },
    ),
    "--timeout": (
        "dist.timeout_s",
        {"type": float, "metavar": "S", "help": "collective timeout in seconds (default 300)"},
    ),
    "--out": ("out", {"metavar": "DIR", "help": "run directory (default runs/<workload>-<time>)"}),
    "--overwrite": (
        "overwrite",
        {"action": "store_true", "help": "replace an existing run directory"},
    ),
}


# The groups `run --help` shows the flags in, by the config key they set (first match).
FLAG_GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("output and checkpoints", ("out", "overwrite", "train.save_weights", "train.checkpoint",
                                "train.keep_checkpoints")),
    ("workload", ("workload.",)),
    ("data pipeline", ("data.",)),
    ("precision and memory", ("runtime.precision", "runtime.checkpointing", "runtime.compile")),
    ("training", ("train.",)),
    ("parallel (strategies, torchrun, machines)", ("dist.",)),
    ("device and measurement", ("runtime.",)),
)  # fmt: skip


def flag_group(dest: str) -> str:
    """The ``run --help`` group of the flag that sets config key ``dest``."""
    for title, prefixes in FLAG_GROUPS:
        if any(dest == p or dest.startswith(p) for p in prefixes):
            return title
    return "other"


def refuse_what_the_study_sets(study: str, overrides: dict[str, Any]) -> None:
    """A run flag for a key the study sets itself is an error, never silently dropped."""
    # Each study's registry entry names the run settings it sets per configuration, and
    # the study flag to use instead: a run flag for one of them would be silently lost.
    for key, instead in registry.STUDIES[study].sets.items():
        if key in overrides:
            flag = next((f for f, (dest, _) in RUN_FLAGS.items() if dest == key), key)
            raise ConfigError(f"study {study} sets {flag} for each of its runs; use {instead}")
