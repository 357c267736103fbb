"""``trainscope collectives``: the six collectives checked on textbook examples and two
identities, then timed per message size (algbw, busbw, wrong elements), recorded as a
resumable study directory and reported.

The command starts ``--nproc`` processes through torchrun exactly as ``trainscope run
--nproc`` does (:func:`trainscope.launch.launcher.launch_command`); each runs this same command,
finds itself under torchrun and does its part (:mod:`trainscope.collectives.worker`).
Everything that can be refused (a bad size, op, count, backend, a folder that is not
trainscope's, another plan in ``--out``) is refused first, in one line, before any
process starts; a bad input makes no directory. Importing this module is torch-free
(``trainscope --help`` stays fast).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from trainscope.collectives import predict_cli
from trainscope.config import DistConfig
from trainscope.errors import ConfigError, DeviceError, Terminated, TrainscopeError
from trainscope.util.textsafe import terminal_text

# The collectives (trainscope.collectives.semantics.OPS; named here too: --help imports
# no torch. tests/collectives/test_cli.py checks that the two agree.)
OPS = ("all_reduce", "broadcast", "reduce", "all_gather", "reduce_scatter", "all_to_all")
MAX_REPEATS = 10_000
HELP = "the six collectives checked on examples, then timed per message size (busbw)"
DESCRIPTION = (
    "Start N processes (as `trainscope run --nproc N`), show what each collective does on "
    "textbook examples (before/after per rank, checked) and check reduce + broadcast = "
    "all_reduce and reduce_scatter + all_gather = all_reduce; then time every op at every "
    "message size: the slowest rank's time (median and spread over repeats), algbw, busbw "
    "(nccl-tests' factors) and wrong output elements. Recorded as a study directory "
    "(rerun with the same --out to resume) with a report (busbw-vs-size plot, tables) and "
    "the α–β (latency-bandwidth) fit of every op. With --predict no process starts: the "
    "model predicts each training strategy's gradient communication per step for a given "
    "link, world size and model (docs/collectives.md)."
)


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``collectives`` to the ``trainscope`` subparsers; returns its parser."""
    p = subparsers.add_parser("collectives", help=HELP, description=DESCRIPTION)
    p.add_argument("--nproc", type=int, default=2, metavar="N", help="processes (default 2)")
    p.add_argument(
        "--backend",
        choices=("auto", "gloo", "nccl"),
        default="auto",
        help="process-group backend (default auto: nccl with CUDA, else gloo)",
    )
    p.add_argument(
        "--sizes",
        default="1K:64M",
        metavar="SIZES",
        help="message sizes: LO:HI doubling, one size, or a list 1K,64K,1M; binary units "
        "(1K = 1024 bytes; default 1K:64M)",
    )
    p.add_argument(
        "--ops",
        default=",".join(OPS),
        metavar="LIST",
        help="collectives to time (default all six; the examples always show all)",
    )
    p.add_argument("--repeats", type=int, default=20, metavar="R", help="timed (default 20)")
    p.add_argument("--warmup", type=int, default=5, metavar="W", help="untimed first (5)")
    p.add_argument(
        "--out",
        metavar="DIR",
        help="study directory (default runs/studies/collectives-<time>); the same --out "
        "again resumes it",
    )
    p.add_argument(
        "--overwrite", action="store_true", help="replace what trainscope wrote in --out"
    )
    p.add_argument("--no-report", action="store_true", help="skip building the report")
    p.add_argument("--quiet", "-q", action="store_true", help="print errors only")
    nodes = p.add_argument_group("several machines (as `trainscope run`; node 0 records)")
    nodes.add_argument("--nnodes", type=int, default=1, metavar="N", help="machines (1)")
    nodes.add_argument("--node-rank", type=int, default=0, metavar="R", help="this machine")
    nodes.add_argument("--master-addr", default="127.0.0.1", metavar="HOST", help="node 0")
    nodes.add_argument("--master-port", type=int, default=None, metavar="PORT")
    predict_cli.add_flags(p)
    # Set by the launcher on its workers' command line: the directory is claimed already.
    p.add_argument("--launched", action="store_true", help=argparse.SUPPRESS)
    return p


def main(args: argparse.Namespace) -> int:
    """``trainscope collectives``: launch the processes, or be one of them."""
    from trainscope.runtime.dist import under_torchrun

    if args.predict:
        _no_sweep_flags(args)
        return predict_cli.main(args)
    _no_predict_flags(args)
    if under_torchrun():
        return _worker(args)
    return _launcher(args)


