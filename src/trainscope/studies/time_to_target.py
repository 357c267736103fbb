"""``study time-to-target``: which recipe reaches a target (``val_loss<=1.88``) soonest.

Two phases, in one study directory:

1. **Search**, one seed each: the candidate recipes of ``--recipes FILE``, or a built-in
   coordinate search from the run's own recipe. The built-in search tries one knob at a
   time (optimizer, learning rate, Muon's learning rate and Newton-Schulz iterations,
   batch size, the schedule's length, warm-up, schedule shape) on top of the best recipe
   so far and keeps a change only if it met the target sooner in training time (or,
   while nothing meets it, came closer). It stops when the knobs are done or
   ``--search-budget`` is spent.
2. **Finals**: the ``--finalists`` best candidates, and the starting recipe (``default``)
   to compare with, each trained again on ``--repeats`` new seeds. The search's run is
   not counted in the finals: a recipe chosen for one lucky seed would otherwise carry
   that luck into its median.

Every candidate trains until the target or ``--time-limit`` seconds of training,
evaluating every ``--eval-every-steps`` steps on the same fixed validation windows, each
in a process of its own (process time is then each run's own). Decisions are read back
from the run records, so rerunning the command resumes the study where it stopped.
"""

from __future__ import annotations

import functools
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from trainscope.config import from_dict, merge
from trainscope.errors import ConfigError
from trainscope.records.jsonio import try_json_object
from trainscope.records.study_dir import PlannedRun, StudyPlan
from trainscope.records.view import SummaryView
from trainscope.studies.base import (
    PlanRequest,
    PlanResult,
    positive,
    share_core_budget,
    study_planner,
)
from trainscope.util.checks import show
from trainscope.util.safe_yaml import MAX_YAML_BYTES, safe_load_yaml
from trainscope.util.target import Target, parse_target

DEFAULT = "default"
"""The candidate that changes nothing: the recipe the study started from."""
DEFAULT_TIME_LIMIT_S = 300.0
DEFAULT_EVAL_EVERY = 50
MAX_RECIPES = 64
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,59}")
# The flags of the settings the built-in search varies (its candidates' command lines).
FLAGS = {
    "train.optimizer": "--optimizer",
    "train.lr": "--lr",
    "train.muon_lr": "--muon-lr",
    "train.muon_ns_steps": "--muon-ns-steps",
    "data.batch_size": "--batch-size",
    "train.epochs": "--epochs",
    "train.max_steps_per_epoch": "--max-steps-per-epoch",
    "train.warmup_steps": "--warmup-steps",
    "train.schedule": "--schedule",
    "train.eval_every_steps": "--eval-every-steps",
}
_SHORT = {"train.lr": "lr", "train.muon_lr": "mlr", "train.muon_ns_steps": "ns",
          "data.batch_size": "b",
          "train.epochs": "ep", "train.max_steps_per_epoch": "steps",
          "train.warmup_steps": "wu"}  # fmt: skip


@dataclass(frozen=True)
class Outcome:
    """What one candidate's run showed: met (and when, in training time) or the best
    figure it reached; ``cost_s`` is what it took of the search budget."""

    reached: bool
    train_s: float | None
    best: float | None
    cost_s: float
    failed: bool = False


def flags_text(overrides: dict[str, Any]) -> str:
    """A candidate's settings as run flags (``--set KEY=VALUE`` for any other key)."""
    parts = []
    for key, value in overrides.items():
        shown = f"{value:g}" if isinstance(value, float) else str(value)
        parts.append(f"{FLAGS[key]} {shown}" if key in FLAGS else f"--set {key}={shown}")
    return " ".join(parts)


def candidate_name(overrides: dict[str, Any]) -> str:
    """A short, path-safe name from a candidate's settings (``muon-lr0.002-b128``)."""
    if not overrides:
        return DEFAULT
    parts = []
    for key, value in sorted(overrides.items()):
        shown = f"{value:g}" if isinstance(value, float) else str(value)
        parts.append(_SHORT.get(key, "") + shown)
    return re.sub(r"[^A-Za-z0-9._-]", "_", "-".join(parts))[:60]


def _get(config: dict[str, Any], key: str) -> Any:
    section, _, name = key.partition(".")
    return (config.get(section) or {}).get(name)


def _scaled(value: Any, factor: float, whole: bool) -> Any:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return None
    out = value * factor
    return max(1, int(round(out))) if whole else float(f"{out:.3g}")


KNOBS = ("optimizer", "lr", "muon_lr", "ns_steps", "batch", "length", "warmup", "schedule")
"""The built-in search's knobs, in the order it tries them."""


