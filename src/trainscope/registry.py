"""The extension points: parallel strategies and study kinds, one entry each (torch-free).

An entry names its code as ``"module:attribute"`` (imported only when used, so ``--help``
and the torch-free reports never import torch) and carries what the rest of trainscope
needs to know without importing it: whether a strategy needs several processes, the
config keys it takes, the configurations it adds to the strategies study and how
``collectives --predict`` models each; a study's planner, report builder, flags, the run
settings it varies (and so refuses from the command line) and its help text. The CLI,
config validation, the studies, the reports and the predictions read these tables;
nothing else spells a strategy's or a study's name.

Adding a strategy is a module with a :class:`~trainscope.strategies.base.Strategy` class
plus one :func:`register_strategy` call; adding a study, a module with a planner (and a
report builder) plus one :func:`register_study` call. The built-ins are registered at the
bottom of this module, in the order every listing shows them.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any


def load(target: str) -> Any:
    """The object a ``"package.module:attribute"`` string names (imported now)."""
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


# --------------------------------------------------------------------------- strategies


@dataclass(frozen=True)
class Variant:
    """One configuration of the strategies study, contributed by a strategy."""

    name: str
    """Its name in the study (``ddp``, ``ddp-1proc``, ``allreduce-bucketed``)."""
    one_process: bool = False
    """Run in one process even when the strategy can take several (``ddp-1proc``)."""
    bucketed: bool = False
    """Takes the study's ``--bucket-mb`` as ``dist.bucket_mb``."""
    predict: str | None = None
    """``"module:function"`` predicting its communication from α–β fits, or None: no
    model (``collectives --predict`` and the study's report say so)."""
    predict_ops: tuple[str, ...] = ()
    """The collectives whose fits its prediction needs (a sweep must have timed them)."""
    measured_as: str | None = None
    """How the study measures its communication to set beside the prediction: ``comm``
    (its own stage), ``backward-delta`` (backward minus allreduce's) or
    ``fwd-bwd-delta`` (forward + backward minus allreduce's); None: not compared."""
    comm_place: str | None = None
    """Where its gradient communication is when it has no stage of its own (report text);
    None: the ``comm`` stage, timed."""
    overlap_modelled: bool = False
    """Its prediction models the overlap with compute (DDP's buckets during backward), so
    its exposed part is the model's; otherwise a prediction without one counts whole."""


@dataclass(frozen=True)
class Capabilities:
    """What a strategy does, for the code that reasons about runs of it (the doctor, the
    config's checks, the Trainer) without testing its name: a new strategy declares them
    once, here, and is understood everywhere they are read."""

    shards: frozenset[str] = frozenset()
    """Which model states each process holds only a part of: ``parameters``,
    ``gradients``, ``optimizer_states`` (empty: every process holds them whole)."""
    sync: str = "none"
    """How gradients are made equal across processes: ``per_tensor`` (one collective per
    gradient tensor), ``buckets`` (DDP's buckets, its comm hook's record), ``sharded``
    (reduce-scatter of shards), ``model`` (the model itself is split), ``none``."""
    comm_in: tuple[str, ...] = ()
    """The stages its communication happens inside: ``("comm",)`` (a stage of its own),
    ``("backward",)`` (DDP), ``("forward", "backward")`` (FSDP); empty: none, or not
    attributable to a stage."""
    muon: bool = True
    """Muon works under it: Muon orthogonalises whole weight matrices, which a strategy
    that shards or splits them does not hold on one process."""

    @property
    def replicates_states(self) -> bool:
        """Every process holds the whole model states (what sharding would save)."""
        return not self.shards and self.sync in ("per_tensor", "buckets")


