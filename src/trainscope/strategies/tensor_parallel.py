"""``tp``: tensor parallelism inside each block (Megatron-LM's split, through
``torch.distributed.tensor.parallel``), every process one shard of every block.

In each transformer block the attention's Q/K/V projection and the MLP's first layer are
split by output columns (``ColwiseParallel``: each rank computes its own heads and its
own slice of the hidden layer), and the two output projections by input rows
(``RowwiseParallel``: each rank's partial result is summed over ranks). What it costs:

- **Communication inside every block, on the critical path.** Forward: one all-reduce of
  the block's activations (batch x sequence x width) after the attention's projection
  and one after the MLP's. Backward: one all-reduce of the input gradient at each of the
  two column-split layers. Four all-reduces per block and step, none overlapped with
  compute: they are inside ``forward`` and ``backward``.
- **No saving on what is outside the blocks**: embeddings, norms and the head are
  replicated (every rank holds and updates them identically), and every rank loads the
  whole batch.
- **Memory**: the blocks' weights, gradients and optimizer states are split T ways, and
  so are the activations inside attention and the MLP; the activations between blocks
  are not, unless sequence parallelism is on.

**Sequence parallelism** (``--sequence-parallel``, a model's ``sp_plan``/``sp_ends``):
the norms, dropouts and the residual stream run on each rank's share of the sequence, so
what they save is split T ways too; attention and the MLP gather the whole sequence
first, and their row-split projections reduce-scatter it back (the collectives are in
:mod:`trainscope.comm.tensor_parallel`). A norm's weight then sees only its rank's tokens:
its gradient is a partial sum, summed over the ranks after backward (the ``comm`` stage).

A fused Q/K/V weight (the GPT's ``qkv``) is split by heads: its rows are reordered so
that each rank's contiguous share holds its heads' queries, keys and values (a plain
column split would hand rank 0 all the queries); saved weights are put back in the
model's own order. A layer LoRA adapts (peft) splits its base layer as planned, and its
adapter with it (:func:`expand_adapters`).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from trainscope.errors import ConfigError
from trainscope.strategies.base import Strategy
from trainscope.strategies.grid import Grid, average_over_replicas, check_grid, replica_batch
from trainscope.workloads.base import model_blocks

COLWISE, ROWWISE, COLWISE_FUSED3 = "colwise", "rowwise", "colwise-fused3"


def fused_qkv_order(rows: int, tp: int) -> torch.Tensor:
    """The row order of a fused [Q; K; V] weight (``rows`` = 3 x width) under which a
    contiguous split in ``tp`` parts gives each rank [its Q; its K; its V]."""
    return torch.arange(rows).view(3, tp, rows // (3 * tp)).transpose(0, 1).reshape(-1)


def tp_plan(model: nn.Module) -> dict[str, str] | None:
    """The model's tensor-parallel plan: block-relative module name -> colwise | rowwise |
    colwise-fused3 (a fused Q/K/V). None when the model has none."""
    plan = getattr(model, "tp_plan", None)
    return dict(plan) if plan and model_blocks(model) else None


def model_heads(model: nn.Module) -> int | None:
    """The model's attention heads, from its config (a GPT's or a transformers one's)."""
    for holder in (model, getattr(model, "net", None)):
        config = getattr(holder, "config", None)
        for key in ("n_head", "num_attention_heads"):
            value = getattr(config, key, None)
            if isinstance(value, int):
                return value
    return None


def expand_adapters(block: nn.Module, plan: dict[str, str]) -> dict[str, str]:
    """The plan on the linear layers themselves: a layer that LoRA wraps (peft) splits its
    frozen base layer as planned, and its adapter so that the sum still lines up: under a
    column split the adapter's up-projection (``lora_B``) by columns (its rank-r input is
    replicated), under a row split its down-projection (``lora_A``) by rows (its output
    is summed over the ranks like the base layer's)."""
    out: dict[str, str] = {}
    for name, kind in plan.items():
        layer = block.get_submodule(name)
        if isinstance(layer, nn.Linear) or not hasattr(layer, "base_layer"):
            out[name] = kind
            continue
        out[f"{name}.base_layer"] = kind
        side = "lora_A" if kind == ROWWISE else "lora_B"
        if kind == COLWISE_FUSED3:
            raise ConfigError(f"tensor parallelism does not split a LoRA adapter on fused {name}")
        for adapter in getattr(layer, side, {}):
            out[f"{name}.{side}.{adapter}"] = kind
    return out


def sequence_plan(model: nn.Module) -> tuple[dict[str, str], dict[str, str]]:
    """The model's sequence-parallel plan: block-relative and top-level module names ->
    sequence (runs on each rank's share of the sequence: a norm) | gather (its input's
    shares gathered into the whole sequence first) | scatter (its output cut into shares)."""
    block, ends = getattr(model, "sp_plan", None), getattr(model, "sp_ends", None)
    if not block or not ends:
        raise ConfigError(
            f"sequence parallelism needs the model to say which of its modules run on a "
            f"share of the sequence (sp_plan, sp_ends); {type(model).__name__} does not"
        )
    return dict(block), dict(ends)


