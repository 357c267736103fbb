"""The extension points: strategies (and their options), study kinds, workloads, doctor
rules and lab chapters, one entry each (torch-free).

An entry names its code as ``"module:attribute"`` (imported only when used, so ``--help``
and the torch-free reports never import torch) and carries what the rest of trainscope
needs to know without importing it: what a strategy does (its capabilities), the options
it takes, the configurations it adds to the strategies study and how ``collectives
--predict`` models each; a study's planner, report builder, flags, the run settings it
varies (and so refuses from the command line) and its help text; a workload's factory,
options check, layout, data check, recipe and estimator hook. The CLI, config
validation, the doctor, the studies, the reports and the predictions read these tables;
nothing else spells a strategy's or a study's name.

Adding a strategy is a module with a :class:`~trainscope.strategies.base.Strategy` class
plus one :func:`register_strategy` call; a study, a module with a planner (and a report
builder) plus one :func:`register_study` call; likewise a workload, a doctor rule and a
lab chapter. Every table is a :class:`~trainscope.registry.base.Table`; the built-ins are
in :mod:`trainscope.registry.builtins`, registered when this package is imported.
"""

from trainscope.registry import builtins  # noqa: E402, F401  (registers the built-ins)
from trainscope.registry.base import Table, load
from trainscope.registry.extensions import (
    CHAPTERS,
    RULES,
    WORKLOADS,
    Chapter,
    RuleEntry,
    WorkloadEntry,
    WorkloadOption,
    register_chapter,
    register_rule,
    register_workload,
    unregister_chapter,
    unregister_rule,
    unregister_workload,
)
from trainscope.registry.strategies import (
    OPTION_KINDS,
    OPTIONS,
    STRATEGIES,
    Capabilities,
    StrategyEntry,
    StrategyOption,
    Variant,
    capabilities,
    multiprocess_names,
    option_owners,
    precheck_strategy,
    register_option,
    register_strategy,
    strategy_names,
    strategy_options,
    study_variants,
    unregister_option,
    unregister_strategy,
)
from trainscope.registry.studies import (
    RECORD_ONLY,
    STUDIES,
    Flag,
    StudyEntry,
    register_study,
    report_builder,
    unregister_study,
)

__all__ = [
    "CHAPTERS", "OPTIONS", "OPTION_KINDS", "RECORD_ONLY", "RULES", "STRATEGIES", "STUDIES",
    "WORKLOADS", "Capabilities", "Chapter", "Flag", "RuleEntry", "StrategyEntry",
    "StrategyOption", "StudyEntry", "Table", "Variant", "WorkloadEntry", "WorkloadOption",
    "capabilities",
    "load", "multiprocess_names", "option_owners", "precheck_strategy", "register_chapter",
    "register_option", "register_rule", "register_strategy", "register_study",
    "register_workload", "report_builder", "strategy_names", "strategy_options",
    "study_variants", "unregister_chapter", "unregister_option", "unregister_rule",
    "unregister_strategy", "unregister_study", "unregister_workload",
]  # fmt: skip