@dataclass(frozen=True)
class StrategyEntry:
    """A parallel strategy: ``--strategy NAME``."""

    name: str
    target: str
    """``"module:Class"``: a Strategy taking ``(info, device, **options)``."""
    multiprocess: bool
    """One process per device with a process group (launched through torchrun)."""
    help: str
    """One line for ``run --help`` and the docs."""
    options: tuple[str, ...] = ()
    """``dist.*`` keys it takes besides the common ones (passed to its constructor by
    their last part, ``dist.bucket_mb`` as ``bucket_mb``); refused for other strategies."""
    variants: tuple[Variant, ...] = ()
    """Its configurations in the strategies study (default: one, named as the strategy)."""
    splits_batch: bool = True
    """Each process trains on its share of the global batch (False: a pipeline's stages
    all see the whole batch), which must then split evenly."""
    precheck: str | None = None
    """``"module:function"`` taking the RunConfig and refusing, torch-free and before any
    process starts, what this strategy cannot run (None: nothing of its own to check)."""
    in_strategies_study: bool = True
    """False: ``study strategies`` leaves it out (it splits the model, not the data: the
    parallelism study compares it)."""
    capabilities: Capabilities = Capabilities()
    """What it does (see :class:`Capabilities`)."""

    def study_variants(self) -> tuple[Variant, ...]:
        """Its strategies-study configurations (one named after it when none are given;
        none when it is not in that study)."""
        if not self.in_strategies_study:
            return ()
        return self.variants or (Variant(self.name),)


_STRATEGIES: dict[str, StrategyEntry] = {}
STRATEGIES: Mapping[str, StrategyEntry] = MappingProxyType(_STRATEGIES)
"""Name -> entry, in registration order (read-only; add with :func:`register_strategy`)."""


def capabilities(strategy: object) -> Capabilities:
    """What the strategy named ``strategy`` does (a record's text: a name nobody
    registered, or no name, does nothing this version knows of)."""
    entry = _STRATEGIES.get(strategy) if isinstance(strategy, str) else None
    return entry.capabilities if entry is not None else Capabilities()


def register_strategy(entry: StrategyEntry) -> StrategyEntry:
    """Add (or replace) a strategy; its study configurations must not clash with another's."""
    taken = {v.name: s.name for s in _STRATEGIES.values() if s.name != entry.name
             for v in s.study_variants()}  # fmt: skip
    for v in entry.study_variants():
        if v.name in taken:
            raise ValueError(f"study configuration {v.name!r} is {taken[v.name]}'s already")
    _STRATEGIES[entry.name] = entry
    return entry


def precheck_strategy(cfg: Any) -> None:
    """Run the chosen strategy's own checks of a RunConfig (its ``precheck``), if any."""
    target = _STRATEGIES[cfg.dist.strategy].precheck
    if target:
        load(target)(cfg)


def unregister_strategy(name: str) -> None:
    """Remove a strategy (tests that register a toy one clean up with this)."""
    _STRATEGIES.pop(name, None)


def strategy_names() -> tuple[str, ...]:
    """Every ``--strategy`` name, in registration order."""
    return tuple(_STRATEGIES)


def multiprocess_names() -> tuple[str, ...]:
    """The strategies that run one process per device."""
    return tuple(n for n, e in _STRATEGIES.items() if e.multiprocess)


def strategy_options() -> tuple[str, ...]:
    """Every ``dist.*`` key some strategy takes for itself."""
    return tuple(dict.fromkeys(k for e in _STRATEGIES.values() for k in e.options))


def study_variants() -> dict[str, tuple[StrategyEntry, Variant]]:
    """The strategies study's configurations: name -> (its strategy, the variant)."""
    return {v.name: (e, v) for e in _STRATEGIES.values() for v in e.study_variants()}


# --------------------------------------------------------------------------- studies


@dataclass(frozen=True)
class Flag:
    """One flag of a study's command line: argparse's ``add_argument(*names, **kwargs)``."""

    names: tuple[str, ...]
    kwargs: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class StudyEntry:
    """A study kind: ``trainscope study NAME``."""

    name: str
    help: str
    planner: str
    """``"module:function"``: ``plan(base_config, device, **options) -> StudyPlan``."""
    report: str
    """``"module:function"``: ``sections(study, doc, plots) -> Section`` for its report."""
    options: str | None = None
    """``"module:function"``: ``(args, overrides) -> (options, notes)``: its flags as the
    planner's keyword arguments (it may move run overrides it reads itself, such as the
    strategies study's ``--nproc``), and notes to print. None: no options of its own."""
    flags: tuple[Flag, ...] = ()
    fresh_process: bool = False
    """Run each configuration in a process of its own unless told otherwise (studies that
    compare setup time or memory)."""
    sets: Mapping[str, str] = field(default_factory=dict)
    """Run settings (dotted keys) it sets per configuration -> the study flag to use
    instead: a run flag for one of them is refused, never silently overridden."""
    replaces: tuple[str, ...] = ()
    """Run flags its own flags take the place of (``study scaling --nproc 1,2,4``: a
    list where ``run --nproc`` takes one number)."""
    adaptive: str | None = None
    """``"module:function"``: ``more(plan, study_dir) -> runs`` for a study that plans
    later runs from earlier ones' results (a search); None: every run planned up front."""
    script: str | None = None
    """``"module:function"``: ``runs(repeats, cuda, **options) -> [PlannedRun]``, its
    configurations as ``--inject`` settings on the user's script (``study NAME --
    SCRIPT.py``); None: the study needs trainscope's own workloads."""


