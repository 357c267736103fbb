"""``trainscope estimate-memory``: the subcommand's flags and what it does with them.

``trainscope.cli`` adds it with :func:`add_parser` and calls :func:`main`. Importing this
module imports no torch: the named-architecture and ``--params`` paths never do.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any

from trainscope.config import CHECKPOINTING_HELP, WorkloadConfig, checkpointing_policy
from trainscope.errors import ConfigError
from trainscope.estimate import archs
from trainscope.estimate.core import Setup, estimate
from trainscope.estimate.states import OPTIMIZERS, PRECISION_HELP, PRECISIONS

HELP = "predict per-device training memory under DDP / ZeRO-1/2/3 (and --measure it)"
DESCRIPTION = (
    "Per-device bytes of weights, gradients, optimizer states, saved activations and stated "
    "allowances for communication buffers and temporaries, under DDP, ZeRO-1, ZeRO-2 and "
    "ZeRO-3/FSDP, for a named architecture, a workload config, or a parameter count and "
    "shape. --measure trains 3 steps of a workload on this device and prints the memory "
    "meter's counts beside the estimate. See docs/memory.md."
)

# Workload flags: flag -> (option key in workload.options, type); text-cls / gpt-char.
WORKLOAD_OPTIONS: dict[str, tuple[str, Any, str]] = {
    "--preset": ("preset", str, "gpt-char: tiny | cpu | shakespeare"),
    "--n-layer": ("n_layer", int, "gpt-char: blocks"),
    "--n-head": ("n_head", int, "gpt-char: heads"),
    "--n-embd": ("n_embd", int, "gpt-char: width"),
    "--block-size": ("block_size", int, "gpt-char: context (every window is this long)"),
    "--model": ("model", str, "text-cls: bert | roberta"),
    "--model-size": ("size", str, "text-cls: tiny | mini | small | base"),
    "--max-length": ("max_length", int, "text-cls: longest sequence after padding"),
    "--lora-r": ("lora_r", int, "text-cls: LoRA rank (0: full fine-tuning)"),
    "--task": ("task", str, "text-cls: GLUE task (SST-2, RTE)"),
}


def _count(text: str) -> int:
    """'7.5e9' or '1500000000' -> an integer count."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value) or value != int(value):
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}")
    return int(value)


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``estimate-memory`` to a subparsers object; returns its parser."""
    p = subparsers.add_parser("estimate-memory", help=HELP, description=DESCRIPTION)
    model = p.add_argument_group("the model (one of)")
    model.add_argument(
        "--arch", metavar="NAME", help="named architecture: " + ", ".join(archs.NAMED)
    )
    model.add_argument(
        "--workload",
        metavar="NAME",
        help="a workload as `trainscope run` builds it (digits, mnist, synthetic, gpt-char, "
        "text-cls, pkg.module:factory); reads its data",
    )
    model.add_argument("--params", type=_count, metavar="N", help="parameter count, e.g. 7.5e9")
    model.add_argument("--layers", type=int, metavar="L", help="with --params: blocks")
    model.add_argument("--hidden", type=int, metavar="H", help="with --params: width")
    model.add_argument("--heads", type=int, metavar="A", help="with --params: heads (H/64)")
    model.add_argument("--vocab", type=int, metavar="V", help="with --params: vocabulary (50257)")
    wl = p.add_argument_group("workload options (with --workload)")
    wl.add_argument("--data-dir", metavar="DIR", help="the workload's data folder")
    wl.add_argument(
        "--download",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="allow downloading missing data (default on)",
    )
    for flag, (key, kind, text) in WORKLOAD_OPTIONS.items():
        metavar = "N" if kind is int else "NAME"
        wl.add_argument(flag, dest=f"opt_{key}", type=kind, metavar=metavar, help=text)
    wl.add_argument(
        "--synthetic-shape", type=int, nargs=3, metavar=("C", "H", "W"), help="synthetic: sample"
    )
    wl.add_argument("--num-classes", type=int, metavar="N", help="synthetic: classes")
    tr = p.add_argument_group("training")
    tr.add_argument("--world-size", type=int, default=1, metavar="N", help="devices (default 1)")
    tr.add_argument(
        "--precision",
        default="fp32",
        choices=PRECISIONS,
        metavar="P",
        help=PRECISION_HELP + " (default fp32)",
    )
    tr.add_argument(
        "--optimizer",
        default="adam",
        choices=OPTIMIZERS,
        metavar="O",
        help="sgd (with momentum) | adam | adamw (default adam)",
    )
    tr.add_argument(
        "--batch-size", type=int, default=8, metavar="B", help="micro-batch per device (default 8)"
    )
    tr.add_argument(
        "--seq-len",
        type=int,
        metavar="T",
        help="tokens per sequence (default the model's context: GPT-2 1024, BERT/RoBERTa 512, "
        "text-cls max-length; gpt-char trains at --block-size)",
    )
    tr.add_argument(
        "--dropout",
        type=float,
        metavar="P",
        help="dropout of gpt-char or the model named (GPT-2: 0.1)",
    )
    tr.add_argument("--checkpointing", default="none", metavar="POLICY", help=CHECKPOINTING_HELP)
    _add_split_args(p)
    tr.add_argument(
        "--device",
        default="auto",
        choices=("auto", "cpu", "cuda"),
        help="what the estimate assumes (attention kernel, dropout masks): auto is this "
        "machine's device for --workload, cuda otherwise",
    )
    out = p.add_argument_group("output")
    out.add_argument(
        "--states-only",
        action="store_true",
        help="model states only (weights, gradients, optimizer states)",
    )
    out.add_argument("--json", action="store_true", help="print JSON instead of a table")
    out.add_argument(
        "--measure",
        action="store_true",
        help="--workload: train 3 steps here and print measured beside estimated",
    )
    return p


def _workload_config(args: argparse.Namespace) -> WorkloadConfig:
    options = {
        key: getattr(args, f"opt_{key}")
        for key, _, _ in WORKLOAD_OPTIONS.values()
        if getattr(args, f"opt_{key}", None) is not None
    }
    if args.dropout is not None and args.workload == "gpt-char":
        options["dropout"] = args.dropout
    extra: dict[str, Any] = {}
    if args.synthetic_shape:
        extra["synthetic_shape"] = tuple(args.synthetic_shape)
    if args.num_classes is not None:
        extra["num_classes"] = args.num_classes
    return WorkloadConfig(
        name=args.workload,
        data_dir=args.data_dir,
        download=args.download,
        options=options,
        **extra,
    )


def _check_flags(args: argparse.Namespace) -> None:
    """One model source, and workload flags only with --workload: one line otherwise."""
    shape = [f for f in ("params", "layers", "hidden", "heads", "vocab") if getattr(args, f)]
    sources = [s for s in ("arch", "workload") if getattr(args, s)] + (["params"] if shape else [])
    if len(sources) != 1:
        raise ConfigError(
            "give one model: --arch NAME, --workload NAME, or --params N (with --layers, "
            "--hidden, --heads, --vocab)"
        )
    wl_flags = [f"--{k}" for k, _, _ in WORKLOAD_OPTIONS.values() if getattr(args, f"opt_{k}")]
    wl_flags += ["--data-dir"] if args.data_dir else []
    wl_flags += ["--synthetic-shape"] if args.synthetic_shape else []
    if wl_flags and not args.workload:
        raise ConfigError(f"{wl_flags[0]} is a workload option: it goes with --workload")
    if args.measure and not args.workload:
        raise ConfigError(
            "--measure trains a workload: give --workload (named architectures "
            "and --params are estimated, not built)"
        )
    if args.measure and args.states_only:
        raise ConfigError("--measure compares every component: drop --states-only")
    if args.dropout is not None and args.workload not in (None, "gpt-char"):
        raise ConfigError("--dropout applies to gpt-char, --arch and --params models")
    if args.workload == "gpt-char" and args.seq_len is not None:
        raise ConfigError(
            "gpt-char trains on windows of --block-size tokens: set that, not --seq-len"
        )
    checkpointing_policy(args.checkpointing)


def build_setup(args: argparse.Namespace) -> tuple[Setup, WorkloadConfig | None]:
    """The :class:`Setup` the flags describe (builds the workload for --workload)."""
    from trainscope.estimate.workload import load_workload

    _check_flags(args)
    common = {
        "world_size": args.world_size,
        "precision": args.precision,
        "optimizer": args.optimizer,
        "batch_size": args.batch_size,
        "checkpointing": args.checkpointing,
        "states_only": args.states_only,
    }
    device = "cuda" if args.device == "auto" else args.device
    if args.arch:
        arch = archs.named(args.arch)
        if args.dropout is not None:
            arch = archs.with_dropout(arch, args.dropout)
        return Setup(
            arch, seq_len=args.seq_len, device=device, source=f"--arch {arch.name}", **common
        ), None
    if not args.workload:
        arch = archs.custom(
            args.params,
            args.layers,
            args.hidden,
            args.heads,
            args.vocab,
            positions=args.seq_len or 1024,
            dropout=0.1 if args.dropout is None else args.dropout,
        )
        return Setup(arch, seq_len=args.seq_len, device=device, source="--params", **common), None
    wcfg = _workload_config(args)
    model = load_workload(wcfg)
    if args.device == "auto":
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    notes = tuple(model.notes)
    arch, states_only = model.arch, args.states_only
    if arch is None:  # a user's own model: exact states, no activation plan
        arch, states_only = archs.Arch(wcfg.name, "gpt", params=model.counts.parameters), True
    if model.seq_len and args.seq_len is None and arch.kind in ("bert", "roberta"):
        notes += (
            f"text-cls pads each batch to its longest sequence (at most max-length "
            f"{model.seq_len}): estimated at {model.seq_len}, an upper bound; "
            "--seq-len sets the length",
        )
    common["states_only"] = states_only
    setup = Setup(
        arch,
        model.counts,
        seq_len=args.seq_len or model.seq_len,
        device=device,
        source=f"--workload {wcfg.name}",
        notes=notes,
        **common,
    )
    return setup, wcfg


def main(args: argparse.Namespace) -> int:
    """Run ``trainscope estimate-memory``; returns the exit status (0)."""
    from trainscope.estimate.render import compare_table, print_estimate
    from trainscope.render.console import make_console, print_table

    setup, wcfg = build_setup(args)
    est = estimate(setup)
    result: dict[str, Any] = est.to_dict()
    rows = None
    if args.measure:
        rows, compared = _measure(setup, wcfg)
        result["measured"] = compared
    split = _split(args, est)
    if split:
        result["split"] = [r.to_dict() for r in split]
    if args.json:
        json.dump(result, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0

    console = make_console()
    print_estimate(est, console)
    if split:
        from trainscope.estimate.render import split_table

        print_table(console, split_table(split, args))
    if rows is not None:
        m = result["measured"]
        at = f"micro-batch {m['batch_size']}" + (f" x {m['seq_len']}" if m["seq_len"] else "")
        print_table(
            console,
            compare_table(
                rows,
                f"measured on {m['device']} ({at}, one device, "
                f"step 2 of {m['steps']}) vs estimated",
            ),
        )
    return 0


def _add_split_args(parser: argparse.ArgumentParser) -> None:
    """The flags of a split model's per-rank figures (pipeline, tensor parallelism)."""
    split = parser.add_argument_group("a split model (GPT architectures): memory per rank")
    split.add_argument("--pp-stages", type=int, metavar="S", help="pipeline stages")
    split.add_argument(
        "--microbatches", type=int, default=4, metavar="M", help="pipeline: per batch (default 4)"
    )
    split.add_argument(
        "--pp-schedule",
        default="1f1b",
        choices=("gpipe", "1f1b", "interleaved-1f1b"),
        help="default 1f1b",
    )
    split.add_argument("--tp-size", type=int, metavar="T", help="tensor-parallel ranks")
    split.add_argument(
        "--sequence-parallel", action="store_true", help="tp: the sequence split too"
    )


