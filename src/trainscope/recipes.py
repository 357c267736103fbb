"""Each built-in workload's default training recipe (torch-free).

A recipe is the optimizer, learning rate, schedule, weight decay and batch size a
workload trains with when the user does not say otherwise: the one its field uses, or
one measured here to converge fast (figures in docs/benchmarks.md, "Default recipes").
Precedence, lowest first: the generic defaults of :mod:`trainscope.config`, the
workload's recipe, a ``--config`` file, command-line flags. A recipe only fills settings
nobody gave, so a saved ``config.yaml`` (every setting written out) replays unchanged.

The learning rate, betas, momentum and weight decay are tuned for the recipe's
optimizer: when the user names another optimizer, those four fall back to the generic
defaults rather than, say, SGD running at AdamW's lr of 5e-5. muon over an AdamW recipe
(and adamw over a muon one) keeps them: its AdamW trains everything Muon does not.
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from trainscope import registry

# Settings that belong to one optimizer: dropped from a recipe when another is named.
OPTIMIZER_TIED = ("lr", "betas", "momentum", "weight_decay")


@dataclass(frozen=True)
class Recipe:
    """Default settings for one workload (and, for text-cls, one kind of model)."""

    title: str
    """What the recipe is and where it comes from, for ``run --help``."""
    train: dict[str, Any] = field(default_factory=dict)
    """TrainConfig fields."""
    data: dict[str, Any] = field(default_factory=dict)
    """DataConfig fields."""


# The generic defaults (SGD lr 0.05, momentum 0.9, constant lr, 30 epochs) left digits at
# the edge of stability: the validation accuracy swung between 0.97 and 0.75 from epoch
# to epoch and the final figure (93-99%) depended on the seed, the thread count and the
# CPU's vector instructions. Standardised inputs (workloads.builtin), a lower lr with a
# short warm-up, a cosine decay, a little weight decay and 45 epochs settle it: >= 97% on
# seeds 0-4 under AVX-512, AVX2 and no-vector kernels, median 98% over 32 seeds (figures
# and the spread in docs/benchmarks.md, "The default run across seeds and CPUs").
_STABLE_SGD = {
    "optimizer": "sgd",
    "lr": 0.02,
    "momentum": 0.9,
    "weight_decay": 5e-4,
    "schedule": "cosine",
    "warmup_steps": 100,
}
DIGITS = Recipe(
    "SGD lr 0.02, momentum 0.9, weight decay 5e-4, 100 warm-up steps then cosine decay, "
    "batch 32, 45 epochs (measured here: >= 97% test accuracy on seeds 0-4 under every "
    "CPU kernel tried)",
    train={**_STABLE_SGD, "epochs": 45},
    data={"batch_size": 32},
)
# The same optimizer settings; the run's length is the user's (a throughput workload).
SYNTHETIC = Recipe(
    "as digits, without its epoch count: SGD lr 0.02, momentum 0.9, weight decay 5e-4, "
    "100 warm-up steps then cosine decay, batch 32",
    train=dict(_STABLE_SGD),
    data={"batch_size": 32},
)
# Found by `trainscope study time-to-target` to 98% test accuracy on an 8,000 / 2,000
# split (docs/benchmarks.md, "Time to target"): 2.28x less training time to it than the
# earlier recipe (AdamW 3e-3, one-cycle, 30 epochs), and 98.75% at the end of its 8 epochs.
MNIST = Recipe(
    "measured here, fastest to 98% test accuracy (study time-to-target, 3 seeds): AdamW "
    "lr 6e-3, 100 warm-up steps then cosine decay, batch 64, 8 epochs (98.75% median test "
    "accuracy on 8,000 MNIST images)",
    train={"optimizer": "adamw", "lr": 6e-3, "weight_decay": 0.0, "schedule": "cosine",
           "warmup_steps": 100, "epochs": 8},
    data={"batch_size": 64},
)  # fmt: skip
GPT_CHAR = Recipe(
    "nanoGPT's shakespeare_char: AdamW lr 1e-3, betas 0.9/0.99, weight decay 0.1, "
    "100 warm-up steps, cosine decay to lr/10, gradient clipping at 1.0, batch 64",
    train={
        "optimizer": "adamw",
        "lr": 1e-3,
        "betas": [0.9, 0.99],
        "weight_decay": 0.1,
        "schedule": "cosine",
        "warmup_steps": 100,
        "min_lr_ratio": 0.1,
        "grad_clip": 1.0,
    },
    data={"batch_size": 64},
)
# Measured by `trainscope study time-to-target` on the cpu preset (nanoGPT's README CPU
# model) to val loss 1.88: Muon on the hidden matrices with nanoGPT's AdamW for the rest,
# batch 12. Two studies on two machines: first a 1,000-step schedule (Muon lr 0.02, 100
# warm-up steps) against nanoGPT's own recipe, which never met it in 2,000 steps; then
# this 600-step one, 1.11x less training time to 1.88 than the 1,000-step one, beyond the
# noise, n=3 (docs/benchmarks.md, "Time to target").
GPT_CHAR_CPU = Recipe(
    "measured here, fastest to val loss 1.88 (study time-to-target, 3 seeds): Muon lr "
    "0.03 on the hidden matrices (Newton-Schulz in fp32 on a CPU without bf16), AdamW lr "
    "1e-3, betas 0.9/0.99, weight decay 0.1 on the rest, 50 warm-up steps, cosine to "
    "lr/10 over 600 steps (1 epoch), clipping 1.0, batch 12",
    train={**GPT_CHAR.train, "optimizer": "muon", "muon_lr": 0.03, "warmup_steps": 50,
           "epochs": 1, "max_steps_per_epoch": 600},
    data={"batch_size": 12},
)  # fmt: skip
# Hugging Face Trainer's AdamW with a linear warm-up and decay, at the learning rates
# BERT fine-tuning uses (5e-5), LoRA uses (5e-4: only the small adapters train) and a
# small BERT trained from random weights needs (1e-3).
_TEXT_TRAIN = {"optimizer": "adamw", "weight_decay": 0.01, "schedule": "linear"}
TEXT_CLS_SCRATCH = Recipe(
    "Hugging Face Trainer style, model from random weights: AdamW lr 1e-3, weight decay "
    "0.01, 50 warm-up steps then linear decay, batch 32",
    train={**_TEXT_TRAIN, "lr": 1e-3, "warmup_steps": 50},
    data={"batch_size": 32},
)
TEXT_CLS_PRETRAINED = Recipe(
    "Hugging Face Trainer style, fine-tuning a pretrained model: AdamW lr 5e-5, weight "
    "decay 0.01, 50 warm-up steps then linear decay, batch 32",
    train={**_TEXT_TRAIN, "lr": 5e-5, "warmup_steps": 50},
    data={"batch_size": 32},
)
TEXT_CLS_LORA = Recipe(
    "Hugging Face Trainer style, LoRA adapters on a pretrained model: AdamW lr 5e-4, "
    "weight decay 0.01, 50 warm-up steps then linear decay, batch 32",
    train={**_TEXT_TRAIN, "lr": 5e-4, "warmup_steps": 50},
    data={"batch_size": 32},
)


def digits_recipe(options: Mapping[str, Any]) -> Recipe:
    """digits' recipe (its registry entry's ``recipe``)."""
    return DIGITS


def synthetic_recipe(options: Mapping[str, Any]) -> Recipe:
    """synthetic's recipe."""
    return SYNTHETIC