_STUDIES: dict[str, StudyEntry] = {}
STUDIES: Mapping[str, StudyEntry] = MappingProxyType(_STUDIES)
"""Name -> entry, in registration order (read-only; add with :func:`register_study`)."""

# Studies that are not study NAME subcommands but keep a study record (a report knows
# their builder): ``trainscope collectives``.
_RECORD_ONLY: dict[str, str] = {}


def register_study(entry: StudyEntry) -> StudyEntry:
    """Add (or replace) a study kind."""
    _STUDIES[entry.name] = entry
    return entry


def unregister_study(name: str) -> None:
    """Remove a study kind (tests that register a toy one clean up with this)."""
    _STUDIES.pop(name, None)


def report_builder(kind: str) -> Callable[..., Any] | None:
    """The report builder of a study kind (a ``study`` subcommand's, or one that only keeps
    a study record, such as ``collectives``), or None for a kind nobody registered."""
    target = _STUDIES[kind].report if kind in _STUDIES else _RECORD_ONLY.get(kind)
    return load(target) if target else None


# --------------------------------------------------------------------------- workloads


@dataclass(frozen=True)
class WorkloadEntry:
    """A workload chosen by name: ``--workload NAME`` (a user's own can also be named as
    ``pkg.module:factory`` without an entry). Every part is a ``"module:function"``
    string, imported only when the workload is chosen."""

    name: str
    factory: str
    """``(WorkloadConfig, cache_dir) -> Workload``."""
    options: str | None = None
    """``(options mapping) -> None``, raising ConfigError for a bad one before any run;
    None: it takes no options."""
    layout: str | None = None
    """``(options) -> {"blocks": n, "heads": h, "pipeline": bool, "tp": bool}``, its model's
    layout before anything is built; None: a model without blocks."""
    data_check: str | None = None
    """``(data_dir) -> None``, raising DataError where the folder cannot hold its data;
    None: nothing to check before the run."""
    recipe: str | None = None
    """``(options) -> Recipe | None``: its default recipe (:mod:`trainscope.recipes`);
    None: the generic defaults."""
    arch: str | None = None
    """``(model, name, sample_shape) -> Arch | None``: its built model read as the
    memory estimator's architecture (:mod:`trainscope.estimate.workload`); None: the
    estimate counts its model states and plans no activations."""


_WORKLOADS: dict[str, WorkloadEntry] = {}
WORKLOADS: Mapping[str, WorkloadEntry] = MappingProxyType(_WORKLOADS)
"""Name -> entry, in registration order (read-only; add with :func:`register_workload`)."""


def register_workload(entry: WorkloadEntry) -> WorkloadEntry:
    """Add (or replace) a workload."""
    _WORKLOADS[entry.name] = entry
    return entry


def unregister_workload(name: str) -> None:
    """Remove a workload (a test's toy)."""
    _WORKLOADS.pop(name, None)


# --------------------------------------------------------------------------- doctor rules


@dataclass(frozen=True)
class RuleEntry:
    """A doctor rule beyond the built-in ones (:data:`trainscope.diagnosis.rules.RULES`):
    ``trainscope doctor``, the run report's "What to fix" and ``doctor --apply`` run it on
    every record, as they run those."""

    name: str
    target: str
    """``"module:function"`` taking the run's facts (``RunFacts``) and returning a
    ``Finding`` or None; imported when the doctor first runs."""
    help: str = ""


_RULES: dict[str, RuleEntry] = {}
RULES: Mapping[str, RuleEntry] = MappingProxyType(_RULES)
"""Name -> entry of the rules registered beyond the built-in ones (read-only)."""


def register_rule(entry: RuleEntry) -> RuleEntry:
    """Add (or replace) a doctor rule."""
    _RULES[entry.name] = entry
    return entry