def _split(args: argparse.Namespace, est: Any) -> list[Any]:
    """Per-rank figures of a pipeline (--pp-stages) or tensor parallelism (--tp-size)."""
    from trainscope.estimate.split import pipeline_ranks, tp_rank

    if args.pp_stages is None and args.tp_size is None:
        if getattr(args, "sequence_parallel", False):
            raise ConfigError("--sequence-parallel goes with --tp-size")
        return []
    if args.pp_stages is not None and args.tp_size is not None:
        raise ConfigError("--pp-stages and --tp-size: give one (2D is not estimated yet)")
    setup = est.setup
    common = {"batch": setup.batch_size, "seq_len": est.seq_len, "precision": setup.precision,
              "optimizer": setup.optimizer, "device": setup.device}  # fmt: skip
    if args.pp_stages is not None:
        if args.pp_stages < 2 or args.microbatches < 1:
            raise ConfigError("--pp-stages must be at least 2, --microbatches at least 1")
        return pipeline_ranks(setup.arch, stages=args.pp_stages, microbatches=args.microbatches,
                              schedule=args.pp_schedule, **common)  # fmt: skip
    if args.tp_size < 2:
        raise ConfigError("--tp-size must be at least 2")
    sp = bool(getattr(args, "sequence_parallel", False))
    return [tp_rank(setup.arch, tp=args.tp_size, sequence_parallel=sp, **common)]


def _measure(setup: Setup, wcfg: WorkloadConfig | None) -> tuple[list[Any], dict[str, Any]]:
    """Run the measurement and compare it with a one-device estimate of the same step."""
    import dataclasses

    from trainscope.estimate.measure import STEPS, compare, measure
    from trainscope.estimate.render import rows_to_dict

    assert wcfg is not None
    m = measure(wcfg, setup)
    # The same step estimated: one device, and text-cls's padded length of that batch.
    same = dataclasses.replace(setup, world_size=1, seq_len=m.seq_len or setup.seq_len)
    rows = compare(estimate(same), m)
    return rows, {
        "device": m.device,
        "steps": STEPS,
        "batch_size": m.batch_size,
        "seq_len": None if setup.arch.kind == "lenet" else same.seq_len,
        "rows": rows_to_dict(rows),
        "note": "one device, the second step of the run; estimated for that step",
    }


__all__ = ["DESCRIPTION", "HELP", "add_parser", "build_setup", "main"]
