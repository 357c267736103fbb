"""The flags of ``trainscope run`` (and of every study): each maps to one config key.

Kept apart from :mod:`trainscope.cli` so the parser module stays short; like it, this
module must not import torch.
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from trainscope import registry
from trainscope.config import (  # torch-free
    BACKENDS,
    CHECKPOINTING_HELP,
    LOADERS,
    MUON_NS_DTYPES,
    MUON_ONLY,
    OPTIMIZER_IMPLS,
    OPTIMIZERS,
    PRECISIONS,
    SCHEDULES,
    SECTIONS,
    SINK_NAMES,
    TIMING_MODES,
)
from trainscope.errors import ConfigError


def _workers(text: str) -> int | str:
    """--num-workers, --threads: a count or the word auto."""
    if text == "auto":
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer or auto, got {text!r}") from None


def _names(text: str) -> list[str]:
    """--lora-targets, --track: comma-separated names (empty ones dropped)."""
    return [name for name in text.split(",") if name]


Flag = tuple[str, dict[str, Any]]
"""A flag's dotted config key and its argparse keyword arguments."""


def _given(**kwargs: Any) -> dict[str, Any]:
    """The keyword arguments that are not None (argparse gets only those)."""
    return {k: v for k, v in kwargs.items() if v is not None}


def _value(dest: str, metavar: str, help: Any = None, kind: Any = None) -> Flag:
    """A flag that takes a value, converted by ``kind`` (argparse's ``type``; None: text).
    ``help`` may be a function, called when the parser is built."""
    return dest, _given(type=kind, metavar=metavar, help=help)


def _int(dest: str, metavar: str, help: str | None = None) -> Flag:
    """A flag that takes a whole number."""
    return _value(dest, metavar, help, int)


def _float(dest: str, metavar: str, help: str | None = None) -> Flag:
    """A flag that takes a number."""
    return _value(dest, metavar, help, float)


def _on_off(dest: str, help: str | None = None) -> Flag:
    """``--x`` / ``--no-x``."""
    return dest, _given(action=argparse.BooleanOptionalAction, help=help)


_NO_DEFAULT = object()


def field_default(dest: str) -> Any:
    """The config field's own default for a flag's dotted key (``_NO_DEFAULT``: none)."""
    section, _, name = dest.partition(".")
    cls = SECTIONS.get(section)
    if cls is None or not name or "." in name:
        return _NO_DEFAULT
    for f in dataclasses.fields(cls):
        if f.name == name:
            if f.default is not dataclasses.MISSING:
                return f.default
            if f.default_factory is not dataclasses.MISSING:
                return f.default_factory()
    return _NO_DEFAULT


def flag_help(dest: str, kwargs: dict[str, Any]) -> str | None:
    """A flag's help as ``run --help`` shows it: its text (a list read from a registry
    now) and ``(default X)`` read from the config field, so help cannot restate a default
    the config has since changed. A field without a plain default (None: decided at run
    time, a list) says its default in words, if any."""
    value = field_default(dest)
    if value is _NO_DEFAULT or isinstance(value, (list, tuple, dict)):
        value = None
    return help_with_default(kwargs.get("help"), value)


def help_with_default(text: Any, value: Any) -> str | None:
    """``text`` (a function is called now) and ``(default X)`` for a default that is a
    value (None: decided at run time, said in words if at all): the one place a flag's
    help says its default, so it cannot restate one that has since changed."""
    text = text() if callable(text) else text
    if value is None or value is argparse.SUPPRESS:
        return text
    shown = ("on" if value else "off") if isinstance(value, bool) else str(value)
    return f"{text} (default {shown})" if text else f"default {shown}"


def _choice(dest: str, metavar: str, choices: tuple[str, ...], note: str = "") -> Flag:
    """A flag that takes one of the config's ``choices`` (its tuple: help cannot list a
    value the config no longer takes); ``note`` says more about some of them."""
    text = " | ".join(choices) + (f"; {note}" if note else "")
    return _value(dest, metavar, text)


def _switch(dest: str, help: str) -> Flag:
    """``--x`` alone: true when given."""
    return dest, {"action": "store_true", "help": help}