def knob_alternatives(base: dict[str, Any], current: dict[str, Any], knob: str) -> list[dict]:
    """The override sets the built-in search tries for ``knob`` on top of ``current``
    (the best settings so far); an alternative whose value is unknown is left out."""
    now = merge(base, current)

    def scaled(key: str, factors: tuple[float, ...], whole: bool) -> list[dict]:
        values = [_scaled(_get(now, key), f, whole) for f in factors]
        return [{key: v} for v in values if v is not None]

    opt = _get(now, "train.optimizer")
    if knob == "optimizer":  # Muon first: the speedruns' optimizer; AdamW over SGD
        return [{"train.optimizer": "muon" if opt == "adamw" else "adamw"}] if opt != "muon" else []
    if knob == "lr":
        return scaled("train.lr", (2.0, 0.5), False)
    if knob == "muon_lr":
        return scaled("train.muon_lr", (2.0, 0.5), False) if opt == "muon" else []
    if knob == "ns_steps":  # fewer Newton-Schulz iterations: a cheaper, rougher update
        steps = _get(now, "train.muon_ns_steps") or 5
        return [{"train.muon_ns_steps": n} for n in (3, 5) if n != steps] if opt == "muon" else []
    if knob == "batch":
        return scaled("data.batch_size", (2.0, 0.5), True)
    if knob == "length":  # the schedule's horizon: a shorter one decays sooner
        steps = "train.max_steps_per_epoch"
        return scaled(steps if _get(now, steps) else "train.epochs", (0.5, 0.25, 2.0), True)
    if knob == "warmup":
        warm = _get(now, "train.warmup_steps") or 0
        return [{"train.warmup_steps": w} for w in (0, max(100, 2 * warm)) if w != warm]
    sched = _get(now, "train.schedule")
    return [{"train.schedule": s} for s in ("cosine", "constant", "one-cycle") if s != sched]


def _better(target: Target, a: Outcome | None, b: Outcome | None) -> bool:
    """Whether outcome ``a`` beats ``b``: met sooner, or met where ``b`` was not, or
    (neither met) a figure closer to the target."""
    if a is None or a.failed:
        return False
    if b is None or b.failed:
        return True
    if a.reached != b.reached:
        return a.reached
    if a.reached:
        return a.train_s is not None and b.train_s is not None and a.train_s < b.train_s
    return target.better(a.best, b.best)


def outcome_of(run_dir: Path, limit_s: float) -> Outcome | None:
    """A finished run's outcome from its summary.json (None: not run yet)."""
    summary = try_json_object(run_dir / "summary.json")
    view = SummaryView(summary)
    if summary is None or view.status == "running":
        return None
    t = view.target
    cost = view.process_time_s or view.wall_time_s
    cost = cost if cost is not None else limit_s
    if view.status != "completed":
        return Outcome(False, None, None, cost, failed=True)
    best = (t.get("best") or {}).get("value")
    return Outcome(t.get("reached") is True, t.get("train_time_s"), best, cost)


def _run(
    name: str, overrides: dict[str, Any], repeat: int, group: str, seed: int,
    flags: str | None = None,
) -> PlannedRun:  # fmt: skip
    """One planned run of a candidate: repeat 1 is its search run, 2.. its finals;
    ``flags``: how the user wrote them (a recipes file), else from the overrides."""
    return PlannedRun(
        config=name, repeat=repeat, group=group,
        labels={"flags": flags or flags_text(overrides), "seed": seed + repeat - 1},
        overrides={**overrides, "train.seed": seed + repeat - 1},
    )  # fmt: skip


def _settings(run: PlannedRun) -> dict[str, Any]:
    """A candidate's own settings (its planned overrides less the seed and threads)."""
    return {k: v for k, v in run.overrides.items() if k not in ("train.seed", "runtime.threads")}


@study_planner("time-to-target")
def plan(
    request: PlanRequest,
    *,
    recipes: list[dict[str, Any]] | None = None,
    finalists: int = 2,
    search_budget_s: float = 1800.0,
) -> PlanResult:
    """The search's first runs: ``default`` and the recipes given (the built-in search
    adds its candidates one at a time, see :func:`more`)."""
    base = request.base_config
    train = base.setdefault("train", {})
    if not train.get("target"):
        raise ConfigError("study time-to-target needs --target METRIC<=X (e.g. val_loss<=1.88)")
    target = parse_target(train["target"])
    # The study's defaults are part of its base config (study.json keeps them).
    train["time_limit_s"] = train.get("time_limit_s") or DEFAULT_TIME_LIMIT_S
    train["eval_every_steps"] = train.get("eval_every_steps") or DEFAULT_EVAL_EVERY
    seed = int(train.get("seed") or 0)
    given = [r for r in recipes or [] if r["overrides"]]
    for r in given:  # each checked here, so that the error names its recipe
        try:
            from_dict(merge(base, r["overrides"]))
        except ConfigError as e:
            raise ConfigError(f"--recipes: entry {r['name']}: {e}") from None
    runs = [_run(DEFAULT, {}, 1, "search", seed)]
    runs += [_run(r["name"], r["overrides"], 1, "search", seed, r["flags"]) for r in given]
    return runs, {
        "target": target.text,
        "search": "recipes" if recipes is not None else "built-in",
        "recipes": given,
        "finalists": finalists,
        "search_budget_s": search_budget_s if recipes is None else None,
    }