def unregister_rule(name: str) -> None:
    """Remove a rule added with :func:`register_rule` (a test's toy)."""
    _RULES.pop(name, None)


# --------------------------------------------------------------------------- lab chapters


@dataclass(frozen=True)
class Chapter:
    """One chapter of ``trainscope lab``: a classic question and the study (or the
    maker's commands) that answers it by measuring (:mod:`trainscope.lab.chapters`)."""

    number: int
    slug: str
    title: str
    question: str
    study: str | None
    """The study kind that measures it (``trainscope study KIND``); None: a maker's
    chapter, or one not built yet."""
    quick: tuple[str, ...] = ()
    """The study's flags under ``--quick``."""
    full: tuple[str, ...] = ()
    """The study's flags otherwise."""
    data: tuple[str, ...] = ()
    """The folders under ``--data`` it reads (``tinyshakespeare``); ``{data}`` in its
    flags is ``--data``. None: its data ships with trainscope or is made by the run."""
    maker: str | None = None
    """A chapter made of several commands: its maker's key (:mod:`trainscope.lab.makers`)
    instead of one study."""
    command: tuple[str, ...] = ()
    """The trainscope command that makes its study (default ``study KIND``)."""
    fit: bool = False
    """Its study takes ``--cost-model DIR``: the collectives chapter's, when measured."""
    not_yet: str | None = None
    """A part of the chapter's question this version does not measure (said in it)."""
    after: tuple[str, ...] = ()
    """The words after ``--`` of its study's command: the user's script and its
    arguments (``trainscope lab --script``), put last, after the lab's own flags."""
    elsewhere: str | None = None
    """Why this lab does not measure it although this version can (a lab of a script:
    the chapter needs trainscope's reference workloads)."""

    def argv(self, quick: bool, data_root: str | None, fit_dir: str | None = None) -> list[str]:
        """The command line (after ``trainscope``) that makes this chapter's study."""
        argv = list(self.command or ("study", str(self.study)))
        root = (data_root or "").rstrip("/")
        argv += [a.replace("{data}", root) for a in (self.quick if quick else self.full)]
        if self.fit and fit_dir is not None:
            argv += ["--cost-model", fit_dir]
        return argv


_CHAPTERS: dict[int, Chapter] = {}
CHAPTERS: Mapping[int, Chapter] = MappingProxyType(_CHAPTERS)
"""Number -> the lab chapters registered beyond the built-in ones (read-only)."""


def register_chapter(chapter: Chapter) -> Chapter:
    """Add (or replace) a lab chapter (its number and name must not be a built-in's)."""
    _CHAPTERS[chapter.number] = chapter
    return chapter


def unregister_chapter(number: int) -> None:
    """Remove a chapter added with :func:`register_chapter` (a test's toy)."""
    _CHAPTERS.pop(number, None)


# --------------------------------------------------------------------------- built-ins