def _no_predict_flags(args: argparse.Namespace) -> None:
    """A flag of --predict given to a sweep does nothing there: refused, not ignored."""
    flags = (
        "world",
        "bandwidth",
        "latency",
        "interconnect",
        "fit",
        "model",
        "run",
        "backward_ms",
        "grad_dtype",
        "bucket_mb",
    )
    given = [f"--{f.replace('_', '-')}" for f in flags if getattr(args, f) is not None]
    given += ["--json"] * bool(args.json)
    if given:
        raise ConfigError(
            f"{', '.join(given)} only mean something with --predict (a sweep would ignore them)"
        )


# The sweep's flags and their defaults: given to --predict, which starts no process, they
# would do nothing (refused, not ignored).
SWEEP_DEFAULTS = {
    "nproc": 2,
    "backend": "auto",
    "sizes": "1K:64M",
    "ops": ",".join(OPS),
    "repeats": 20,
    "warmup": 5,
    "out": None,
    "overwrite": False,
    "no_report": False,
    "nnodes": 1,
    "node_rank": 0,
    "master_addr": "127.0.0.1",
    "master_port": None,
}


def _no_sweep_flags(args: argparse.Namespace) -> None:
    """A sweep flag given with --predict does nothing there: refused, not ignored."""
    given = [f"--{k.replace('_', '-')}" for k, v in SWEEP_DEFAULTS.items() if getattr(args, k) != v]
    if given:
        raise ConfigError(
            f"{', '.join(given)} belong to the sweep; --predict starts no process (drop them)"
        )