def more(plan: StudyPlan, study_dir: Path) -> list[PlannedRun]:
    """The next runs: the built-in search's next candidate, or (the search done) the
    finalists' repeats; none once the finals are planned."""
    if any(r.group == "final" for r in plan.runs):
        return []
    base, opts = plan.base_config, plan.options
    train = base["train"]
    target, limit = parse_target(train["target"]), float(train["time_limit_s"])
    seed = int(train.get("seed") or 0)
    search = [r for r in plan.runs if r.group == "search" and not r.warmup]
    outcomes = {r.config: outcome_of(study_dir / r.rel_dir, limit) for r in search}
    if opts.get("search") == "built-in":
        budget = float(opts.get("search_budget_s") or 0.0)
        nxt = next_candidate(base, target, outcomes, budget, limit)
        if nxt is not None:
            return _checked(plan, [_run(candidate_name(nxt), nxt, 1, "search", seed)])
    chosen = finalists(target, search, outcomes, int(opts.get("finalists") or 1))
    repeats = int(opts.get("repeats") or 1)
    runs = [_run(r.config, _settings(r), k, "final", seed, r.labels.get("flags"))
            for k in range(2, repeats + 2) for r in chosen]  # fmt: skip
    return _checked(plan, runs)


def _checked(plan: StudyPlan, runs: list[PlannedRun]) -> list[PlannedRun]:
    """New runs on the study's core budget, each configuration checked (one that cannot
    run is planned as not applicable, with the reason)."""
    share_core_budget(plan.base_config, runs)
    for r in runs:
        try:
            from_dict(merge(plan.base_config, r.overrides))
        except ConfigError as e:
            r.applicable, r.reason = False, str(e)
    return runs


def next_candidate(
    base: dict[str, Any], target: Target, outcomes: dict[str, Outcome | None],
    budget_s: float, limit_s: float,
) -> dict[str, Any] | None:  # fmt: skip
    """Replay the coordinate search over the outcomes so far: the settings of the next
    candidate to try, or None (every knob tried, or the budget would be overrun)."""
    best, best_over = outcomes.get(DEFAULT), {}
    spent = sum(o.cost_s for o in outcomes.values() if o is not None)
    for knob in KNOBS:
        for alt in knob_alternatives(base, best_over, knob):
            over = {k: v for k, v in {**best_over, **alt}.items() if _get(base, k) != v}
            name = candidate_name(over)
            if name in outcomes:
                if _better(target, outcomes[name], best):
                    best, best_over = outcomes[name], over
                continue
            if spent + limit_s > budget_s:
                return None
            return over
    return None


def finalists(
    target: Target, search: list[PlannedRun], outcomes: dict[str, Outcome | None], k: int
) -> list[PlannedRun]:
    """The ``k`` best candidates of the search and ``default`` (always, to compare with)."""

    def order(a: PlannedRun, b: PlannedRun) -> int:
        oa, ob = outcomes.get(a.config), outcomes.get(b.config)
        return -1 if _better(target, oa, ob) else 1 if _better(target, ob, oa) else 0

    ran = [r for r in search if (o := outcomes.get(r.config)) is not None and not o.failed]
    top = sorted(ran, key=functools.cmp_to_key(order))[:k]
    default = next(r for r in search if r.config == DEFAULT)
    return top if default in top else [default, *top]


