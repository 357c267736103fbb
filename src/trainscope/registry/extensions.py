"""Workloads, doctor rules and lab chapters: the registry's smaller tables."""

from __future__ import annotations

from dataclasses import dataclass

from trainscope.registry.base import Table

# --------------------------------------------------------------------------- workloads


@dataclass(frozen=True)
class WorkloadOption:
    """One of a workload's options (``workload.options.KEY``) as the command line takes
    it: its flag, how the text is read, and its help. The value is checked by the
    workload's own ``options`` check; workloads that take the same option declare the same
    flag, and ``run --help`` names them all before it."""

    key: str
    """Its key under ``workload.options`` (``n_layer``)."""
    flag: str
    """Its flag (``--n-layer``)."""
    reads: str = "text"
    """How the flag's text is read: ``text``, ``int``, ``float`` or ``names`` (a
    comma-separated list)."""
    metavar: str = "X"
    help: str = ""


OPTION_READS = ("text", "int", "float", "names")


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
    flags: tuple[WorkloadOption, ...] = ()
    """Its options' flags (``--n-layer``); a config file may set any option it checks."""
    arch: str | None = None
    """``(model, name, sample_shape) -> Arch | None``: its built model read as the
    memory estimator's architecture (:mod:`trainscope.estimate.workload`); None: the
    estimate counts its model states and plans no activations."""


def _check_workload(entry: WorkloadEntry) -> None:
    """Its flags read their text one of the known ways and, where another workload has
    the same flag, set the same option."""
    for option in entry.flags:
        if option.reads not in OPTION_READS or not option.flag.startswith("--"):
            raise ValueError(f"workload {entry.name}: option {option.key} needs a --flag "
                             f"read as one of {', '.join(OPTION_READS)}")  # fmt: skip
        for other in WORKLOADS.values():
            same = [o for o in other.flags if o.flag == option.flag and o.key != option.key]
            if other.name != entry.name and same:
                raise ValueError(f"workload {entry.name}: {option.flag} sets {same[0].key} "
                                 f"for {other.name}, not {option.key}")  # fmt: skip


WORKLOADS: Table[str, WorkloadEntry] = Table(lambda e: e.name, _check_workload)
"""Name -> entry, in registration order (add with :func:`register_workload`)."""
register_workload = WORKLOADS.add
unregister_workload = WORKLOADS.remove


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


RULES: Table[str, RuleEntry] = Table(lambda e: e.name)
"""Name -> entry of the rules registered beyond the built-in ones."""
register_rule = RULES.add
unregister_rule = RULES.remove


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


CHAPTERS: Table[int, Chapter] = Table(lambda c: c.number)
"""Number -> the lab chapters registered beyond the built-in ones."""
register_chapter = CHAPTERS.add
unregister_chapter = CHAPTERS.remove
