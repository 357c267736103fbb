"""``trainscope study NAME -- SCRIPT.py [ARGS]``: a study's plan on the user's own script.

The same plan as on trainscope's workloads (configurations x repeats, alternated, one
discarded warm-up first), where each configuration is a set of ``--inject`` settings on
the unchanged script (:mod:`trainscope.studies.script_runs` runs them):

- ``loader``: one configuration per ``num_workers`` value (``--iter-workers``), and with
  ``pin_memory`` on a CUDA device; the script's own training, not data-only epochs (a
  script's loading cannot be run without its model);
- ``precision``: fp32 (the script as it is) and ``precision=bf16``; fp16 and tf32 are
  planned as not applicable, with the reason (fp16 needs a GradScaler in the script; tf32
  is ``matmul_precision=high`` on a CUDA device only);
- ``checkpointing``: ``none`` (as it is) and each policy as ``activation_checkpointing``;
- ``profile``: the script as it is, repeated.

Every configuration shares the same torch threads (``--threads``, default the usable
cores), so they compare at one core budget.
"""

from __future__ import annotations

from typing import Any

from trainscope import registry
from trainscope.config import available_cpus, checkpointing_policy
from trainscope.errors import ConfigError
from trainscope.records.study_dir import PlannedRun, StudyPlan
from trainscope.studies.base import finish_plan, plan_options, repeats_of
from trainscope.studies.script_runs import inject_overrides

CUDA_ONLY = "needs a CUDA device; this machine has none"
FP16_REASON = (
    "fp16 needs a GradScaler around the script's backward, clipping and step, which "
    "trainscope does not rewire from outside (add torch.amp.GradScaler to the script)"
)


def _config(name: str, repeats: int, labels: dict[str, Any], inject: dict[str, Any],
            reason: str | None = None) -> list[PlannedRun]:  # fmt: skip
    labels = {**labels, "inject": " ".join(f"{k}={v}" for k, v in inject.items()) or "none"}
    return repeats_of(name, repeats, labels=labels, overrides=inject_overrides(inject),
                      applicable=reason is None, reason=reason)  # fmt: skip


def loader_runs(repeats: int, cuda: bool, *, iter_workers: list[int], **_: Any) -> list[PlannedRun]:
    """One configuration per worker count (and pinned on CUDA)."""
    runs: list[PlannedRun] = []
    for w in iter_workers:
        runs += _config(f"w{w}", repeats, {"num_workers": w, "variant": "default"},
                        {"num_workers": w})  # fmt: skip
        runs += _config(f"w{w}-pin", repeats, {"num_workers": w, "variant": "pin_memory"},
                        {"num_workers": w, "pin_memory": True},
                        None if cuda else f"pin_memory {CUDA_ONLY}")  # fmt: skip
    return runs


def precision_runs(
    repeats: int, cuda: bool, *, precisions: list[str], **_: Any
) -> list[PlannedRun]:
    """fp32 as the script is; bf16 injected; fp16 and (off CUDA) tf32 not applicable."""
    settings: dict[str, tuple[dict[str, Any], str | None]] = {
        "fp32": ({}, None),
        "bf16": ({"precision": "bf16"}, None),
        "fp16": ({}, FP16_REASON),
        "tf32": ({"matmul_precision": "high"}, None if cuda else f"tf32 {CUDA_ONLY}"),
    }
    runs: list[PlannedRun] = []
    for p in precisions:
        inject, reason = settings[p]
        runs += _config(p, repeats, {"precision": p}, inject, reason)
    return runs


def checkpointing_runs(
    repeats: int, cuda: bool, *, policies: list[str], **_: Any
) -> list[PlannedRun]:
    """``none`` as the script is; each other policy injected."""
    runs: list[PlannedRun] = []
    for p in policies:
        checkpointing_policy(p)  # a bad name: one line before anything runs
        inject = {} if p == "none" else {"activation_checkpointing": p}
        runs += _config(p, repeats, {"checkpointing": p}, inject)
    return runs


def profile_runs(repeats: int, cuda: bool, **_: Any) -> list[PlannedRun]:
    """The script as it is, repeated."""
    return _config("run", repeats, {}, {})


def script_studies() -> list[str]:
    """The studies that run on a script (registered with ``script=``)."""
    return [name for name, entry in registry.STUDIES.items() if entry.script]


def plan_script_study(kind: str, base: dict[str, Any], *, cuda: bool = False, repeats: int = 3,
                      warmup: bool = True, **options: Any) -> StudyPlan:  # fmt: skip
    """``kind``'s plan on the script of ``base`` (:func:`script_runs.script_base`); every
    configuration at the base's threads (default: the usable cores)."""
    entry = registry.STUDIES.get(kind)
    if entry is None or entry.script is None:
        raise ConfigError(f"study {kind} needs trainscope's own workloads; on a script: "
                          f"{', '.join(script_studies())}")  # fmt: skip
    spec = base["script"]
    if spec.get("threads") is None and "threads" not in spec.get("inject", {}):
        spec["threads"] = available_cpus()  # one core budget for every configuration
    runs = registry.load(entry.script)(repeats, cuda, **options)
    own = {k: v for k, v in options.items() if k in ("iter_workers", "precisions", "policies")}
    opts = plan_options(repeats, warmup, "cuda" if cuda else "cpu", **own, script=True,
                        steps=spec["steps"], core_budget=spec.get("threads"))  # fmt: skip
    return finish_plan(kind, base, opts, runs, warmup, equal_cores=False)


__all__ = [
    "checkpointing_runs",
    "loader_runs",
    "plan_script_study",
    "precision_runs",
    "profile_runs",
    "script_studies",
]