def _names(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    bad = [n for n in names if n not in OPS]
    if bad or not names:
        raise ConfigError(
            f"--ops: unknown {', '.join(bad) or '(empty)'}; choose from {', '.join(OPS)}"
        )
    return [op for op in OPS if op in names]  # one order, whatever order they were named


def plan_from_args(args: argparse.Namespace, nproc: int, nnodes: int) -> dict[str, Any]:
    """The sweep's plan from the command line, or a one-line ConfigError / DeviceError."""
    from trainscope.collectives.bandwidth import op_count, parse_sizes
    from trainscope.comm.record import plan_options

    ops = _names(args.ops)
    sizes = parse_sizes(args.sizes)
    for flag, value, low in (("repeats", args.repeats, 1), ("warmup", args.warmup, 0)):
        if not low <= value <= MAX_REPEATS:
            raise ConfigError(f"--{flag} must be in {low}..{MAX_REPEATS}, got {value}")
    world = nproc * nnodes
    if world < 2:
        raise ConfigError(
            f"the collectives need at least 2 processes, not {world}: use --nproc 2 or more"
        )
    for op in ops:  # a size too small for a chunked op on this many ranks: before any start
        for size in sizes:
            op_count(op, size, world, 4)  # float32
    backend = _backend(args.backend, nproc)
    return plan_options(
        ops=ops,
        sizes=sizes,
        nproc=nproc,
        nnodes=nnodes,
        backend=backend,
        repeats=args.repeats,
        warmup=args.warmup,
    )


def _backend(requested: str, nproc: int) -> str:
    """gloo or nccl; nccl without CUDA, or with fewer GPUs than processes, refused."""
    import torch

    from trainscope.runtime.dist import choose_backend

    backend = choose_backend(requested, "cuda" if torch.cuda.is_available() else "cpu")
    if backend == "nccl" and nproc > torch.cuda.device_count():
        raise DeviceError(
            f"--nproc {nproc} nccl ranks asked for on this node, but it has "
            f"{torch.cuda.device_count()} GPU(s); use --nproc {torch.cuda.device_count()} "
            "or --backend gloo"
        )
    return backend


def _default_out() -> Path:
    from datetime import datetime, timezone

    from trainscope.records.run_dir import output_root

    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    return output_root() / "studies" / f"collectives-{stamp}"


def _launcher(args: argparse.Namespace) -> int:
    """Check, claim the study directory (node 0), launch, record the end, report."""
    from trainscope.comm.record import open_study, verdict, wrong_results
    from trainscope.launch.launcher import launch_command
    from trainscope.reports.study_report import build_study_report

    d = DistConfig(
        strategy="ddp",
        nproc=args.nproc,
        nnodes=args.nnodes,
        node_rank=args.node_rank,
        master_addr=args.master_addr,
        master_port=args.master_port,
    )
    options = plan_from_args(args, d.nproc, d.nnodes)
    if args.overwrite and args.out is None:
        raise ConfigError("--overwrite needs --out: the directory whose contents to replace")

    def say(text: str) -> None:
        if not args.quiet:  # paths are the user's text: shown, never obeyed
            print(terminal_text(text), file=sys.stderr, flush=True)

    out = (Path(args.out) if args.out else _default_out()) if d.node_rank == 0 else None
    worker = ["collectives", "--launched", *_worker_flags(args, options)]
    if out is None:  # another node: its processes measure, node 0's rank 0 records
        result = launch_command(d, worker)
        if result.code != 0:
            raise TrainscopeError(result.error or f"the processes exited with {result.code}")
        return 0
    owned = open_study(out, options, overwrite=args.overwrite, argv=sys.argv)
    say(_plan_line(options, owned.path))
    worker.append(f"--out={owned.path.resolve()}")

    def go() -> str | None:
        result = launch_command(d, worker)
        return None if result.code == 0 else result.error or f"exit {result.code}"

    data, error = _recorded(owned, go, say)
    say(
        f"collectives {data['status']}: {data['done']} of {data['planned']} measurements "
        f"-> {owned.path}"
    )
    if not args.no_report and (data.get("results") or data.get("examples")):
        report = build_study_report(owned.path)
        say(f"report: {report.markdown_path} and {report.html_path}")
    if error is not None:
        raise TrainscopeError(error)
    wrong = wrong_results(data)
    if wrong:
        raise TrainscopeError(verdict(wrong))
    return 0


def _recorded(
    owned: Any, go: Callable[[], str | None], say: Callable[[str], None]
) -> tuple[dict[str, Any], str | None]:
    """Run ``go`` (the sweep: None, or one line saying why it failed) in the claimed
    study directory and write how it ended; a stop (Ctrl-C, SIGTERM ...) is written as
    interrupted / stopped after k of n, then re-raised. The lock goes with the return."""
    from trainscope.comm.record import finish

    with owned:
        try:
            error = go()
        except (KeyboardInterrupt, Terminated) as e:
            how = "interrupted" if isinstance(e, KeyboardInterrupt) else f"stopped ({e})"
            data = finish(owned.path, how)
            say(
                f"collectives {how} after {data['done']} of {data['planned']} measurements; "
                "rerun the same command to continue"
            )
            raise
        # Written as completed when every planned result is saved, whatever the processes
        # said afterwards (their error, if any, is still the command's last line).
        gone = "the processes ended before every measurement was made"
        data = finish(owned.path, "failed", error or gone)
    return data, error


def _worker_flags(args: argparse.Namespace, options: dict[str, Any]) -> list[str]:
    """The plan as the workers' command line: the same plan, however it was written."""
    flags = [
        f"--nproc={options['nproc']}",
        f"--nnodes={options['nnodes']}",
        f"--backend={options['backend']}",
        f"--ops={','.join(options['ops'])}",
        f"--sizes={','.join(str(s) for s in options['sizes'])}",
        f"--repeats={options['repeats']}",
        f"--warmup={options['warmup']}",
    ]
    return flags + ["--quiet"] * args.quiet


def _plan_line(options: dict[str, Any], out: Path) -> str:
    from trainscope.comm.record import planned_keys, read_record

    nodes = f" on {options['nnodes']} nodes" if options["nnodes"] > 1 else ""
    n = len(planned_keys(options))
    kept = read_record(out).get("kept") or 0
    return (
        f"collectives: {options['world_size']} processes{nodes} ({options['backend']}, "
        f"{options['device']}): the examples and identities, then {n} measurements "
        f"({len(options['ops'])} ops x {len(options['sizes'])} sizes, {options['repeats']} "
        f"repeats after {options['warmup']} warm-up"
        + (f"; {kept} kept from before" if kept else "")
        + f") -> {out}"
    )


def _worker(args: argparse.Namespace) -> int:
    """One of the launched processes (torchrun's environment says which)."""
    from trainscope.collectives import worker

    if not args.launched:
        raise ConfigError(
            "trainscope collectives starts its own processes: run it without torchrun "
            "(--nproc N; --nnodes, --node-rank, --master-addr, --master-port for machines)"
        )
    options = plan_from_args(args, args.nproc, args.nnodes)
    study_dir = Path(args.out) if args.out and os.environ.get("RANK") == "0" else None
    worker.run(options, study_dir, quiet=args.quiet, timeout_s=DistConfig().timeout_s)
    return 0