_S = "trainscope.strategies"
_P = "trainscope.comm.predict"
for _entry in (
    StrategyEntry("single", f"{_S}.single:Single", False, "one process, no wrapper",
                  variants=(Variant("single", comm_place="none"),)),
    StrategyEntry("dp", f"{_S}.dp:DataParallelStrategy", False,
                  "torch.nn.DataParallel: one process drives every GPU",
                  variants=(Variant("dp", comm_place="in fwd/bwd"),)),
    StrategyEntry(
        "ddp", f"{_S}.ddp:DDPStrategy", True,
        "DistributedDataParallel: bucketed all-reduce overlapped with backward",
        options=("dist.bucket_mb",),  # DDP's bucket_cap_mb
        capabilities=Capabilities(sync="buckets", comm_in=("backward",)),
        variants=(
            Variant("ddp-1proc", one_process=True, comm_place="in backward"),
            Variant("ddp", predict=f"{_P}:predict_ddp", predict_ops=("all_reduce",),
                    measured_as="backward-delta", comm_place="in backward",
                    overlap_modelled=True),
        ),
    ),
    StrategyEntry(
        "fsdp", f"{_S}.fsdp:FSDPStrategy", True,
        "FullyShardedDataParallel (FSDP2): parameters, gradients and states sharded",
        capabilities=Capabilities(
            shards=frozenset({"parameters", "gradients", "optimizer_states"}),
            sync="sharded", comm_in=("forward", "backward"), muon=False,
        ),
        variants=(Variant("fsdp", predict=f"{_P}:predict_fsdp",
                          predict_ops=("all_gather", "reduce_scatter"),
                          measured_as="fwd-bwd-delta", comm_place="in fwd/bwd"),),
    ),
    StrategyEntry(
        "gather-scatter", f"{_S}.gather_scatter:GatherScatterStrategy", True,
        "hand-written sync through rank 0: gather every gradient, average, scatter back",
        capabilities=Capabilities(sync="per_tensor", comm_in=("comm",)),
        variants=(Variant("gather-scatter", predict=f"{_P}:predict_gather_scatter",
                          predict_ops=("broadcast",), measured_as="comm"),),
    ),
    StrategyEntry(
        "allreduce", f"{_S}.allreduce:AllReduceStrategy", True,
        "hand-written all_reduce per gradient tensor, or per --bucket-mb bucket",
        options=("dist.bucket_mb",),
        capabilities=Capabilities(sync="per_tensor", comm_in=("comm",)),
        variants=(
            Variant("allreduce", predict=f"{_P}:predict_allreduce",
                    predict_ops=("all_reduce",), measured_as="comm"),
            Variant("allreduce-bucketed", bucketed=True,
                    predict=f"{_P}:predict_allreduce_bucketed",
                    predict_ops=("all_reduce",), measured_as="comm"),
        ),
    ),
    StrategyEntry(
        "pipeline", f"{_S}.pipeline:PipelineStrategy", True,
        "pipeline stages over the model's blocks, one per process; microbatches through a "
        "gpipe, 1f1b or interleaved-1f1b schedule",
        options=("dist.pp_stages", "dist.microbatches", "dist.pp_schedule", "dist.pp_split",
                 "dist.dp_size"),
        precheck=f"{_S}.layout:check_pipeline", splits_batch=False, in_strategies_study=False,
        capabilities=Capabilities(sync="model", muon=False),
    ),
    StrategyEntry(
        "tp", f"{_S}.tensor_parallel:TensorParallelStrategy", True,
        "tensor parallelism: every block's attention and MLP split over the processes "
        "(column- then row-split layers, all-reduces inside each block)",
        options=("dist.tp_size", "dist.dp_size", "dist.sequence_parallel"),
        precheck=f"{_S}.layout:check_tp", splits_batch=False, in_strategies_study=False,
        capabilities=Capabilities(shards=frozenset({"parameters", "gradients",
                                                    "optimizer_states"}),
                                  sync="model", muon=False),  # fmt: skip
    ),
):  # fmt: skip
    register_strategy(_entry)


def _list(text: str) -> dict[str, Any]:
    return {"metavar": "LIST", "help": text}


