"""The Workload interface: a model, its data splits, its loss and its metrics."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import Dataset

from trainscope.errors import ConfigError

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


class Metrics(Protocol):
    """An evaluation accumulator: ``update`` per batch, ``compute`` once at the end.

    ``compute`` returns at least ``loss``; ``accuracy`` and ``per_class_accuracy`` where
    the task has them, and any other named figures (e.g. ``perplexity``).
    """

    def update(self, outputs: torch.Tensor, targets: torch.Tensor, loss: torch.Tensor) -> None:
        """Add one batch (``loss`` is the batch mean)."""

    def compute(self) -> dict[str, Any]:
        """The figures over every batch added."""


def move_to(inputs: Any, device: torch.device) -> Any:
    """Copy a batch's inputs to ``device``: one tensor (images, token ids) or a mapping of
    named tensors (input_ids, attention_mask, ...) that the model receives whole."""
    if isinstance(inputs, torch.Tensor):
        return inputs.to(device, non_blocking=True)
    if isinstance(inputs, Mapping):
        return {k: move_to(v, device) for k, v in inputs.items()}
    return inputs


def model_blocks(model: nn.Module) -> list[nn.Module]:
    """The repeated units of a model (``model.blocks``): what activation checkpointing and
    FSDP wrap one by one. Empty when the model exposes none."""
    blocks = getattr(model, "blocks", None)
    return list(blocks) if blocks is not None else []


def find_blocks(model: nn.Module) -> tuple[str, list[nn.Module]]:
    """A model's repeated units and where they sit: ``model.blocks`` as for trainscope's
    own models, else, for a model nobody wrote for trainscope (nanoGPT's
    ``transformer.h``, a BERT's ``encoder.layer``), its longest ``nn.ModuleList`` of two or
    more modules of one class (the first such list in module order on a tie). ``("",
    [])`` when there is none."""
    own = model_blocks(model)
    if own:
        return "blocks", own
    name, best = "", []  # type: tuple[str, list[nn.Module]]
    for path, module in model.named_modules():
        if not isinstance(module, nn.ModuleList) or len(module) < 2:
            continue
        kinds = {type(m) for m in module}
        if len(kinds) == 1 and len(module) > len(best):
            name, best = path, list(module)
    return name, best


def example_inputs(workload: Workload, n: int, device: torch.device) -> Any:
    """The inputs of the first ``n`` training samples, collated as a loader would."""
    from torch.utils.data import default_collate

    collate = workload.collate_fn or default_collate
    count = min(n, len(workload.train_set))  # type: ignore[arg-type]
    inputs, _ = collate([workload.train_set[i] for i in range(count)])
    return move_to(inputs, device)


@dataclass(frozen=True)
class PipelineParts:
    """How a model splits into pipeline stages: what runs before its blocks, the blocks,
    what runs after them (the dotted names of the modules each end uses)."""

    blocks: list[nn.Module]
    in_modules: tuple[str, ...]
    out_modules: tuple[str, ...]


def pipeline_parts(model: nn.Module) -> PipelineParts | None:
    """The model's pipeline split, or None when it cannot be split into stages.

    A model splits when it has ``blocks`` run one after the other on one tensor, and says
    what runs around them: ``forward_in(*args) -> hidden`` and ``forward_out(hidden) ->
    outputs``, with the (dotted) names of the modules each uses in ``pipeline_in`` and
    ``pipeline_out`` (so that a stage keeps only its own parameters). A model whose
    blocks need more than the hidden state (a BERT layer its attention mask) also says
    how a batch's inputs divide (``pipeline_inputs``, see :func:`stage_inputs`) and what
    each block is called with (``block_kwargs``, see :func:`block_kwargs`)."""
    blocks = model_blocks(model)
    needed = ("forward_in", "forward_out", "pipeline_in", "pipeline_out")
    if not blocks or not all(hasattr(model, n) for n in needed):
        return None
    return PipelineParts(blocks, tuple(model.pipeline_in), tuple(model.pipeline_out))


def stage_inputs(model: nn.Module, inputs: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """A batch's inputs as a pipeline takes them: the positional arguments of the first
    stage's ``forward_in`` and the keyword tensors every stage receives (cut into the same
    microbatches). Default: the inputs alone, to the first stage."""
    split = getattr(model, "pipeline_inputs", None)
    return split(inputs) if split is not None else ((inputs,), {})


def block_kwargs(model: nn.Module, hidden: torch.Tensor, kwargs: dict[str, Any]) -> dict[str, Any]:
    """What each block of a stage is called with besides the hidden state, made once per
    stage from the keyword tensors of :func:`stage_inputs` (default: nothing)."""
    make = getattr(model, "block_kwargs", None)
    return make(hidden, **kwargs) if make is not None and kwargs else {}


class ClassificationMetrics:
    """Accumulates loss, accuracy and per-class accuracy over evaluation batches.

    Sums stay on the device and are read once in :meth:`compute`, so evaluation does not
    synchronize per batch.
    """

    def __init__(self, num_classes: int, device: torch.device) -> None:
        self.num_classes = num_classes
        self._loss_sum = torch.zeros((), dtype=torch.float64, device=device)
        self._count = 0
        self._correct = torch.zeros(num_classes, dtype=torch.int64, device=device)
        self._total = torch.zeros(num_classes, dtype=torch.int64, device=device)

    def update(self, outputs: torch.Tensor, targets: torch.Tensor, loss: torch.Tensor) -> None:
        """Add one batch (``loss`` is the batch mean)."""
        n = targets.shape[0]
        self._loss_sum += loss.detach().double() * n
        self._count += n
        hit = outputs.argmax(dim=1) == targets
        self._total += torch.bincount(targets, minlength=self.num_classes)
        self._correct += torch.bincount(targets[hit], minlength=self.num_classes)

    def compute(self) -> dict[str, Any]:
        """Mean loss, overall accuracy, and accuracy per class (None for absent classes)."""
        correct = self._correct.cpu().tolist()
        total = self._total.cpu().tolist()
        return {
            "loss": self._loss_sum.item() / max(self._count, 1),
            "accuracy": sum(correct) / max(sum(total), 1),
            "samples": self._count,
            "per_class_accuracy": [c / t if t else None for c, t in zip(correct, total)],
        }


class RegressionMetrics:
    """Loss, mean squared and mean absolute error, and R² over evaluation batches (any
    target shape; float targets). Sums stay on the device, read once in :meth:`compute`."""

    def __init__(self, device: torch.device) -> None:
        z = {"dtype": torch.float64, "device": device}
        self._loss_sum, self._se, self._ae = (torch.zeros((), **z) for _ in range(3))
        self._y, self._y2 = torch.zeros((), **z), torch.zeros((), **z)
        self._count = 0
        self._values = 0

    def update(self, outputs: torch.Tensor, targets: torch.Tensor, loss: torch.Tensor) -> None:
        """Add one batch (``loss`` is the batch mean)."""
        y = targets.double().reshape(-1)
        pred = outputs.double().reshape(y.shape)  # (B, 1) outputs against (B,) targets
        self._loss_sum += loss.detach().double() * targets.shape[0]
        self._count += targets.shape[0]
        self._se += (pred - y).square().sum()
        self._ae += (pred - y).abs().sum()
        self._y += y.sum()
        self._y2 += y.square().sum()
        self._values += y.numel()

    def compute(self) -> dict[str, Any]:
        """Mean loss, MSE, MAE and R² (1 - SSE / total sum of squares around the mean)."""
        n = max(self._values, 1)
        se = self._se.item()
        total = self._y2.item() - self._y.item() ** 2 / n
        return {
            "loss": self._loss_sum.item() / max(self._count, 1),
            "mse": se / n,
            "mae": self._ae.item() / n,
            "r2": 1.0 - se / total if total > 0 else None,
            "samples": self._count,
            "accuracy": None,
            "per_class_accuracy": None,
        }


def lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross entropy over every position: logits (B, T, V), targets (B, T)."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


class LMMetrics:
    """Loss, perplexity and next-token accuracy over evaluation batches.

    Means are per token (every window has T of them). Sums stay on the device and are
    read once in :meth:`compute`, so evaluation does not synchronize per batch.
    """

    def __init__(self, device: torch.device) -> None:
        self._loss_sum = torch.zeros((), dtype=torch.float64, device=device)
        self._correct = torch.zeros((), dtype=torch.int64, device=device)
        self._tokens = 0
        self._samples = 0

    def update(self, outputs: torch.Tensor, targets: torch.Tensor, loss: torch.Tensor) -> None:
        """Add one batch: logits (B, T, V), targets (B, T), ``loss`` the per-token mean."""
        n = targets.numel()
        self._loss_sum += loss.detach().double() * n
        self._correct += (outputs.argmax(dim=-1) == targets).sum()
        self._tokens += n
        self._samples += targets.shape[0]

    def compute(self) -> dict[str, Any]:
        """Per-token mean loss, perplexity exp(loss), top-1 accuracy; windows and tokens."""
        tokens = max(self._tokens, 1)
        loss = self._loss_sum.item() / tokens
        return {
            "loss": loss,
            "perplexity": math.exp(loss) if loss < 700 else math.inf,  # exp overflows past 709
            "accuracy": self._correct.item() / tokens,
            "samples": self._samples,
            "tokens": self._tokens,
            "per_class_accuracy": None,
        }


TASKS = ("classification", "regression", "language-modelling")


@dataclass
class Workload:
    """What a run trains: model, train/val/test sets, loss and metrics.

    The user's own workload is any ``package.module:factory`` whose factory takes the
    ``WorkloadConfig`` and returns one of these.
    """

    name: str
    model: nn.Module
    train_set: Dataset
    val_set: Dataset | None
    test_set: Dataset | None
    num_classes: int
    class_names: list[str] = field(default_factory=list)
    loss_fn: LossFn = nn.functional.cross_entropy
    description: str = ""
    metrics_factory: Callable[[torch.device], Metrics] | None = None
    """A fresh evaluation accumulator per pass; None: :class:`ClassificationMetrics`."""
    collate_fn: Callable[[list[Any]], Any] | None = None
    """DataLoader collate function (e.g. padding token ids to the longest in the batch)."""
    tokens_per_sample: int | None = None
    """Tokens in one training sample (sequence workloads): gives tokens/s."""
    flops_per_sample: float | None = None
    """Analytic training FLOPs (forward + backward) of one sample: gives MFU."""
    info: dict[str, Any] = field(default_factory=dict)
    """Workload facts for the summary (e.g. trainable vs total parameters)."""
    task: str = "classification"
    """classification (loss, accuracy, per-class accuracy; integer targets) | regression
    (loss, MSE, MAE, R²; float targets) | language-modelling (per-token loss, perplexity,
    next-token accuracy; logits (B, T, V) against targets (B, T), cross entropy over every
    position unless ``loss_fn`` says otherwise). ``metrics_factory`` overrides any."""
    artifacts: dict[str, Any] = field(default_factory=dict)
    """JSON-able objects saved beside the weights as ``RUN_DIR/<name>.json`` (e.g. a
    vocabulary), so a run directory alone can rebuild and use the model."""
    notes: list[str] = field(default_factory=list)
    """Lines for the console and the summary's ``notes`` when the run sets it up (e.g.
    what loading a pretrained model found)."""

    def __post_init__(self) -> None:
        if self.task not in TASKS:
            raise ConfigError(
                f"workload {self.name!r}: unknown task {self.task!r}; choose one of "
                f"{', '.join(TASKS)} (or give metrics_factory)"
            )
        if self.task == "language-modelling" and self.loss_fn is nn.functional.cross_entropy:
            self.loss_fn = lm_loss  # plain cross entropy wants (N, C) logits
        if not self.class_names and self.task == "classification":
            self.class_names = [str(i) for i in range(self.num_classes)]

    def new_metrics(self, device: torch.device) -> Metrics:
        """A fresh accumulator for one evaluation pass."""
        if self.metrics_factory is not None:
            return self.metrics_factory(device)
        if self.task == "regression":
            return RegressionMetrics(device)
        if self.task == "language-modelling":
            return LMMetrics(device)
        return ClassificationMetrics(self.num_classes, device)