# CLI flag -> (dotted config key, argparse keyword arguments). Defaults are SUPPRESSed so
# that only the flags a user typed override the YAML file.
RUN_FLAGS: dict[str, Flag] = {
    "--workload": _value(
        "workload.name",
        "NAME",
        lambda: " | ".join(registry.WORKLOADS) + " | pkg.module:factory",
    ),
    "--data-dir": _value(
        "workload.data_dir", "DIR", "local data folder (mnist: the four IDX files)"
    ),
    "--download": _on_off("workload.download", "allow downloading missing data"),
    "--augment": _on_off("workload.augment", "random-affine augmentation of training images"),
    "--synthetic-samples": _int("workload.synthetic_samples", "N"),
    "--synthetic-shape": (
        "workload.synthetic_shape",
        {"type": int, "nargs": 3, "metavar": ("C", "H", "W")},
    ),
    "--num-classes": _int("workload.num_classes", "N", "synthetic: number of classes"),
    "--batch-size": _int("data.batch_size", "N", "samples per step"),
    "--num-workers": _value(
        "data.num_workers",
        "N|auto",
        "DataLoader workers; auto measures and picks (cached)",
        _workers,
    ),
    "--loader": _choice(
        "data.loader", "KIND", LOADERS, "fast: the tensors on the device, no DataLoader"
    ),
    "--pin-memory": _on_off("data.pin_memory"),
    "--persistent-workers": _on_off("data.persistent_workers"),
    "--prefetch-factor": _int("data.prefetch_factor", "N"),
    "--shuffle-seed": _int("data.shuffle_seed", "N"),
    "--drop-last": _on_off("data.drop_last"),
    "--epochs": _int("train.epochs", "N", "passes over the training set"),
    "--max-steps-per-epoch": _int("train.max_steps_per_epoch", "N"),
    "--optimizer": _choice(
        "train.optimizer",
        "NAME",
        OPTIMIZERS,
        "muon: Muon on the hidden matrices, AdamW on the rest",
    ),
    "--lr": _float("train.lr", "LR", "learning rate (muon: AdamW's)"),
    "--muon-lr": _float("train.muon_lr", "LR", "muon: Muon's learning rate (Keller Jordan's)"),
    "--muon-ns-dtype": _choice(
        "train.muon_ns_dtype",
        "DTYPE",
        MUON_NS_DTYPES,
        "muon's Newton-Schulz dtype (auto: fp32 on a CPU without bf16 units, else bf16)",
    ),
    "--muon-ns-steps": _int(
        "train.muon_ns_steps", "N", "muon: Newton-Schulz iterations per update"
    ),
    "--momentum": _float("train.momentum", "M"),
    "--weight-decay": _float("train.weight_decay", "WD"),
    "--betas": _value(
        "train.betas",
        "B1,B2",
        "Adam/AdamW betas (default 0.9,0.999)",
        lambda text: [float(b) for b in text.split(",")],
    ),
    "--optimizer-impl": _choice(
        "train.optimizer_impl",
        "IMPL",
        OPTIMIZER_IMPLS,
        "auto: torch's default; fused: one kernel per update",
    ),
    "--schedule": _choice("train.schedule", "NAME", SCHEDULES, "the learning rate's schedule"),
    "--warmup-steps": _int("train.warmup_steps", "N", "linear lr warm-up over the first N steps"),
    "--min-lr-ratio": _float("train.min_lr_ratio", "R", "cosine/linear decay ends at R x lr"),
    "--grad-clip": _float("train.grad_clip", "NORM", "clip the gradients' global norm (0: off)"),
    "--seed": _int("train.seed", "N", "model/initialisation seed"),
    "--eval-every": _int("train.eval_every", "N", "validate every N epochs"),
    "--eval-every-steps": _int(
        "train.eval_every_steps",
        "N",
        "also evaluate every N steps inside epochs (same fixed validation windows)",
    ),
    "--target": _value(
        "train.target",
        "METRIC<=X",
        "stop at the first evaluation that meets it, e.g. val_loss<=1.88 or "
        "test_accuracy>=0.98; the record says when (training and process time)",
    ),
    "--time-limit": _float(
        "train.time_limit_s", "S", "stop after S seconds of training (0: no limit)"
    ),
    "--data-only": _switch("train.data_only", "iterate the training batches only (no model)"),
    "--log-every": _int("train.log_every", "N", "read timings and losses every N steps"),
    "--device": _value("runtime.device", "DEV", "auto | cpu | cuda | cuda:N"),
    "--threads": _value(
        "runtime.threads",
        "N|auto",
        "torch intra-op threads per process (auto: OMP_NUM_THREADS if set, else the usable "
        "cores / the run's processes on this machine); in a study, the core budget "
        "every configuration shares: threads x processes",
        _workers,
    ),
    "--precision": _choice("runtime.precision", "P", PRECISIONS),
    "--checkpointing": _value(
        "runtime.checkpointing",
        "POLICY",
        f"activation checkpointing of the model's blocks: {CHECKPOINTING_HELP}",
    ),
    "--compile": _on_off(
        "runtime.compile", "torch.compile the model; compile time is its own stage"
    ),
    "--timing": _choice(
        "runtime.timing", "MODE", TIMING_MODES, "auto: CUDA events on a GPU; exact: sync per stage"
    ),
    "--system-interval": _float("runtime.system_interval_s", "S", "seconds between system samples"),
    "--timing-warmup": _int(
        "runtime.timing_warmup_steps",
        "K",
        "first K steps reported apart from the steady state",
    ),
    "--track": _value(
        "runtime.track",
        "SINKS",
        f"also log to these trackers (comma-separated: {', '.join(SINK_NAMES)}; default none)",
        _names,
    ),
    "--checkpoint-every": _int(
        "train.checkpoint_every", "N", "write a checkpoint every N steps (0: none)"
    ),
    "--checkpoint-every-epoch": _switch(
        "train.checkpoint_every_epoch", "write a checkpoint at the end of every epoch"
    ),
    "--keep-checkpoints": _int("train.keep_checkpoints", "K", "complete checkpoints kept"),
    "--save-weights": _on_off("train.save_weights", "write model.safetensors"),
    "--strategy": _value(
        "dist.strategy",
        "NAME",
        # Read when the parser is built: every registered strategy (trainscope.registry).
        lambda: " | ".join(registry.strategy_names()),
    ),
    "--nproc": _int("dist.nproc", "N", "processes per node, launched by torchrun"),
    "--nnodes": _int("dist.nnodes", "N", "machines"),
    "--node-rank": _int("dist.node_rank", "R", "this machine"),
    "--master-addr": _value("dist.master_addr", "HOST", "node 0's address"),
    "--master-port": _int("dist.master_port", "PORT"),
    "--rdzv-endpoint": _value(
        "dist.rdzv_endpoint", "HOST:PORT", "c10d rendezvous instead of master addr/port"
    ),
    "--backend": _choice("dist.backend", "NAME", BACKENDS, "auto: nccl on CUDA, gloo on a CPU"),
    "--requeue": _switch(
        "dist.requeue",
        "on SLURM's pre-timeout signal or a preemption: checkpoint, requeue the job, and "
        "resume when started again with the same --out",
    ),
    "--scale-lr": _on_off("dist.scale_lr", "lr x world size (linear scaling)"),
    "--stall-timeout": _float(
        "dist.stall_timeout_s",
        "S",
        "stop a multi-process run when no rank progressed for S seconds, naming the ranks behind",
    ),
    "--max-restarts": _int(
        "dist.max_restarts",
        "K",
        "torchrun restarts every rank up to K times after one fails; they resume from the "
        "last checkpoint",
    ),
    "--timeout": _float("dist.timeout_s", "S", "collective timeout in seconds"),
    "--out": _value("out", "DIR", "run directory (default runs/<workload>-<time>)"),
    "--overwrite": _switch("overwrite", "replace an existing run directory"),
}