for _study in (
    StudyEntry(
        "loader",
        "num_workers sweep (data-only epochs), pin/persistent variants, fast path, "
        "and data wait vs compute per iteration",
        "trainscope.studies.loader:plan", "trainscope.reports.study_loader:loader_sections",
        options="trainscope.studies.loader:options_from_args",
        script="trainscope.studies.script_studies:loader_runs",
        flags=(
            Flag(("--workers",), {"default": "0-10", **_list("num_workers values (0-10)")}),
            Flag(("--sweep-epochs",), {"type": int, "default": 3, "metavar": "N",
                                       "help": "epochs per sweep run"}),
            Flag(("--iter-workers",), {"default": "0,2,4", **_list(
                "num_workers values of the per-iteration training runs (0,2,4)")}),
            Flag(("--iter-epochs",), {"type": int, "default": 2, "metavar": "N"}),
            Flag(("--iter-steps",), {"type": int, "default": 50, "metavar": "N",
                                     "help": "steps per epoch (50)"}),
        ),
        sets={
            "train.epochs": "--sweep-epochs and --iter-epochs",
            "train.max_steps_per_epoch": "--iter-steps",
            "train.data_only": "nothing (the sweep is data-only, the iteration runs train)",
            "data.num_workers": "--workers and --iter-workers",
            "data.loader": "nothing (both loaders are measured)",
            "data.pin_memory": "nothing (pin_memory is a variant of the sweep)",
            "data.persistent_workers": "nothing (persistent_workers is a variant of the sweep)",
            "data.prefetch_factor": "nothing (the sweep uses the default)",
        },
    ),
    StudyEntry(
        "profile", "stage breakdown of a training run, with the biggest stage and what to do",
        "trainscope.studies.profile:plan", "trainscope.reports.study_profile:profile_sections",
        fresh_process=True, script="trainscope.studies.script_studies:profile_runs",
    ),
    StudyEntry(
        "precision", "fp32 vs tf32 vs fp16+GradScaler vs bf16: loss, accuracy, time, memory",
        "trainscope.studies.precision:plan",
        "trainscope.reports.study_precision:precision_sections",
        options="trainscope.studies.precision:options_from_args",
        script="trainscope.studies.script_studies:precision_runs",
        flags=(Flag(("--precisions",), {"default": "fp32,tf32,fp16,bf16",
                                         **_list("precisions to compare (default all four)")}),),
        fresh_process=True,
        sets={"runtime.precision": "--precisions"},
    ),
    StudyEntry(
        "strategies",
        "every registered strategy's configurations (single, dp, ddp, fsdp, gather-scatter, "
        "allreduce per tensor and bucketed) with --nproc N processes: accuracy, time and "
        "communication per iteration (beside the alpha-beta model's prediction with "
        "--cost-model), memory per rank",
        "trainscope.studies.strategies:plan",
        "trainscope.reports.study_strategies:strategies_sections",
        options="trainscope.studies.strategies:options_from_args",
        flags=(
            Flag(("--strategies",), _list(
                "configurations to compare (default all: the study's configurations of every "
                "registered strategy)")),
            Flag(("--cost-model",), {
                "metavar": "DIR",
                "help": "a `trainscope collectives` study: its fitted latency and bandwidth "
                "predict each strategy's communication, shown beside the measured"}),
        ),
        fresh_process=True,
        sets={"dist.strategy": "--strategies"},
    ),
    StudyEntry(
        "checkpointing",
        "activation checkpointing none / every-K / selective / full: saved activations vs "
        "step time (default workload: a 4-block gpt-char)",
        "trainscope.studies.checkpointing:plan",
        "trainscope.reports.study_checkpointing:checkpointing_sections",
        options="trainscope.studies.checkpointing:options_from_args",
        script="trainscope.studies.script_studies:checkpointing_runs",
        flags=(Flag(("--policies",), {"default": "none,every-2,selective,full", **_list(
            "policies to compare (default none,every-2,selective,full)")}),),
        sets={"runtime.checkpointing": "--policies"},
    ),
    StudyEntry(
        "finetune",
        "full fine-tuning vs LoRA adapters of a pretrained text-cls model (--pretrained): "
        "trainable parameters, time per stage, gradients, optimizer states and activations, "
        "dev accuracy after the same steps and at the same training time",
        "trainscope.studies.finetune:plan",
        "trainscope.reports.study_finetune:finetune_sections",
        options="trainscope.studies.finetune:options_from_args",
        flags=(Flag(("--lora-ranks",), {"default": "0,8", **_list(
            "LoRA ranks to compare, 0 for full fine-tuning (default 0,8)")}),),
        fresh_process=True,
        sets={"workload.options.lora_r": "--lora-ranks"},
    ),
    StudyEntry(
        "parallelism",
        "replicate or split the model at one global batch: single, ddp, fsdp, pipeline "
        "(each schedule at each microbatch count), tp, and dp x pipeline / dp x tp on twice "
        "the processes: step time, the bubble against theory, communication, memory per rank",
        "trainscope.studies.parallelism:plan",
        "trainscope.reports.study_parallelism:parallelism_sections",
        options="trainscope.studies.parallelism:options_from_args",
        flags=(
            Flag(("--layouts",), _list("layouts to compare (default all; see the report)")),
            Flag(("--microbatch-counts",), {"default": "2,4,8", **_list(
                "the pipeline's microbatch counts (default 2,4,8)")}),
            Flag(("--no-2d",), {"action": "store_true",
                                "help": "leave out dp x pipeline and dp x tp"}),
            Flag(("--cost-model",), {
                "metavar": "DIR",
                "help": "a `trainscope collectives` study: its all_reduce fit predicts "
                "tensor parallelism's communication, shown beside the measured"}),
        ),
        fresh_process=True,
        sets={
            "dist.strategy": "--layouts",
            "dist.pp_schedule": "--layouts",
            "dist.dp_size": "--layouts",
            "dist.sequence_parallel": "--layouts",
            "dist.microbatches": "--microbatch-counts",
            "dist.pp_stages": "--nproc",
            "dist.tp_size": "--nproc",
        },
    ),
    StudyEntry(
        "scaling",
        "strong and weak scaling of a data-parallel strategy on --nproc 1,2,4 processes at "
        "an equal core budget: speed-up, efficiency, the wall time more devices do not "
        "shorten, and the alpha-beta projection to 8-1024 devices on named interconnects",
        "trainscope.studies.scaling:plan",
        "trainscope.reports.study_scaling:scaling_sections",
        options="trainscope.studies.scaling:options_from_args",
        flags=(
            Flag(("--nproc",), {"default": "1,2,4", **_list("process counts (default 1,2,4)")}),
            Flag(("--scaling",), {"default": "strong,weak",
                                  **_list("strong and/or weak (default both)")}),
            Flag(("--interconnects",), {"default": "nvlink4,ib-100g", **_list(
                "interconnects to project to 8-1024 devices on (default nvlink4,ib-100g; "
                "also pcie4-x16, ib-400g)")}),
        ),
        fresh_process=True,
        sets={"dist.nproc": "--nproc"},
        replaces=("--nproc",),
    ),
):  # fmt: skip
    register_study(_study)