def read_recipes(path: str, parse_flags: Any) -> list[dict[str, Any]]:
    """``--recipes FILE``: a YAML list of ``{name, flags}`` (run flags as one would type
    them) or ``{name, set: {KEY: VALUE}}`` entries; one clear line for anything else."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"--recipes {show(path)}: no such file")
    raw = p.open("rb").read(MAX_YAML_BYTES + 1)
    if len(raw) > MAX_YAML_BYTES:
        raise ConfigError(f"--recipes {show(path)} is larger than {MAX_YAML_BYTES} bytes")
    try:
        data = safe_load_yaml(raw.decode("utf-8-sig"), f"--recipes {path}")
    except (UnicodeDecodeError, yaml.YAMLError) as e:
        raise ConfigError(f"--recipes {show(path)} is not a YAML list of recipes: {e}") from None
    if not isinstance(data, list) or not data or len(data) > MAX_RECIPES:
        raise ConfigError(
            f"--recipes {show(path)} must be a YAML list of 1 to {MAX_RECIPES} recipes, "
            'each {name: NAME, flags: "--lr 0.002 ..."} or {name: NAME, set: {KEY: VALUE}}'
        )
    recipes = [_recipe(i, entry, parse_flags) for i, entry in enumerate(data, 1)]
    seen: set[str] = set()
    for i, r in enumerate(recipes, 1):
        if r["name"] in seen:  # two runs of one name: the second would overwrite the first
            raise ConfigError(f"--recipes: entry {i}: the name {show(r['name'])} is given twice")
        seen.add(r["name"])
    return recipes


RECIPE_KEYS = ("name", "flags", "set")
STUDY_SETS = ("out", "overwrite", "resume", "train.seed", "train.target", "runtime.threads")
"""Settings the study makes for each run (threads: the core budget it shares out), which
a recipe may not set: its value would be replaced, silently."""
NOT_SETTINGS = ("--config",)
"""Run flags that set no config key: in a recipe, they would be ignored."""


def _not_a_setting(flags: str) -> str | None:
    """The first of :data:`NOT_SETTINGS` in ``flags`` (as argparse matches them: whole,
    ``--flag=value``, or an unambiguous prefix), or None."""
    for word in shlex.split(flags):  # already split once by the flags' parser
        option = word.partition("=")[0]
        for flag in NOT_SETTINGS:
            if option.startswith("--") and len(option) > 2 and flag.startswith(option):
                return flag
    return None


def _recipe(i: int, entry: Any, parse_flags: Any) -> dict[str, Any]:
    """One entry of a recipes file, checked: its name, flags and overrides."""
    if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
        raise ConfigError(f"--recipes: entry {i} needs a name (and flags or set)")
    name = entry["name"]
    if not _NAME.fullmatch(name) or name == DEFAULT:
        raise ConfigError(
            f"--recipes: entry {i}: name {show(name)} must be 1-60 letters, digits, '.', '_' "
            f"or '-' (and not {DEFAULT!r}, the starting recipe's name)"
        )
    unknown = [k for k in entry if k not in RECIPE_KEYS]
    if unknown:  # a misspelt "flags" would leave the recipe the starting one, unnoticed
        raise ConfigError(
            f"--recipes: entry {name}: unknown key {show(str(unknown[0]))} (a recipe has "
            f"{', '.join(RECIPE_KEYS[:-1])} and {RECIPE_KEYS[-1]})"
        )
    overrides: dict[str, Any] = {}
    flags = entry.get("flags")
    if flags is not None:
        if not isinstance(flags, str):
            raise ConfigError(f"--recipes: entry {name}: flags must be one line of run flags")
        overrides.update(parse_flags(flags))
        ignored = _not_a_setting(flags)
        if ignored is not None:
            raise ConfigError(
                f"--recipes: entry {name}: {ignored} is not a setting of the recipe; give "
                "the study's own --config, and the recipe run flags or set: {KEY: VALUE}"
            )
    settings = entry.get("set") or {}
    if not isinstance(settings, dict) or not all(isinstance(k, str) for k in settings):
        raise ConfigError(f"--recipes: entry {name}: set must map KEY to VALUE")
    overrides.update(settings)
    for key in STUDY_SETS:
        if key in overrides:
            raise ConfigError(f"--recipes: entry {name} may not set {key} (the study does)")
    if not overrides:  # it would be the starting recipe again, and so left out
        raise ConfigError(
            f"--recipes: entry {name} changes nothing: give it flags (e.g. --lr 0.002) or "
            "set: {KEY: VALUE}"
        )
    return {"name": name, "flags": flags or flags_text(settings), "overrides": overrides}


def options_from_args(args: Any, overrides: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The study's flags as :func:`plan`'s keyword arguments (registry hook)."""
    notes = []
    recipes = None
    if args.recipes:
        recipes = read_recipes(args.recipes, args.parse_run_flags)
    if "train.time_limit_s" not in overrides:
        notes.append(f"each candidate trains until the target or {DEFAULT_TIME_LIMIT_S:g} s of "
                     "training unless --time-limit or the config says otherwise")  # fmt: skip
    if not args.search_budget > 0:
        raise ConfigError(f"--search-budget must be > 0 seconds, got {args.search_budget}")
    options = {"recipes": recipes, "finalists": positive("finalists", args.finalists),
               "search_budget_s": float(args.search_budget)}  # fmt: skip
    return options, notes