def _option_flag(option: registry.StrategyOption) -> Flag:
    """A strategy option's flag, from its registry declaration; its help names the
    strategies that take it when ``run --help`` is shown."""

    def help() -> str:
        return option.help_text(registry.option_owners(option.key))

    if option.kind == "switch":
        return option.key, {"action": "store_true", "help": help}
    kind = {"mib": float, "choice": None}.get(option.kind, int)
    return _value(option.key, option.metavar, help, kind)


_READS = {"int": int, "float": float, "names": _names, "text": None}


def _workload_flags() -> dict[str, Flag]:
    """The registered workloads' option flags (``--n-layer``), each once; its help names
    the workloads that take it, with each one's words where they differ."""
    owners: dict[str, list[tuple[str, registry.WorkloadOption]]] = {}
    for entry in registry.WORKLOADS.values():
        for option in entry.flags:
            owners.setdefault(option.flag, []).append((entry.name, option))
    flags = {}
    for flag, taken in owners.items():
        first = taken[0][1]
        by_help: dict[str, list[str]] = {}  # workloads that say the same, named together
        for name, option in taken:
            by_help.setdefault(option.help, []).append(name)
        text = "; ".join(f"{', '.join(names)}: {words}" if words else ", ".join(names)
                         for words, names in by_help.items())  # fmt: skip
        flags[flag] = _value(f"workload.options.{first.key}", first.metavar, text,
                             _READS[first.reads])  # fmt: skip
    return flags


def run_flags() -> dict[str, Flag]:
    """Every flag of ``trainscope run``: :data:`RUN_FLAGS`, the registered workloads'
    option flags and the options the registered strategies take
    (:data:`trainscope.registry.OPTIONS`), in registration order."""
    options = {o.flag: _option_flag(o) for o in registry.OPTIONS.values()}
    return {**RUN_FLAGS, **_workload_flags(), **options}


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


def flag_of(key: str) -> str:
    """The run flag that sets config key ``key`` (the key itself where none does)."""
    return next((f for f, (dest, _) in run_flags().items() if dest == key), key)


def refuse_muon_flags_without_muon(cfg: Any, overrides: dict[str, Any]) -> None:
    """A Muon setting typed for a run whose optimizer is not muon is refused: the run would
    ignore it while its config.yaml records it. (A config file may carry one: a muon
    run's saved config rerun with another --optimizer, a recipe's.)"""
    if cfg.train.optimizer == "muon":
        return
    for name in MUON_ONLY:
        if f"train.{name}" in overrides:
            flag = flag_of(f"train.{name}")
            raise ConfigError(
                f"{flag} is a setting of --optimizer muon, and this run's optimizer is "
                f"{cfg.train.optimizer}: add --optimizer muon, or leave {flag} out"
            )


def refuse_what_the_study_sets(study: str, overrides: dict[str, Any]) -> None:
    """A run flag for a key the study sets itself is an error, never silently dropped."""
    # Each study's registry entry names the run settings it sets per configuration, and
    # the study flag to use instead: a run flag for one of them would be silently lost.
    for key, instead in registry.STUDIES[study].sets.items():
        if key in overrides:
            flag = flag_of(key)
            raise ConfigError(f"study {study} sets {flag} for each of its runs; use {instead}")
