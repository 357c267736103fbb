"""Cutting a model into pipeline stages, and what each rank keeps of it.

A model splits at its blocks (:func:`~trainscope.workloads.base.pipeline_parts`): the
first stage also runs what comes before the blocks (embeddings), the last stage what
comes after them (final norm, head). With ``S`` pipeline ranks and ``V`` stages per rank
(``V = 2`` for the interleaved schedule) there are ``S x V`` stages, and stage ``k`` runs
on rank ``k mod S``: rank 0 holds stages 0 and S, rank 1 stages 1 and S + 1, and so on
(the order ``torch.distributed.pipelining``'s looped schedules expect).

Every rank builds the whole model (the same seed makes it identical everywhere), then
keeps only what its stages use: other blocks are dropped and other parameters emptied, so
a rank's memory holds its own stages alone. A parameter two ranks keep (the GPT's token
embedding, tied to its output head, on the first and the last stage) is trained on both;
its gradients are summed between them after backward (:class:`TiedParams`), as
Megatron-LM does for its tied embedding.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from trainscope.comm.pipeline import bounds, split_even
from trainscope.workloads.base import PipelineParts, block_kwargs, stage_inputs


def split_by_cost(
    costs: list[float], n_stages: int, ends: tuple[float, float] = (0, 0)
) -> list[tuple[int, int]]:
    """Contiguous block ranges, one per stage, that make the slowest stage as fast as can
    be: ``costs`` are the blocks' measured times, ``ends`` what the first and the last
    stage add (embeddings; head and loss). An exact search over cut points (dynamic
    programming, O(stages x blocks^2)); ties go to the even split's sizes."""
    n = len(costs)
    if n_stages > n:
        return split_even(n, n_stages)  # raises the same clear error
    prefix = [0.0]
    for c in costs:
        prefix.append(prefix[-1] + c)

    def stage_cost(k: int, i: int, j: int) -> float:
        extra = (ends[0] if k == 0 else 0.0) + (ends[1] if k == n_stages - 1 else 0.0)
        return prefix[j] - prefix[i] + extra

    # best[k][j]: the least possible slowest stage when stages 0..k-1 run blocks [0, j).
    best = [[math.inf] * (n + 1) for _ in range(n_stages + 1)]
    cut = [[0] * (n + 1) for _ in range(n_stages + 1)]
    best[0][0] = 0.0
    for k in range(1, n_stages + 1):
        for j in range(k, n - (n_stages - k) + 1):
            for i in range(k - 1, j):
                value = max(best[k - 1][i], stage_cost(k - 1, i, j))
                if value < best[k][j] - 1e-12:
                    best[k][j], cut[k][j] = value, i
    sizes, j = [], n
    for k in range(n_stages, 0, -1):
        sizes.append(j - cut[k][j])
        j = cut[k][j]
    return bounds(sizes[::-1])


def measure_costs(
    model: nn.Module, parts: PipelineParts, example: Any, repeats: int = 3
) -> tuple[list[float], tuple[float, float]]:
    """Seconds of forward + backward of each block on one microbatch (``example``), and of
    what the first and the last stage add (``forward_in``; ``forward_out`` and a sum for
    the loss): the median of ``repeats`` after a warm-up. Random draws (dropout) happen on
    a forked generator, so training's own draws are as without the measurement."""
    import statistics
    import time

    example_device = _device_of(example)

    def cost(fn: object) -> float:
        times = []
        for _ in range(repeats + 1):
            sync()
            t0 = time.perf_counter()
            fn()  # type: ignore[operator]
            sync()
            times.append(time.perf_counter() - t0)
        return statistics.median(times[1:])

    def sync() -> None:
        if example_device.type == "cuda":
            torch.cuda.synchronize(example_device)

    args, kwargs = stage_inputs(model, example)
    with torch.random.fork_rng(devices=[example_device] if example_device.type == "cuda" else []):
        first = cost(lambda: model.forward_in(*args).float().sum().backward())
        h = model.forward_in(*args).detach()
        extra = block_kwargs(model, h, kwargs)
        blocks = []
        for block in parts.blocks:
            x = h.detach().requires_grad_(True)
            blocks.append(cost(lambda b=block, x=x: b(x, **extra).float().sum().backward()))
            with torch.no_grad():
                h = block(x, **extra)
        x = h.detach().requires_grad_(True)
        last = cost(lambda: model.forward_out(x).float().sum().backward())
    model.zero_grad(set_to_none=True)
    return blocks, (first, last)


def _device_of(inputs: Any) -> torch.device:
    """The device of a batch's inputs (a tensor, or a mapping or sequence of them)."""
    if isinstance(inputs, torch.Tensor):
        return inputs.device
    values = inputs.values() if isinstance(inputs, dict) else inputs
    for v in values:
        if isinstance(v, torch.Tensor):
            return v.device
    return torch.device("cpu")


def stage_rank(stage: int, pp_size: int) -> int:
    """The pipeline rank that runs ``stage`` (looped: stage k on rank k mod S)."""
    return stage % pp_size


