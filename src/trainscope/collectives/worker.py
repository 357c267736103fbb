"""One process of ``trainscope collectives``: join the group, run the examples and the
identities, measure what the record does not hold yet, and (rank 0) print and save it.

Every rank runs the same calls in the same order (collectives must meet); only rank 0
prints and writes, and it tells the others which measurements are already saved.
"""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path
from typing import Any

import torch

from trainscope.collectives.bandwidth import measure
from trainscope.collectives.semantics import check_identities, run_examples
from trainscope.comm.record import Record, planned_keys
from trainscope.config import available_cpus
from trainscope.errors import ConfigError
from trainscope.reports.collectives_tables import (
    Printer,
    example_table,
    identities_table,
    size_text,
    sweep_console_table,
)
from trainscope.runtime.dist import (
    DistInfo,
    broadcast_object,
    destroy_distributed,
    gather_objects,
    init_distributed,
    rank_device,
)
from trainscope.util.numfmt import fmt_sig


def _machine(info: DistInfo, device: torch.device) -> dict[str, Any]:
    """Where every rank ran (host, CPUs it may use, torch threads) and, from rank 0, the
    versions: what the report needs to say how the processes shared the machine."""
    mine = {
        "rank": info.rank,
        "host": socket.gethostname(),
        "cpus": available_cpus(),
        "torch_threads": torch.get_num_threads(),
        "pid": os.getpid(),
    }
    ranks = gather_objects(mine, info)
    if not info.is_main:
        return {}
    from trainscope.runtime.device import describe_environment

    env = describe_environment(device)
    env.pop("argv", None)  # a worker's own command line; study.json keeps the user's
    return {"env": env, "ranks": ranks}


def run(options: dict[str, Any], study_dir: Path | None, *, quiet: bool, timeout_s: float) -> None:
    """This process's part of the sweep ``options`` (torchrun's environment says which).

    ``study_dir``: where rank 0 saves (None on the ranks of another node, and there only
    rank 0 writes anyway).
    """
    info = init_distributed(options["backend"], options["device"], timeout_s)
    try:
        _run(info, options, study_dir, quiet=quiet)
    finally:
        destroy_distributed(info)


def _run(info: DistInfo, options: dict[str, Any], study_dir: Path | None, *, quiet: bool) -> None:
    if info.world_size != options["world_size"]:
        raise ConfigError(
            f"this sweep was planned for {options['world_size']} processes but "
            f"{info.world_size} joined"
        )
    # The nodes must agree on the plan: a different size list would pair unlike collectives.
    plans = gather_objects(options, info)
    if any(p != plans[0] for p in plans):
        raise ConfigError("the processes were given different plans (sizes, ops, repeats ...)")
    device = rank_device(torch.device(options["device"]), info)
    record = Record(study_dir) if info.is_main and study_dir is not None else None
    show = Printer(info.is_main and not quiet)

    examples = run_examples(device=device)
    identities = check_identities(device=device)
    machine = _machine(info, device)
    if record is not None:
        record.save_checks(examples, identities, machine)
    for ex in examples:
        show.table(example_table(ex))
    show.table(identities_table(identities))

    done = {tuple(k) for k in broadcast_object(record.done() if record else [], info)}
    todo = [k for k in planned_keys(options) if k not in done]
    total = len(planned_keys(options))
    if done:
        show.say(f"{len(done)} of {total} measurements kept from before; {len(todo)} to go")
    dtype = getattr(torch, options["dtype"])
    fresh: list[dict[str, Any]] = []
    for i, (op, size) in enumerate(todo, len(done) + 1):
        r = measure(
            op,
            size,
            warmup=options["warmup"],
            repeats=options["repeats"],
            root=options["root"],
            dtype=dtype,
            device=device,
        )
        fresh.append(r)
        if record is not None:
            record.add(r)
        show.say(
            f"[{i}/{total}] {op} {size_text(r['bytes'])}: {r['time_s'] * 1e6:.1f} us, "
            f"busbw {fmt_sig(r['busbw_GBps'])} GB/s, {r['wrong']} wrong"
        )
    show.table(sweep_console_table(record.results() if record is not None else fresh))
    sys.stdout.flush()
