"""Parallel strategies: ``--strategy NAME``, what each does and the options it takes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trainscope.registry.base import Table, load


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
class StrategyOption:
    """A ``dist.*`` setting only some strategies take, declared once: its flag, what its
    values may be and its help. The config checks it (and refuses it for a strategy that
    does not take it), ``run --help`` shows it, and its owners' entries name it."""

    key: str
    """Its dotted config key (``dist.tp_size``): a field of the config's ``dist`` section."""
    flag: str
    """Its command-line flag (``--tp-size``)."""
    kind: str
    """What its values are: ``count`` (a whole number >= 1), ``split`` (a count of processes
    per model replica: times the replicas it must make the run's processes), ``replicas``
    (a count dividing the run's processes), ``mib`` (a size in MiB > 0), ``switch`` (true or
    false), ``choice`` (one of :attr:`choices`)."""
    help: str
    """One line for ``run --help``; the strategies that take it are put before it."""
    metavar: str = "N"
    choices: tuple[str, ...] = ()
    """``choice``: the values allowed (the first is the default unless :attr:`default`)."""
    default: str | None = None
    """What leaving it out means, in words, for the help (None: said in :attr:`help`)."""

    def help_text(self, owners: tuple[str, ...]) -> str:
        """Its help with its owners before it, its choices and its default."""
        text = f"{', '.join(owners)}: {self.help}" if owners else self.help
        if self.choices:
            text += f" ({' | '.join(self.choices)}; default {self.default or self.choices[0]})"
        elif self.default:
            text += f" (default {self.default})"
        return text


OPTION_KINDS = ("count", "split", "replicas", "mib", "switch", "choice")


def _check_option(option: StrategyOption) -> None:
    if option.kind not in OPTION_KINDS:
        raise ValueError(f"option {option.key}: kind {option.kind!r} is not one of {OPTION_KINDS}")
    if option.key.partition(".")[0] != "dist" or not option.flag.startswith("--"):
        raise ValueError(f"option {option.key}: a dist.* key with a --flag")
    if (option.kind == "choice") != bool(option.choices):
        raise ValueError(f"option {option.key}: choices go with kind choice, and only with it")


OPTIONS: Table[str, StrategyOption] = Table(lambda o: o.key, _check_option)
"""Key -> option some strategy takes (add with :func:`register_option`)."""


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
    """The :data:`OPTIONS` keys it takes besides the common ones (passed to its
    constructor by their last part, ``dist.bucket_mb`` as ``bucket_mb``); refused for
    other strategies."""
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


def _check_strategy(entry: StrategyEntry) -> None:
    """Its options are declared and its study configurations are not another's."""
    for key in entry.options:
        if key not in OPTIONS:
            raise ValueError(
                f"strategy {entry.name}: option {key} is not declared (register_option first)"
            )
    taken = {v.name: s.name for s in STRATEGIES.values() if s.name != entry.name
             for v in s.study_variants()}  # fmt: skip
    for v in entry.study_variants():
        if v.name in taken:
            raise ValueError(f"study configuration {v.name!r} is {taken[v.name]}'s already")


STRATEGIES: Table[str, StrategyEntry] = Table(lambda e: e.name, _check_strategy)
"""Name -> entry, in registration order (add with :func:`register_strategy`)."""
register_strategy = STRATEGIES.add
unregister_strategy = STRATEGIES.remove
register_option = OPTIONS.add
unregister_option = OPTIONS.remove


def capabilities(strategy: object) -> Capabilities:
    """What the strategy named ``strategy`` does (a record's text: a name nobody
    registered, or no name, does nothing this version knows of)."""
    entry = STRATEGIES.get(strategy) if isinstance(strategy, str) else None
    return entry.capabilities if entry is not None else Capabilities()


def precheck_strategy(cfg: Any) -> None:
    """Run the chosen strategy's own checks of a RunConfig (its ``precheck``), if any."""
    target = STRATEGIES[cfg.dist.strategy].precheck
    if target:
        load(target)(cfg)


def strategy_names() -> tuple[str, ...]:
    """Every ``--strategy`` name, in registration order."""
    return tuple(STRATEGIES)


def multiprocess_names() -> tuple[str, ...]:
    """The strategies that run one process per device."""
    return tuple(n for n, e in STRATEGIES.items() if e.multiprocess)


def strategy_options() -> tuple[str, ...]:
    """Every ``dist.*`` key some registered strategy takes for itself."""
    return tuple(dict.fromkeys(k for e in STRATEGIES.values() for k in e.options))


def option_owners(key: str) -> tuple[str, ...]:
    """The strategies that take the option ``key``."""
    return tuple(n for n, e in STRATEGIES.items() if key in e.options)


def study_variants() -> dict[str, tuple[StrategyEntry, Variant]]:
    """The strategies study's configurations: name -> (its strategy, the variant)."""
    return {v.name: (e, v) for e in STRATEGIES.values() for v in e.study_variants()}
