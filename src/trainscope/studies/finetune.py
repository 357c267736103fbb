"""``study finetune``: full fine-tuning against LoRA adapters of a pretrained text model.

The same pretrained encoder, data, seed and number of steps, trained once with every
weight trainable and once per LoRA rank with the encoder frozen: what training fewer
parameters saves (trainable parameters, gradients and optimizer states, counted; time
per stage, measured) and what it costs in dev accuracy, after the same steps and at the
same training time. Each configuration trains at its own recipe's learning rate (full:
5e-5, LoRA: 5e-4, Hugging Face Trainer style; see ``run --help``) unless ``--lr`` sets
one for all.
"""

from __future__ import annotations

from typing import Any

from trainscope.errors import ConfigError
from trainscope.recipes import recipe_for
from trainscope.records.study_dir import PlannedRun
from trainscope.studies.base import PlanRequest, PlanResult, repeats_of, study_planner

DEFAULT_RANKS = (0, 8)


def config_name(rank: int) -> str:
    """A configuration's name: ``full`` for rank 0, else ``lora-rR``."""
    return "full" if rank == 0 else f"lora-r{rank}"


@study_planner("finetune")
def plan(
    request: PlanRequest, *, ranks: list[int] | None = None, own_lr: bool = True
) -> PlanResult:
    """One configuration per LoRA rank (0: full fine-tuning), each repeated; with
    ``own_lr``, each at its recipe's learning rate."""
    ranks = list(DEFAULT_RANKS) if ranks is None else ranks
    workload = request.base_config.get("workload") or {}
    options = workload.get("options") or {}
    if workload.get("name") != "text-cls" or not options.get("pretrained"):
        raise ConfigError(
            "study finetune compares fine-tuning a pretrained model: give --workload "
            "text-cls --pretrained NAME (e.g. ../shared/data/minilm-l6)"
        )
    runs: list[PlannedRun] = []
    for r in ranks:
        overrides: dict[str, Any] = {"workload.options.lora_r": r}
        recipe = recipe_for("text-cls", {**options, "lora_r": r})
        if own_lr and recipe is not None and "lr" in recipe.train:
            overrides["train.lr"] = recipe.train["lr"]
        name = config_name(r)
        runs += repeats_of(name, request.repeats, labels={"finetune": name, "lora_r": r},
                           overrides=overrides)  # fmt: skip
    return runs, {"ranks": ranks, "own_lr": own_lr}


def parse_ranks(text: str) -> list[int]:
    """``--lora-ranks 0,8,16`` -> [0, 8, 16] (0: full fine-tuning); one clear error if not."""
    ranks: list[int] = []
    for part in str(text).split(","):
        part = part.strip()
        if not part:
            continue
        if not part.isdigit() or int(part) > 4096:
            raise ConfigError(f"--lora-ranks: ranks 0-4096 separated by commas, got {text!r}")
        ranks.append(int(part))
    if not ranks or len(set(ranks)) != len(ranks):
        raise ConfigError(f"--lora-ranks: give distinct ranks, got {text!r}")
    return ranks


def options_from_args(args: Any, overrides: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The finetune study's flags as :func:`plan`'s keyword arguments (registry hook):
    text-cls unless a workload is named; each configuration at its recipe's learning
    rate unless ``--lr`` (or ``--set train.lr=``) gives one."""
    if getattr(args, "config", None) is None:
        overrides.setdefault("workload.name", "text-cls")
    return {"ranks": parse_ranks(args.lora_ranks), "own_lr": "train.lr" not in overrides}, []