def mnist_recipe(options: Mapping[str, Any]) -> Recipe:
    """mnist's recipe."""
    return MNIST


def gpt_char_recipe(options: Mapping[str, Any]) -> Recipe:
    """gpt-char's recipe: the CPU one for ``--preset cpu``."""
    return GPT_CHAR_CPU if options.get("preset") == "cpu" else GPT_CHAR


def text_cls_recipe(options: Mapping[str, Any]) -> Recipe:
    """text-cls's recipe: from scratch, fine-tuning, or LoRA."""
    if not options.get("pretrained"):
        return TEXT_CLS_SCRATCH
    return TEXT_CLS_LORA if options.get("lora_r") else TEXT_CLS_PRETRAINED


def recipe_for(workload: Any, options: Any) -> Recipe | None:
    """The recipe of a workload given its options (its registry entry's), or None
    (generic defaults)."""
    options = options if isinstance(options, Mapping) else {}
    entry = registry.WORKLOADS.get(workload) if isinstance(workload, str) else None
    if entry is None or entry.recipe is None:
        return None
    recipe = registry.load(entry.recipe)(options)
    return recipe if isinstance(recipe, Recipe) else None


def apply_recipe(data: dict[str, Any], default_workload: str) -> dict[str, Any]:
    """Nested config data with the workload's recipe filling what it does not set.

    ``data`` is not modified; sections that are not mappings are left for the config's
    own checks to refuse.
    """
    workload = data.get("workload")
    workload = workload if isinstance(workload, Mapping) else {}
    recipe = recipe_for(workload.get("name", default_workload), workload.get("options"))
    if recipe is None:
        return data
    out = dict(data)
    for section, values in (("train", recipe.train), ("data", recipe.data)):
        given = out.get(section)
        if given is None:
            given = {}
        if not isinstance(given, Mapping):
            continue
        values = dict(values)
        own = values.get("optimizer")
        named = given.get("optimizer", own)
        # muon keeps an AdamW recipe's settings (AdamW trains everything Muon does not),
        # and adamw a muon recipe's (they are its AdamW's).
        pair = {named, own}
        if section == "train" and named != own and pair != {"muon", "adamw"}:
            for key in OPTIMIZER_TIED:
                values.pop(key, None)
        out[section] = {**values, **given}
    return out


def recipes_help() -> str:
    """The default recipes, one paragraph per workload, for ``run --help``."""
    rows = [
        ("digits", DIGITS.title),
        ("synthetic", SYNTHETIC.title),
        ("your own", "generic defaults: SGD lr 0.05, momentum 0.9, constant, batch 32"),
        ("mnist", MNIST.title),
        ("gpt-char", GPT_CHAR.title),
        ("gpt-char --preset cpu", GPT_CHAR_CPU.title),
        ("text-cls (from scratch)", TEXT_CLS_SCRATCH.title),
        ("text-cls --pretrained", TEXT_CLS_PRETRAINED.title),
        ("text-cls --pretrained --lora-r R", TEXT_CLS_LORA.title),
    ]
    builtin = ("digits", "synthetic", "mnist", "gpt-char", "text-cls")
    for name in (n for n in registry.WORKLOADS if n not in builtin):  # registered ones
        recipe = recipe_for(name, {})
        rows.append((name, recipe.title if recipe else "generic defaults"))
    lines = ["default recipes (any flag or --config setting overrides its part):"]
    rows.append(
        (
            "another --optimizer",
            "drops the recipe's lr, betas, momentum and weight decay (tuned for its own "
            "optimizer) back to the generic defaults",
        )
    )
    for name, text in rows:
        lines.append(
            textwrap.fill(f"{name}: {text}", 78, initial_indent="  ", subsequent_indent="    ")
        )
    return "\n".join(lines)