def tp_styles(sequence_parallel: bool) -> dict[str, Any]:
    """Plan kind -> a factory of its ``torch.distributed.tensor.parallel`` style. Under
    sequence parallelism a row-split layer's partial sums are reduce-scattered along the
    sequence (not all-reduced), and the next layer's input is all-gathered."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        PrepareModuleInput,
        PrepareModuleOutput,
        RowwiseParallel,
        SequenceParallel,
    )

    seq, whole = Shard(1), Replicate()
    styles: dict[str, Any] = {COLWISE: ColwiseParallel, COLWISE_FUSED3: ColwiseParallel,
                              ROWWISE: RowwiseParallel}  # fmt: skip
    if sequence_parallel:
        styles.update({
            ROWWISE: lambda: RowwiseParallel(output_layouts=seq),
            "sequence": SequenceParallel,
            "gather": lambda: PrepareModuleInput(
                input_layouts=(seq,), desired_input_layouts=(whole,), use_local_output=True),
            "scatter": lambda: PrepareModuleOutput(
                output_layouts=(whole,), desired_output_layouts=(seq,), use_local_output=True),
        })  # fmt: skip
    return styles


def sum_partial_gradients(params: list[torch.Tensor]) -> None:
    """Each gradient held as partial sums over the ranks (a DTensor ``Partial``: what a
    replicated weight used on a sharded input gets) made whole: one all-reduce each.
    Left partial, the optimizer would sum it anyway, but the clipping norm would not."""
    from torch.distributed.tensor import DTensor, Partial, Replicate

    for p in params:
        g = p.grad
        if isinstance(g, DTensor) and any(isinstance(pl, Partial) for pl in g.placements):
            whole = [Replicate() if isinstance(pl, Partial) else pl for pl in g.placements]
            p.grad = g.redistribute(g.device_mesh, whole)


def check_heads(heads: int | None, tp: int) -> None:
    """Attention heads must split evenly over the ranks."""
    if heads is not None and heads % tp:
        raise ConfigError(
            f"tensor parallelism over {tp} processes splits attention by heads: the model's "
            f"{heads} heads do not divide by {tp}"
        )


class TensorParallelStrategy(Strategy):
    """Tensor parallelism over every process (``tp_size`` of them), block by block."""

    name = "tp"
    comm_note = (
        "4 all-reduces per block and step (forward: after the attention and MLP output "
        "projections; backward: the input gradients of the Q/K/V and MLP input "
        "projections), inside forward and backward"
    )

    def __init__(
        self, info: Any, device: torch.device, tp_size: int | None = None,
        dp_size: int | None = None, sequence_parallel: bool | None = None,
    ) -> None:  # fmt: skip
        super().__init__(info, device)
        self.sequence_parallel = bool(sequence_parallel)
        self.tp, self.dp = check_grid(info.world_size, tp_size, dp_size, "--tp-size")
        self.grid = Grid(self.dp, self.tp, info.rank)  # its process groups come in wrap()
        # With replicas, their gradients are averaged after backward, and under sequence
        # parallelism the norms' partial gradients summed: a stage of its own.
        self.comm_stage = self.dp > 1 or self.sequence_parallel
        if self.sequence_parallel:
            self.comm_note = (
                "per block and step, inside forward and backward: 4 all-gathers of the "
                "sequence shards, 2 reduce-scatters (after the row-split projections) and "
                "2 all-reduces (the column-split layers' input gradients); the norms' "
                "partial gradients all-reduced after backward (comm)"
            )
        self.plan: dict[str, str] = {}
        self.blocks = 0
        self.partial_bytes: list[int] = []
        self.per_block = {"forward": 2, "backward": 2}  # the plan's, counted in wrap()
        self._fused: list[tuple[nn.Module, torch.Tensor]] = []

    @property
    def splits_batch_across_ranks(self) -> bool:
        """Every rank of a replica computes on the replica's whole batch: the model, not
        the data, is split (between replicas, the batch is)."""
        return False

    def local_batch_size(self, global_batch: int) -> int:
        """The replica's share of the batch (all of it without data parallelism)."""
        return replica_batch(global_batch, self.dp)

    def data_shard(self) -> tuple[int, int]:
        return self.grid.dp_rank, self.dp

    def sync_gradients(self, model: nn.Module) -> None:
        """Under sequence parallelism, the gradients that are partial sums (a norm's, each
        rank's from its share of the sequence) summed over the ranks; then every gradient
        (each rank's shard of it) averaged over the replicas."""
        params = [p for p in model.parameters() if p.requires_grad]
        if self.sequence_parallel:
            sum_partial_gradients(params)
        average_over_replicas(params, self.grid)

    def wrap(self, model: nn.Module) -> nn.Module:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor.parallel import (
            parallelize_module,
        )

        plan = tp_plan(model)
        if plan is None:
            raise ConfigError(
                f"strategy tp splits the layers inside a model's blocks; "
                f"{type(model).__name__} has no tp_plan (block-relative names of its "
                "column- and row-split linear layers)"
            )
        check_heads(model_heads(model), self.tp)
        sp = sequence_plan(model) if self.sequence_parallel else None
        mesh = self._mesh(init_device_mesh)
        styles = tp_styles(sequence_parallel=sp is not None)
        for block in model_blocks(model):
            for name, kind in plan.items():
                if kind == COLWISE_FUSED3:
                    self._reorder_fused(block.get_submodule(name))
            split = expand_adapters(block, plan)
            # One all-reduce per row-split layer in forward, one per column-split
            # layer's input gradient in backward (a fused Q/K/V is one layer).
            self.per_block = {"forward": sum(k == ROWWISE for k in split.values()),
                              "backward": sum(k != ROWWISE for k in split.values())}  # fmt: skip
            layers = {**split, **(sp[0] if sp else {})}
            parallelize_module(block, mesh, {n: styles[k]() for n, k in layers.items()})
            self._note_partial(block, sp[0] if sp else {})
            self.blocks += 1
        if sp is not None:
            parallelize_module(model, mesh, {n: styles[k]() for n, k in sp[1].items()})
            self._note_partial(model, sp[1])
        if hasattr(model, "tp_localize"):
            model.tp_localize(self.tp)
        self.plan = plan
        if sp is None:
            f, b = self.per_block["forward"], self.per_block["backward"]
            self.comm_note = (
                f"{f + b} all-reduces per block and step (forward: {f}, after the row-split "
                f"layers; backward: {b}, the input gradients of the column-split layers), "
                "inside forward and backward"
            )
        return model

    def _note_partial(self, root: nn.Module, sp: dict[str, str]) -> None:
        """Bytes of each trained parameter of a module run on a share of the sequence:
        its gradient is a partial sum, all-reduced after backward."""
        for name, kind in sp.items():
            if kind == "sequence":
                params = root.get_submodule(name).parameters()
                self.partial_bytes += [p.numel() * p.element_size() for p in params
                                       if p.requires_grad]  # fmt: skip

    def _mesh(self, init_device_mesh: Any) -> Any:
        """The tensor-parallel mesh; with replicas, the dp x tp mesh's tp part, its dp
        part's group kept for the gradient average."""
        if self.dp == 1:
            mesh = init_device_mesh(self.device.type, (self.tp,))
            self.grid.inner_group = mesh.get_group()
            return mesh
        grid = init_device_mesh(self.device.type, (self.dp, self.tp), mesh_dim_names=("dp", "tp"))
        self.grid.inner_group = grid["tp"].get_group()
        self.grid.dp_group = grid["dp"].get_group()
        return grid["tp"]

    def _reorder_fused(self, linear: nn.Module) -> None:
        """Rows of a fused Q/K/V weight (and bias) in the per-rank head order."""
        order = fused_qkv_order(linear.weight.shape[0], self.tp).to(linear.weight.device)
        with torch.no_grad():
            linear.weight.copy_(linear.weight[order])
            if getattr(linear, "bias", None) is not None:
                linear.bias.copy_(linear.bias[order])
        self._fused.append((linear, torch.argsort(order)))

    def grad_norm(self, params: list[torch.Tensor]) -> torch.Tensor:
        """The global L2 norm: a sharded gradient's squares summed over the ranks, a
        replicated one's counted once."""
        import torch.distributed as dist
        from torch.distributed.tensor import DTensor, Shard

        sharded = torch.zeros((), device=self.device, dtype=torch.float32)
        replicated = torch.zeros((), device=self.device, dtype=torch.float32)
        for p in params:
            g = p.grad
            if g is None:
                continue
            if isinstance(g, DTensor):
                sq = g.to_local().detach().float().pow(2).sum()
                if any(isinstance(pl, Shard) for pl in g.placements):
                    sharded = sharded + sq
                    continue
            else:
                sq = g.detach().float().pow(2).sum()
            replicated = replicated + sq
        dist.all_reduce(sharded, group=self.grid.inner_group)  # the replicas are alike
        return (sharded + replicated).sqrt()

    def full_state_dict(self, model: nn.Module) -> dict[str, torch.Tensor]:
        """Every tensor whole (shards gathered: a collective), fused Q/K/V rows back in
        the model's own order, on the CPU."""
        from torch.distributed.tensor import DTensor

        inverse = {id(lin.weight): inv for lin, inv in self._fused}
        inverse.update({id(lin.bias): inv for lin, inv in self._fused
                        if getattr(lin, "bias", None) is not None})  # fmt: skip
        out = {}
        for name, t in model.state_dict(keep_vars=True).items():
            full = t.full_tensor() if isinstance(t, DTensor) else t
            if id(t) in inverse:
                full = full[inverse[id(t)].to(full.device)]
            out[name] = full.detach().cpu()
        return out

    def describe(self) -> dict[str, Any]:
        out = super().describe()
        out["tensor_parallel"] = {
            "tp_size": self.tp, "dp_size": self.dp, "blocks": self.blocks, "plan": self.plan,
            "sequence_parallel": self.sequence_parallel,
            "partial_gradient_bytes": self.partial_bytes,
            "all_reduces_per_block": None if self.sequence_parallel else self.per_block,
        }  # fmt: skip
        return out