class StageModule(nn.Module):
    """One pipeline stage: its blocks, with the model's ``forward_in`` before them on the
    first stage and ``forward_out`` after them on the last. Called with the first stage's
    inputs (or the previous stage's output) and the keyword tensors every stage receives
    (:func:`~trainscope.workloads.base.stage_inputs`)."""

    def __init__(
        self, model: nn.Module, parts: PipelineParts, span: tuple[int, int], first: bool,
        last: bool,
    ) -> None:  # fmt: skip
        super().__init__()
        self.first, self.last = first, last
        self.blocks = nn.ModuleList(parts.blocks[span[0] : span[1]])
        names = (parts.in_modules if first else ()) + (parts.out_modules if last else ())
        # Registered so that the stage's parameters() include them (for the optimizer).
        self.ends = nn.ModuleList(model.get_submodule(n) for n in names)
        self._model = (model,)  # not a submodule: its forward_in/out are called, no more

    def forward(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        model = self._model[0]
        x = model.forward_in(*args) if self.first else args[0]
        extra = block_kwargs(model, x, kwargs)
        for block in self.blocks:
            x = block(x, **extra)
        if self.last:
            x = model.forward_out(x)
        return x


@dataclass
class TiedParams:
    """Parameters kept on more than one rank: their gradients are summed between those
    ranks after backward (one all-reduce per parameter, in its own process group)."""

    groups: list[tuple[nn.Parameter, tuple[int, ...], object]] = field(default_factory=list)
    """(parameter, the ranks that keep it, their process group) for this rank's ones."""

    def sync(self) -> None:
        """Sum each tied parameter's gradient over the ranks that keep it."""
        import torch.distributed as dist

        for p, _, group in self.groups:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            dist.all_reduce(p.grad, group=group)

    @property
    def bytes(self) -> int:
        """Gradient bytes this rank all-reduces per step."""
        return sum(p.numel() * p.element_size() for p, _, _ in self.groups)


@dataclass
class Carved:
    """This rank's share of a model cut into stages."""

    stages: list[StageModule]
    stage_ids: list[int]
    n_stages: int
    spans: list[tuple[int, int]]
    """Every stage's block range (all ranks')."""
    owner: dict[str, int]
    """Parameter or buffer name -> the lowest rank that keeps it (who reports it)."""
    keeps: set[str]
    """Names of the parameters and buffers this rank keeps."""
    tied: TiedParams
    names: list[str]
    """Every name of the whole model's state dict, in its order (before the cut)."""


def carve(
    model: nn.Module, parts: PipelineParts, spans: list[tuple[int, int]], rank: int,
    pp_size: int, new_group: Callable[[tuple[int, ...]], object],
) -> Carved:  # fmt: skip
    """Cut ``model`` into stages over ``spans``; keep this pipeline rank's (``rank`` in
    0..pp_size-1); drop and empty the rest. ``new_group(places)`` makes the process group
    of the pipeline places that share a tied parameter (called on every rank alike)."""
    n = len(spans)
    names = list(model.state_dict().keys())
    stages = {k: StageModule(model, parts, spans[k], k == 0, k == n - 1) for k in range(n)}
    users: dict[int, set[int]] = {}  # id(tensor) -> the pipeline ranks whose stages use it
    for k, stage in stages.items():
        for t in [*stage.parameters(), *stage.buffers()]:
            users.setdefault(id(t), set()).add(stage_rank(k, pp_size))
    named = [*model.named_parameters(remove_duplicate=False),
             *model.named_buffers(remove_duplicate=False)]  # fmt: skip
    owner = {name: min(users.get(id(t), {0})) for name, t in named}
    keeps = {name for name, t in named if rank in users.get(id(t), set())}
    tied = TiedParams()
    seen: set[int] = set()
    for p in model.parameters():
        ranks = tuple(sorted(users.get(id(p), ())))
        if len(ranks) > 1 and id(p) not in seen:
            seen.add(id(p))
            group = new_group(ranks)  # on every rank, in one order
            if rank in ranks:
                tied.groups.append((p, ranks, group))
    mine = [k for k in range(n) if stage_rank(k, pp_size) == rank]
    _drop_the_rest(model, parts, [spans[k] for k in mine], keep={id(t) for k in mine for t in
                   [*stages[k].parameters(), *stages[k].buffers()]})  # fmt: skip
    return Carved([stages[k] for k in mine], mine, n, spans, owner, keeps, tied, names)


def _drop_the_rest(
    model: nn.Module, parts: PipelineParts, spans: list[tuple[int, int]], keep: set[int]
) -> None:
    """Free what this rank's stages do not use: other blocks leave ``model.blocks``, and
    every other parameter is emptied and frozen (it stays in place, so the model's
    structure and names are unchanged, but holds no memory and gets no gradient)."""
    mine = {i for a, b in spans for i in range(a, b)}
    container = model.blocks
    for i in range(len(parts.blocks)):
        if i not in mine:
            container[i] = nn.Identity()
    with torch.no_grad():
        for p in model.parameters():
            if id(p) not in keep:
                p.requires_grad_(False)
                p.data = p.data.new_empty(0)
        for mod in model.modules():
            for name, b in list(mod._buffers.items()):
                if b is not None and id(b) not in keep:
                    mod._buffers[name] = b.new_empty(0)
