"""``study scaling``: strong and weak scaling of a data-parallel strategy, measured on
``--nproc 1,2,4`` processes with an equal core budget, and projected by the α–β model to
8-1024 devices on named interconnects.

Strong scaling keeps the global batch: ``n`` processes each take ``1/n`` of it, and the
ideal step is ``1/n`` of one process's. Weak scaling keeps each process's batch: the
global batch grows ``n``-fold, and the ideal step stays. Every configuration runs the
same number of steps in a process of its own; the machine's cores are shared out over
each run's processes (one process gets them all), so every run has the same core budget
and the comparison is of the parallelism, not of more hardware. The report sets the
measured speed-up and efficiency beside where the rest of each run's wall time went
(start-up, evaluation: what no number of devices shortens), and projects the step to
8-1024 devices on each named interconnect.
"""

from __future__ import annotations

from typing import Any

from trainscope import registry
from trainscope.collectives.predict_cli import INTERCONNECTS, interconnect_key
from trainscope.comm.scaling import MODES
from trainscope.errors import ConfigError
from trainscope.records.study_dir import PlannedRun
from trainscope.studies.base import PlanRequest, PlanResult, repeats_of, study_planner

DEFAULT_INTERCONNECTS = ("nvlink4", "ib-100g")
MAX_PROCS = 64

# Without a workload named: the LeNet on scikit-learn's digits (offline, seconds per run):
# small enough that communication shows, as on the MNIST of the question in the docs.
DEFAULT_WORKLOAD: dict[str, Any] = {
    "workload.name": "digits",
    "data.batch_size": 64,
    # Enough steps past the warm-up at the largest weak-scaling batch (4 x 64 = 256 of
    # the digits' ~1,400 training images: 5 steps an epoch).
    "train.epochs": 6,
    "train.max_steps_per_epoch": 20,
}


@study_planner("scaling")
def plan(
    request: PlanRequest,
    *,
    nprocs: tuple[int, ...] = (1, 2, 4),
    modes: tuple[str, ...] = MODES,
    links: dict[str, Any] | None = None,
) -> PlanResult:
    """One configuration per mode and process count, each repeated."""
    base = request.base_config
    strategy = base["dist"]["strategy"]
    batch = int(base["data"]["batch_size"])
    runs: list[PlannedRun] = []
    for mode in modes:
        for n in nprocs:
            global_batch = batch if mode == "strong" else batch * n
            overrides = {"dist.strategy": strategy, "dist.nproc": n,
                         "data.batch_size": global_batch}  # fmt: skip
            labels = {"mode": mode, "processes": n, "global_batch": global_batch}
            runs += repeats_of(f"{mode}-n{n}", request.repeats, labels=labels,
                               overrides=overrides)  # fmt: skip
    options = {"nprocs": list(nprocs), "modes": list(modes), "strategy": strategy,
               "batch_size": batch, "links": links or {}}  # fmt: skip
    return runs, options


def _ints(name: str, text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(x) for x in str(text).split(",") if x.strip())
    except ValueError:
        raise ConfigError(f"{name}: a list of whole numbers, got {text!r}") from None
    if not values or min(values) < 1 or max(values) > MAX_PROCS:
        raise ConfigError(f"{name}: give at least one count, each in 1..{MAX_PROCS}")
    return tuple(sorted(set(values)))


def options_from_args(args: Any, overrides: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The study's flags as :func:`plan`'s keyword arguments (registry hook); without a
    workload named it studies :data:`DEFAULT_WORKLOAD`, with ``ddp`` unless told."""
    if getattr(args, "config", None) is None and "workload.name" not in overrides:
        for key, value in DEFAULT_WORKLOAD.items():
            overrides.setdefault(key, value)
    strategy = overrides.setdefault("dist.strategy", "ddp")
    entry = registry.STRATEGIES.get(strategy)
    if entry is None or not entry.multiprocess or not entry.splits_batch:
        raise ConfigError(
            f"study scaling scales a data-parallel strategy; {strategy} is not one (choose "
            "ddp, fsdp, allreduce or gather-scatter)"
        )
    nprocs = _ints("--nproc", args.nproc)
    modes = tuple(m.strip() for m in str(args.scaling).split(",") if m.strip())
    bad = [m for m in modes if m not in MODES]
    if bad or not modes:
        raise ConfigError(f"--scaling: strong and/or weak, got {args.scaling!r}")
    links = {}
    for name in (n.strip() for n in str(args.interconnects).split(",") if n.strip()):
        key = interconnect_key(name)
        bw, lat, what = INTERCONNECTS[key]
        links[key] = {"bandwidth_GBps": bw, "alpha_s": lat, "what": what}
    return {"nprocs": nprocs, "modes": modes, "links": links}, []
