"""``pipeline``: the model's blocks cut into stages, one stage (or two) per rank, and each
batch cut into microbatches that flow through them (``torch.distributed.pipelining``).

What it costs, and why:

- **The bubble.** A stage waits for the one before it: at the start of a step only the
  first stage has work, at the end only the last. With ``S`` stages of equal cost and
  ``M`` microbatches a rank is idle for a fraction ``(S-1)/(M+S-1)`` of the step under
  GPipe and 1F1B alike (1F1B changes the order, not the idle time); the interleaved
  schedule, with ``V`` stages per rank, cuts it to ``(S-1)/(V*M+S-1)``. More
  microbatches shrink the bubble but make each one smaller (less efficient kernels).
- **Activations in flight.** GPipe runs every microbatch's forward before any backward:
  a stage holds the activations of all ``M`` at once. 1F1B starts backward as soon as the
  last stage can: stage ``k`` holds at most ``S-k`` microbatches.
- **Communication.** Each microbatch's activation goes forward to the next stage and its
  gradient comes back (point-to-point, inside the schedule: that time, with the bubble,
  is the ``pipeline_wait`` stage). A parameter two stages share (a tied embedding and
  head) has its gradient summed between them after backward: the ``comm`` stage.

The step's stages still add up: ``forward`` and ``backward`` (loss included) are the sums
of this rank's microbatch forwards and backwards, ``pipeline_wait`` the rest of the
schedule's time on this rank: waiting for the neighbouring stages and for transfers. On
CUDA each microbatch is timed with a device synchronize around it (host clocks lie
otherwise), which the run's record says.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

import torch
from torch import nn

from trainscope.comm.pipeline import split_even, stages_per_rank, theory_bubble
from trainscope.errors import ConfigError
from trainscope.strategies.base import Strategy
from trainscope.strategies.grid import (
    Grid,
    average_over_replicas,
    check_grid,
    make_grid,
    replica_batch,
)
from trainscope.strategies.layout import DEFAULT_MICROBATCHES, DEFAULT_SCHEDULE, check_layout
from trainscope.strategies.pipeline_split import (
    Carved,
    carve,
    measure_costs,
    split_by_cost,
    stage_rank,
)
from trainscope.workloads.base import pipeline_parts, stage_inputs

SCHEDULES = {
    "gpipe": "ScheduleGPipe",
    "1f1b": "Schedule1F1B",
    "interleaved-1f1b": "ScheduleInterleaved1F1B",
}
"""``--pp-schedule`` name -> the class in ``torch.distributed.pipelining``."""


class PipelineModel(nn.Module):
    """This rank's stages. Training goes through the strategy's schedule; calling the
    module runs a whole forward pass through every rank's stages (evaluation), and every
    rank gets the outputs."""

    def __init__(self, strategy: PipelineStrategy, stages: list[nn.Module]) -> None:
        super().__init__()
        self.stages = nn.ModuleList(stages)
        self._strategy = (strategy,)

    def forward(self, inputs: Any) -> torch.Tensor:
        return self._strategy[0].forward_through(self, inputs)


class PipelineStrategy(Strategy):
    """Pipeline parallelism over ``pp_stages`` ranks with a GPipe, 1F1B or interleaved
    1F1B schedule of ``microbatches`` microbatches."""

    name = "pipeline"
    comm_stage = True  # the tied parameters' gradient sum (nothing to do without them)
    runs_schedule = True
    comm_note = (
        "activations and their gradients sent between neighbouring stages inside the "
        "schedule (in pipeline_wait, with the bubble); tied parameters' gradients summed "
        "between the stages that share them (comm)"
    )

    def __init__(
        self, info: Any, device: torch.device, pp_stages: int | None = None,
        microbatches: int | None = None, pp_schedule: str | None = None,
        pp_split: str | None = None, dp_size: int | None = None,
    ) -> None:  # fmt: skip
        super().__init__(info, device)
        self.pp, self.dp = check_grid(info.world_size, pp_stages, dp_size, "--pp-stages")
        self.grid = Grid(self.dp, self.pp, info.rank)  # its process groups come in wrap()
        self.microbatches = microbatches or DEFAULT_MICROBATCHES
        self.schedule_name = pp_schedule or DEFAULT_SCHEDULE
        self.split = pp_split or "even"
        self.pp_rank = self.grid.inner_rank
        self.carved: Carved | None = None
        self.microbatch_size = 0
        self.costs: dict[str, Any] | None = None
        self._timing = _ChunkTiming(device)
        self.totals = {"forward_s": 0.0, "backward_s": 0.0, "loss_s": 0.0, "wait_s": 0.0,
                       "p2p_wait_s": 0.0}  # fmt: skip
        self.steps = 0
        self._warm = False

    # --- batch and data --------------------------------------------------------------

    @property
    def splits_batch_across_ranks(self) -> bool:
        """Every pipeline rank sees the whole batch (the first its inputs, the last its
        targets): nothing is split across ranks but microbatches across time."""
        return False

    def local_batch_size(self, global_batch: int) -> int:
        """The replica's share of the batch (all of it without data parallelism)."""
        local = replica_batch(global_batch, self.dp)
        check_layout(self.pp, self.microbatches, self.schedule_name, local)
        self.microbatch_size = local // self.microbatches
        return local

    def training_data(self, data: Any, n_train: int | None) -> tuple[Any, str | None]:
        """The last batch of an epoch is dropped when it is short: a schedule cuts every
        batch into M equal microbatches of one shape."""
        if data.drop_last:
            return data, None
        per_shard = -(-n_train // self.dp) if n_train else 0  # the sampler pads to equal
        rest = per_shard % replica_batch(data.batch_size, self.dp) if per_shard else 0
        note = None
        if rest:
            note = (
                f"strategy pipeline drops each epoch's last batch of {rest} samples: its "
                f"schedule cuts every batch into {self.microbatches} equal microbatches"
            )
        return replace(data, drop_last=True), note

    def example_size(self) -> int:
        """One microbatch, to time the blocks on when the split is measured."""
        return self.microbatch_size if self.split == "measured" else 0

    def data_shard(self) -> tuple[int, int]:
        return self.grid.dp_rank, self.dp  # every stage of a replica loads its batches

    def loss_share(self) -> float:
        """The losses live on the last stages alone (one per replica)."""
        return 1.0 / self.dp if self._has_last else 0.0

    # --- the model -------------------------------------------------------------------

    def wrap(self, model: nn.Module) -> nn.Module:
        from torch.distributed.pipelining import PipelineStage

        parts = pipeline_parts(model)
        if parts is None:
            raise ConfigError(
                f"strategy pipeline splits a model at its blocks; {type(model).__name__} "
                "does not say how (it needs model.blocks, forward_in/forward_out and "
                "pipeline_in/pipeline_out)"
            )
        n_stages = self.pp * stages_per_rank(self.schedule_name)
        if self.split == "measured":
            spans = self._measured_split(model, parts, n_stages)
        else:
            spans = split_even(len(parts.blocks), n_stages)
        self.grid = make_grid(self.info.rank, self.dp, self.pp)
        self.carved = carve(model, parts, spans, self.pp_rank, self.pp, self._tied_group)
        stages = [
            PipelineStage(stage, k, n_stages, self.device, group=self.grid.inner_group)
            for stage, k in zip(self.carved.stages, self.carved.stage_ids)
        ]
        for pipe_stage in stages:
            self._timing.instrument(pipe_stage)
        self._timing.last_stage = n_stages - 1
        self.schedule = self._make_schedule(stages)
        self._whole = model  # it says how a batch's inputs divide between the stages
        self._has_first = 0 in self.carved.stage_ids
        self._has_last = n_stages - 1 in self.carved.stage_ids
        return PipelineModel(self, self.carved.stages)

    def _measured_split(self, model: nn.Module, parts: Any, n_stages: int) -> list[tuple[int, int]]:
        """Stages cut by the blocks' measured cost: rank 0 times them (alone, the others
        wait: no contention) and sends the times to every rank, so that all cut alike."""
        import torch.distributed as dist

        if self.example is None:
            raise ConfigError("--pp-split measured needs a training sample to time on")
        n = len(parts.blocks)
        costs = torch.zeros(n + 2, dtype=torch.float64, device=self.device)
        if self.info.rank == 0:
            blocks, ends = measure_costs(model, parts, self.example, repeats=5)
            costs = torch.tensor([*blocks, *ends], dtype=torch.float64, device=self.device)
        if dist.is_initialized():
            dist.broadcast(costs, src=0)
        values = costs.tolist()
        blocks, ends = values[:n], (values[-2], values[-1])
        self.costs = {"blocks_ms": [1e3 * c for c in blocks],
                      "first_ms": 1e3 * ends[0], "last_ms": 1e3 * ends[1]}  # fmt: skip
        return split_by_cost(blocks, n_stages, ends)

    def _tied_group(self, ranks: tuple[int, ...]) -> Any:
        """The process group of this replica's stages ``ranks`` (pipeline places), made
        for every replica alike: ``new_group`` is collective over the world."""
        import torch.distributed as dist

        mine = None
        for d in range(self.dp):
            group = dist.new_group([d * self.pp + r for r in ranks])
            if d == self.grid.dp_rank:
                mine = group
        return mine

    def _make_schedule(self, stages: list[Any]) -> Any:
        from torch.distributed import pipelining

        cls = getattr(pipelining, SCHEDULES[self.schedule_name])
        first = stages if stages_per_rank(self.schedule_name) > 1 else stages[0]
        # scale_grads: each microbatch's loss is its own mean, so gradients are divided by
        # M: the same gradients as the whole batch's mean loss (the single-process run's).
        return cls(first, n_microbatches=self.microbatches, loss_fn=self._timing.loss,
                   scale_grads=True)  # fmt: skip

    def unwrap(self, model: nn.Module) -> nn.Module:
        stages = getattr(model, "stages", None)
        if stages is None or not len(stages):
            return model
        return stages[0]._model[0]

    # --- one step --------------------------------------------------------------------

    def forward_backward(
        self, model: nn.Module, inputs: torch.Tensor, targets: torch.Tensor,
        loss_fn: Callable[..., torch.Tensor], precision: Any,
    ) -> tuple[torch.Tensor, dict[str, float]]:  # fmt: skip
        """Forward and backward of every microbatch, in the schedule's order; returns
        the batch's mean loss (zero on ranks without the last stage, which have none)
        and this rank's time in forward and in backward (loss included)."""
        self._timing.start(loss_fn)
        losses: list[torch.Tensor] = []
        args, kwargs = stage_inputs(self._whole, inputs)
        t0 = self._timing.now()
        with precision.autocast(), self._timing.timed_p2p_waits():
            self.schedule.step(*(args if self._has_first else ()),
                               target=targets if self._has_last else None,
                               losses=losses, return_outputs=False, **kwargs)  # fmt: skip
        self._timing.finish()
        f, b, loss_s = self._timing.sums()
        if self._warm:  # the first step also agrees on shapes and sets up buffers: left out
            self.totals["wait_s"] += self._timing.now() - t0 - f - b - loss_s
            self.totals["p2p_wait_s"] += self._timing.p2p_wait_s
            self.totals["forward_s"] += f
            self.totals["backward_s"] += b
            self.totals["loss_s"] += loss_s
            self.steps += 1
        self._warm = True
        loss = torch.stack([x.detach().float() for x in losses]).mean() if losses else (
            torch.zeros((), device=self.device))  # fmt: skip
        return loss, {"forward": f, "backward": b + loss_s}

    def take_microbatches(self, n: int, origin: float) -> list[list[list[Any]]]:
        """Each of the oldest ``n`` steps' microbatches on this rank: [kind (F forward, B
        backward, L loss), stage, microbatch, start, end], on the run's clock."""
        return self._timing.take(n, origin)

    def sync_gradients(self, model: nn.Module) -> None:
        """Tied parameters' gradients summed between their stages; then, with data
        parallelism, every gradient averaged over the replicas."""
        assert self.carved is not None
        self.carved.tied.sync()
        average_over_replicas([p for p in model.parameters() if p.requires_grad], self.grid)

    def grad_norm(self, params: list[torch.Tensor]) -> torch.Tensor:
        """The global L2 norm of every stage's gradients: each tied parameter counted once
        (by the lowest rank that keeps it), the squares summed over the pipeline."""
        import torch.distributed as dist

        assert self.carved is not None
        counted = {id(p) for p, ranks, _ in self.carved.tied.groups if ranks[0] != self.pp_rank}
        grads = [p.grad for p in params if p.grad is not None and id(p) not in counted]
        sq = torch.zeros((), device=self.device, dtype=torch.float32)
        for g in grads:
            sq = sq + g.detach().float().pow(2).sum()
        dist.all_reduce(sq, group=self.grid.inner_group)  # replicas hold the same gradients
        return sq.sqrt()

    # --- evaluation: one forward through every rank ----------------------------------

    @torch.no_grad()
    def forward_through(self, model: PipelineModel, inputs: Any) -> torch.Tensor:
        """The model's outputs for ``inputs``, computed stage after stage across the ranks
        (blocking sends and receives) and broadcast from the last stage to every rank."""
        assert self.carved is not None
        mine = dict(zip(self.carved.stage_ids, model.stages))
        n = self.carved.n_stages
        args, kwargs = stage_inputs(self._whole, inputs)
        x: torch.Tensor | None = None
        for k in range(n):
            if stage_rank(k, self.pp) != self.pp_rank:
                continue
            if k > 0:
                args = (_recv(self.grid.global_rank(stage_rank(k - 1, self.pp)), self.device),)
            x = mine[k](*args, **kwargs)
            if k + 1 < n:
                _send(x, self.grid.global_rank(stage_rank(k + 1, self.pp)))
        last = self.grid.global_rank(stage_rank(n - 1, self.pp))
        return _broadcast(x if self._has_last else None, last, self.device, self.grid.inner_group)

    # --- the record ------------------------------------------------------------------

    def full_state_dict(self, model: nn.Module) -> dict[str, torch.Tensor]:
        """Every rank's own tensors, gathered on rank 0 under the model's own names (a
        collective: every rank calls it)."""
        import torch.distributed as dist

        assert self.carved is not None
        whole = self.unwrap(model)
        carved, first_replica = self.carved, self.grid.dp_rank == 0  # replicas are alike
        own = {
            k: v.detach().cpu()
            for k, v in whole.state_dict(keep_vars=True).items()
            if first_replica and k in carved.keeps and carved.owner.get(k) == self.pp_rank
        }
        gathered: list[Any] = [None] * self.info.world_size
        dist.all_gather_object(gathered, own)  # between this run's own ranks
        names = self.carved.names
        merged: dict[str, torch.Tensor] = {}
        for part in gathered:
            merged.update(part)
        return {k: merged[k] for k in names if k in merged}

    def describe(self) -> dict[str, Any]:
        out = super().describe()
        carved = self.carved
        out["pipeline"] = {
            "stages": self.pp,
            "dp_size": self.dp,
            "microbatches": self.microbatches,
            "schedule": self.schedule_name,
            "stages_per_rank": stages_per_rank(self.schedule_name),
            "split": self.split,
            "measured_costs": self.costs,
            "spans": [list(s) for s in carved.spans] if carved else None,
            "rank_stages": carved.stage_ids if carved else None,
            "theory_bubble": theory_bubble(self.schedule_name, self.pp, self.microbatches),
            "tied_bytes": carved.tied.bytes if carved else 0,
            "timing": self._timing.kind,
        }
        return out

    def comm_stats(self) -> dict[str, Any]:
        t = self.totals
        busy = t["forward_s"] + t["backward_s"] + t["loss_s"]
        total = busy + t["wait_s"]
        p2p = t["p2p_wait_s"] if self._timing.waits_timed else None
        return {
            "pipeline_steps": self.steps,
            "pipeline_note": "each process's first step (shapes agreed, buffers made) left "
            "out; measured_bubble: pipeline wait over the schedule's time on this rank; of "
            "the wait, pipeline_p2p_wait_s blocked on sends and receives (the neighbours' "
            "work and the transfers), pipeline_schedule_s the schedule's own (posting "
            "transfers, bookkeeping)",
            "pipeline_busy_s": busy,
            "pipeline_wait_s": t["wait_s"],
            "pipeline_p2p_wait_s": p2p,
            "pipeline_schedule_s": None if p2p is None else max(0.0, t["wait_s"] - p2p),
            "measured_bubble": t["wait_s"] / total if total > 0 else None,
            "theory_bubble": theory_bubble(self.schedule_name, self.pp, self.microbatches),
            "last_step_chunks": self._timing.last_events(),
        }


class _ChunkTiming:
    """Each microbatch's forward and backward on this rank (and the loss), timed where
    the schedule runs them: the stages' ``forward_one_chunk``/``backward_one_chunk`` are
    wrapped on this object's clock."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.kind = "perf_counter" if device.type != "cuda" else "cuda_sync"
        self.events: list[tuple[str, int, int, float, float]] = []
        # Finished steps' chunks, until the trainer takes them into its step records
        # (bounded: a caller that never takes them keeps the last few thousand steps).
        self.done: deque[list[tuple[str, int, int, float, float]]] = deque(maxlen=4096)
        self._loss_fn: Callable[..., torch.Tensor] | None = None
        self.last_stage = -1
        self.p2p_wait_s = 0.0
        self.waits_timed = False

    def now(self) -> float:
        """The clock chunks are timed on (after a device synchronize on CUDA)."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return time.perf_counter()

    def instrument(self, stage: Any) -> None:
        """Time ``stage``'s chunk methods (on the instance; the class is untouched)."""
        for kind, attr in (("F", "forward_one_chunk"), ("B", "backward_one_chunk")):
            original = getattr(stage, attr)

            def timed(chunk: int, *args: Any, _o: Any = original, _k: str = kind,
                      **kwargs: Any) -> Any:  # fmt: skip
                t0 = self.now()
                out = _o(chunk, *args, **kwargs)
                self.events.append((_k, stage.stage_index, chunk, t0, self.now()))
                return out

            setattr(stage, attr, timed)

    def start(self, loss_fn: Callable[..., torch.Tensor]) -> None:
        """A new step, whose loss is ``loss_fn``."""
        self.events = []
        self.p2p_wait_s = 0.0
        self._loss_fn = loss_fn

    @contextmanager
    def timed_p2p_waits(self) -> Iterator[None]:
        """Time the schedule's waits on its sends and receives for the step it runs.

        torch's schedules wait through one module-level function (``_wait_batch_p2p``);
        it is wrapped for the duration of the step and put back after it. A torch
        without it leaves the wait unsplit (``waits_timed`` false, the record says so)."""
        from torch.distributed.pipelining import schedules

        original = getattr(schedules, "_wait_batch_p2p", None)
        self.waits_timed = callable(original)
        if original is None:
            yield
            return

        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = self.now()
            try:
                return original(*args, **kwargs)
            finally:
                self.p2p_wait_s += self.now() - t0

        schedules._wait_batch_p2p = timed
        try:
            yield
        finally:
            schedules._wait_batch_p2p = original

    def loss(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """The loss of one microbatch (the schedule calls this on the last stage)."""
        assert self._loss_fn is not None
        t0 = self.now()
        value = self._loss_fn(output, target)
        # The stage is the last; which microbatch, the schedule does not say (-1).
        self.events.append(("L", self.last_stage, -1, t0, self.now()))
        return value

    def finish(self) -> None:
        """The step's chunks are complete: keep them for :meth:`take`."""
        self.done.append(self.events)

    def take(self, n: int, origin: float) -> list[list[list[Any]]]:
        """The oldest ``n`` finished steps' chunks: [kind, stage, microbatch, start, end],
        seconds on the run's clock (perf_counter minus ``origin``)."""
        out = []
        for _ in range(min(n, len(self.done))):
            out.append([[k, s, m, round(a - origin, 6), round(b - origin, 6)]
                        for k, s, m, a, b in self.done.popleft()])  # fmt: skip
        return out

    def sums(self) -> tuple[float, float, float]:
        """This step's forward, backward and loss seconds."""
        out = {"F": 0.0, "B": 0.0, "L": 0.0}
        for kind, _, _, t0, t1 in self.events:
            out[kind] += t1 - t0
        return out["F"], out["B"], out["L"]

    def last_events(self) -> list[list[Any]]:
        """The last step's chunks: [kind, stage, microbatch, start, end] (seconds from
        the step's first chunk)."""
        if not self.events:
            return []
        origin = self.events[0][3]
        return [[k, s, m, round(a - origin, 6), round(b - origin, 6)]
                for k, s, m, a, b in self.events]  # fmt: skip


_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int64)
_HEADER = 10  # dtype, ndim, up to 8 sizes


def _header(x: torch.Tensor) -> torch.Tensor:
    if x.dim() > _HEADER - 2 or x.dtype not in _DTYPES:
        raise ConfigError(f"cannot pass a {x.dtype} tensor of {x.dim()} dims between stages")
    sizes = list(x.shape) + [0] * (_HEADER - 2 - x.dim())
    return torch.tensor([_DTYPES.index(x.dtype), x.dim(), *sizes], dtype=torch.int64)


def _empty_from(header: torch.Tensor, device: torch.device) -> torch.Tensor:
    code, ndim, *sizes = header.tolist()
    return torch.empty(sizes[:ndim], dtype=_DTYPES[code], device=device)


def _send(x: torch.Tensor, dst: int) -> None:
    import torch.distributed as dist

    dist.send(_header(x).to(x.device), dst)
    dist.send(x.contiguous(), dst)


def _recv(src: int, device: torch.device) -> torch.Tensor:
    import torch.distributed as dist

    header = torch.empty(_HEADER, dtype=torch.int64, device=device)
    dist.recv(header, src)
    x = _empty_from(header.cpu(), device)
    dist.recv(x, src)
    return x


def _broadcast(
    x: torch.Tensor | None, src: int, device: torch.device, group: Any = None
) -> torch.Tensor:
    import torch.distributed as dist

    header = _header(x).to(device) if x is not None else torch.empty(
        _HEADER, dtype=torch.int64, device=device)  # fmt: skip
    dist.broadcast(header, src, group=group)
    out = x.contiguous() if x is not None else _empty_from(header.cpu(), device)
    dist.broadcast(out, src, group=group)
    return out