register_study(
    StudyEntry(
        "time-to-target",
        "which recipe meets --target (e.g. val_loss<=1.88) soonest: a search (--recipes "
        "FILE, or optimizer, lr, batch, schedule length, warm-up and shape one at a time "
        "within --search-budget), then the finalists on new seeds: time to target "
        "(training and process time) with median, spread and n, and the winning command",
        "trainscope.studies.time_to_target:plan",
        "trainscope.reports.study_time_to_target:time_to_target_sections",
        options="trainscope.studies.time_to_target:options_from_args",
        flags=(
            Flag(("--recipes",), {"metavar": "FILE", "help": (
                "a YAML list of candidate recipes, each {name: NAME, flags: '--lr 0.002 ...'} "
                "or {name: NAME, set: {KEY: VALUE}} (default: the built-in search)")}),
            Flag(("--finalists",), {"type": int, "default": 2, "metavar": "K", "help": (
                "the K best candidates of the search repeated on --repeats new seeds, "
                "besides the starting recipe (default 2)")}),
            Flag(("--search-budget",), {"type": float, "default": 1800.0, "metavar": "S",
                                        "help": "seconds the built-in search may take "
                                        "(default 1800; each candidate may take the whole "
                                        "--time-limit)"}),
        ),
        fresh_process=True,
        adaptive="trainscope.studies.time_to_target:more",
    )
)  # fmt: skip

_RECORD_ONLY["collectives"] = "trainscope.reports.study_collectives:collectives_sections"
_RECORD_ONLY["doctor"] = "trainscope.reports.study_doctor:doctor_sections"


_W = "trainscope.workloads"
_E = "trainscope.estimate.workload"
for _workload in (
    WorkloadEntry(
        "digits",
        f"{_W}.builtin:digits",
        recipe="trainscope.recipes:digits_recipe",
        arch=f"{_E}:lenet_arch",
    ),
    WorkloadEntry(
        "mnist",
        f"{_W}.builtin:mnist",
        recipe="trainscope.recipes:mnist_recipe",
        data_check="trainscope.data.mnist_files:find_mnist_files",
    ),
    WorkloadEntry(
        "synthetic", f"{_W}.builtin:synthetic", recipe="trainscope.recipes:synthetic_recipe"
    ),
    WorkloadEntry(
        "gpt-char",
        f"{_W}.gpt:gpt_char",
        options=f"{_W}.gpt:check_options",
        layout=f"{_W}.gpt:layout",
        recipe="trainscope.recipes:gpt_char_recipe",
        arch=f"{_E}:gpt_arch",
    ),
    WorkloadEntry(
        "text-cls",
        f"{_W}.text_cls:text_cls",
        options=f"{_W}.text_cls:parse_options",
        layout=f"{_W}.text_cls:layout",
        recipe="trainscope.recipes:text_cls_recipe",
        arch=f"{_E}:bert_arch",
    ),
):
    register_workload(_workload)
