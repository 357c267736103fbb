"""Where a training step's memory goes, counted from the tensors themselves.

A process's RSS (or one CUDA high-water mark) says how much memory there was, not what it
held, and runs sharing a process share it. The meter here counts, on one chosen step of a
run (the probe step), the bytes of:

- **parameters** (and buffers, apart): every storage once (tied weights share one); under
  FSDP, this rank's shards;
- **gradients**: the ``.grad`` tensors at the moment the optimizer steps;
- **optimizer states**: the tensors in ``optimizer.state`` after the step (momentum,
  Adam's moments and step counters);
- **activations**: what the forward and the loss keep for backward. Every tensor
  autograd saves passes through ``torch.autograd.graph.saved_tensors_hooks``; their
  storages are counted once each, parameters excluded (a view of a bigger tensor counts
  that whole storage: it is what stays alive). A checkpointed block's inputs pass through
  them too; under the selective policy the op outputs the checkpoint keeps do not, so the
  block reports those and they are added. Low-precision copies of weights
  that autocast makes and saves (bf16/fp16) are counted apart, as
  ``autocast_weight_copies``;
- on CUDA also ``max_memory_allocated`` / ``max_memory_reserved`` per stage of the probe
  step (the peak statistics are reset at each stage boundary, so a peak belongs to the
  stage that reached it).

The counting happens in hooks during the probe step only (the second step of an attempt,
when there is one: by then the optimizer's states exist, as in every later step); its cost
lands in that step, which is inside the timing warm-up by default.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

METHOD = (
    "tensor bytes counted on one training step (each storage once): parameters and "
    "buffers from the model, gradients as the optimizer steps, optimizer states after it, "
    "activations from autograd's saved-tensor hooks plus what checkpointed blocks keep"
)


def untraced(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``torch.compiler.disable(fn)`` (bookkeeping never traced into a compiled graph),
    decided at the first call once torch._dynamo is loaded: applying it at import time
    imports torch._dynamo, about 2 s, which a process that never compiles (a script that
    ``trainscope profile`` measures) should not pay."""
    disabled: list[Callable[..., Any]] = []

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        if not disabled:
            if "torch._dynamo" not in sys.modules:  # nothing can be compiling: no dynamo
                return fn(*args, **kwargs)
            disabled.append(torch.compiler.disable(fn))
        return disabled[0](*args, **kwargs)

    return call


def _local(t: torch.Tensor) -> torch.Tensor:
    """The tensor that holds the bytes: a DTensor's local shard (FSDP, tensor
    parallelism), the buffer inside a functional collective's not-yet-waited result
    (``AsyncCollectiveTensor``: a row-split layer's output that autograd saves, as a LoRA
    adapter's input under tensor parallelism); any other tensor as it is."""
    to_local = getattr(t, "to_local", None)
    if callable(to_local):
        return to_local()
    inner = getattr(t, "elem", None)
    return inner if type(t) is not torch.Tensor and isinstance(inner, torch.Tensor) else t


def _key(t: torch.Tensor) -> tuple[str, int] | None:
    """Identity of a tensor's storage (None for an empty one, which holds no bytes)."""
    s = _local(t).untyped_storage()
    ptr = s.data_ptr()
    return (str(t.device), ptr) if ptr else None


class StorageTally:
    """Bytes of distinct storages: adding a tensor whose storage was seen adds nothing."""

    def __init__(self, exclude: Iterable[tuple[str, int]] = ()) -> None:
        self.seen: set[tuple[str, int]] = set(exclude)
        self.bytes = 0
        self.tensors = 0

    def add(self, t: torch.Tensor) -> int:
        """Count ``t``'s storage if new; returns the bytes added."""
        key = _key(t)
        if key is None or key in self.seen:
            return 0
        self.seen.add(key)
        n = _local(t).untyped_storage().nbytes()
        self.bytes += n
        self.tensors += 1
        return n


def tensor_bytes(tensors: Iterable[torch.Tensor]) -> int:
    """Bytes of the distinct storages behind ``tensors``."""
    tally = StorageTally()
    for t in tensors:
        tally.add(t)
    return tally.bytes


def optimizer_state_tensors(optimizer: torch.optim.Optimizer) -> Iterator[torch.Tensor]:
    """Every tensor the optimizer keeps per parameter."""
    for entry in optimizer.state.values():
        for v in entry.values():
            if isinstance(v, torch.Tensor):
                yield v


def _is_weight_copy(t: torch.Tensor) -> bool:
    """A low-precision copy of a parameter made by autocast (or a view of one, such as the
    transpose a Linear saves): ``param.to(bf16)`` a few view steps up its graph."""
    fn = t.grad_fn
    for _ in range(4):  # the copy, or views of it (t(), view, expand): a short chain
        if fn is None:
            return False
        nxt = [f for f, _ in fn.next_functions if f is not None]
        if type(fn).__name__ == "ToCopyBackward0":
            leaf = getattr(nxt[0], "variable", None) if len(nxt) == 1 else None
            return isinstance(leaf, nn.Parameter)
        if len(nxt) != 1:
            return False
        fn = nxt[0]
    return False


@dataclass
class ActivationCount:
    """Saved-for-backward bytes of one step, by where they were found."""

    saved_by_autograd_bytes: int = 0
    selective_saved_bytes: int = 0
    autocast_weight_copies_bytes: int = 0
    tensors: int = 0
    blocks: int = 0
    """The model's repeated blocks (``model.blocks``) timed apart; 0: none, or checkpointed."""
    inside_blocks_bytes: int = 0
    """Of the saved bytes, those saved while a block's forward ran."""
    block_inputs_bytes: int = 0
    """The blocks' inputs (each storage once): what checkpointing every block would keep
    of them instead."""
    peak_in_flight_bytes: int = 0
    """The most saved-for-backward bytes held at one moment of the step: what is saved
    and not yet used by backward. One forward then one backward hold everything at once
    (the peak is the total); a pipeline's 1F1B schedule frees microbatches as it goes."""

    @property
    def total_bytes(self) -> int:
        """Activations proper (weight copies are reported apart)."""
        return self.saved_by_autograd_bytes + self.selective_saved_bytes


class _Held:
    """A saved tensor as autograd keeps it while the probe counts: when backward takes it
    back (its node runs; autograd frees it right after) its bytes leave the count of what
    is in flight. Taken back, not garbage-collected: a finalizer (``__del__``) would be
    where a stop signal's exception gets lost and printed (see runtime.signals)."""

    __slots__ = ("key", "live", "owner", "t")

    def __init__(self, t: torch.Tensor, owner: SavedActivations, key: tuple[str, int]) -> None:
        self.t, self.owner, self.key, self.live = t, owner, key, True


class SavedActivations:
    """Context manager counting what autograd saves for backward while it is active, and
    the most of it held at once."""

    def __init__(
        self, model: nn.Module, blocks_of: Callable[[nn.Module], list[nn.Module]] | None = None
    ) -> None:
        """``blocks_of``: where the saved bytes split into blocks (default
        ``model.blocks``, as activation checkpointing finds them for a run)."""
        self.model = model
        self.blocks_of = blocks_of
        params = [p for p in model.parameters()]
        self.tally = StorageTally(k for p in params if (k := _key(p)) is not None)
        self.copies = StorageTally()
        self.count = ActivationCount()
        self._hooks: Any = None
        self._blocks: list[nn.Module] = []
        self._inputs = StorageTally()
        self._inside = 0  # depth of block forwards running now
        self._block_hooks: list[Any] = []
        self._held: dict[tuple[str, int], list[int]] = {}  # storage -> [holders, bytes]
        self._in_flight = 0

    @untraced  # bookkeeping: never traced into a compiled model's graph
    def _pack(self, t: torch.Tensor) -> torch.Tensor:
        if isinstance(t, nn.Parameter):  # FSDP's unsharded parameters among them
            return t
        if _is_weight_copy(t):
            self.count.autocast_weight_copies_bytes += self.copies.add(t)
        else:
            added = self.tally.add(t)
            self.count.saved_by_autograd_bytes += added
            if self._inside:
                self.count.inside_blocks_bytes += added
            key = _key(t)
            if key is not None and (added or key in self._held):
                return self._hold(t, key)
        return t

    def _hold(self, t: torch.Tensor, key: tuple[str, int]) -> _Held:
        entry = self._held.get(key)
        if entry is None:
            entry = self._held[key] = [0, _local(t).untyped_storage().nbytes()]
            self._in_flight += entry[1]
            self.count.peak_in_flight_bytes = max(self.count.peak_in_flight_bytes,
                                                  self._in_flight)  # fmt: skip
        entry[0] += 1
        return _Held(t, self, key)

    def _release(self, key: tuple[str, int]) -> None:
        entry = self._held.get(key)
        if entry is None:
            return
        entry[0] -= 1
        if entry[0] == 0:
            del self._held[key]
            self._in_flight -= entry[1]
            # Freed: a later tensor at the same address is another storage, and counts
            # (a pipeline's next microbatch reuses the memory of one whose backward ran).
            self.tally.seen.discard(key)

    def _watch_blocks(self) -> None:
        """Split the saved bytes at the model's blocks, for an uncheckpointed model: what
        its blocks save, and their inputs (what full checkpointing keeps instead)."""
        from trainscope.workloads.base import model_blocks

        model = getattr(self.model, "module", self.model)
        if any(getattr(m, "_compiled_call_impl", None) is not None for m in model.modules()):
            return  # hooks added to a compiled module for one step would recompile it
        blocks = (self.blocks_of or model_blocks)(model)
        self.count.blocks = len(blocks)

        @untraced
        def enter(_module: nn.Module, args: tuple[Any, ...]) -> None:
            self._inside += 1
            for a in args:
                if isinstance(a, torch.Tensor):
                    self.count.block_inputs_bytes += self._inputs.add(a)

        @untraced
        def leave(*_: Any) -> None:
            self._inside -= 1

        for block in blocks:
            self._block_hooks.append(block.register_forward_pre_hook(enter))
            self._block_hooks.append(block.register_forward_hook(leave))

    def __enter__(self) -> SavedActivations:
        from trainscope.techniques.activation_checkpointing import checkpointed_blocks

        self._blocks = checkpointed_blocks(self.model)
        for block in self._blocks:
            block._trainscope_kept = []
        if not self._blocks:
            self._watch_blocks()
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, _unpack)
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._hooks.__exit__(*exc)
        for handle in self._block_hooks:
            handle.remove()
        for block in self._blocks:
            for kept in block._trainscope_kept:
                for t in kept.saved:
                    self.count.selective_saved_bytes += self.tally.add(t)
            block._trainscope_kept = None
        self.count.tensors = self.tally.tensors


def _unpack(packed: Any) -> Any:
    if not isinstance(packed, _Held):
        return packed
    if packed.live:  # the first time backward reads it: its node is running now
        packed.live = False
        packed.owner._release(packed.key)
    return packed.t


class _PeakTimer:
    """A stage timer that also reads the CUDA allocator's peaks at each stage boundary
    (and resets them, so each peak belongs to one stage). Host calls: no device sync."""

    def __init__(self, timer: Any, device: torch.device) -> None:
        self.timer, self.device = timer, device
        self.allocated: dict[str, int] = {}
        self.reserved: dict[str, int] = {}
        self.kind = getattr(timer, "kind", None)

    def start_step(self) -> None:
        torch.cuda.reset_peak_memory_stats(self.device)
        self.timer.start_step()

    def mark(self, stage: str) -> None:
        self.timer.mark(stage)
        self.allocated[stage] = torch.cuda.max_memory_allocated(self.device)
        self.reserved[stage] = torch.cuda.max_memory_reserved(self.device)
        torch.cuda.reset_peak_memory_stats(self.device)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.timer, name)


StepFn = Callable[[Any, Any, Any], Any]


@dataclass
class MemoryProbe:
    """Wraps a step function; on call number ``at`` (1-based) it counts what the step
    holds (see module docs) and keeps the figures for :meth:`section`."""

    step_fn: StepFn
    at: int = 2
    calls: int = 0
    figures: dict[str, Any] = field(default_factory=dict)
    error: str | None = None

    def __call__(self, state: Any, batches: Any, timer: Any) -> Any:
        self.calls += 1
        if self.calls != self.at:
            return self.step_fn(state, batches, timer)
        return self._probe(state, batches, timer)

    def _probe(self, state: Any, batches: Any, timer: Any) -> Any:
        model, optimizer = state.model, state.optimizer
        grads: dict[str, int] = {}

        def before_step(opt: torch.optim.Optimizer, *_: Any) -> None:
            params = (p for g in opt.param_groups for p in g["params"])
            grads["bytes"] = tensor_bytes(p.grad for p in params if p.grad is not None)

        handle = optimizer.register_step_pre_hook(before_step)
        peaks = _PeakTimer(timer, state.device) if state.device.type == "cuda" else None
        try:
            with SavedActivations(model) as saved:
                out = self.step_fn(state, batches, peaks or timer)
        finally:
            handle.remove()
        act = saved.count
        self.figures = {
            "step": state.step,
            "parameters_bytes": tensor_bytes(model.parameters()),
            "buffers_bytes": tensor_bytes(model.buffers()),
            "gradients_bytes": grads.get("bytes"),
            "optimizer_states_bytes": tensor_bytes(optimizer_state_tensors(optimizer)),
            "activations_bytes": act.total_bytes,
            "activations": {
                "saved_by_autograd_bytes": act.saved_by_autograd_bytes,
                "selective_saved_bytes": act.selective_saved_bytes,
                "autocast_weight_copies_bytes": act.autocast_weight_copies_bytes,
                "storages": act.tensors,
                "peak_in_flight_bytes": act.peak_in_flight_bytes,
                **(
                    {
                        "blocks": act.blocks,
                        "inside_blocks_bytes": act.inside_blocks_bytes,
                        "block_inputs_bytes": act.block_inputs_bytes,
                    }
                    if act.blocks
                    else {}
                ),
            },
        }
        if peaks is not None:
            self.figures["cuda"] = {
                "stage_peak_allocated_bytes": peaks.allocated,
                "stage_peak_reserved_bytes": peaks.reserved,
            }
        return out

    def section(self, **extra: Any) -> dict[str, Any]:
        """The ``memory`` section of ``summary.json`` (``extra``: checkpointing, sharding)."""
        f = self.figures
        if not f:
            return {
                "method": METHOD,
                "note": f"no step {self.at} was taken: nothing counted",
                **extra,
            }
        states = [f["parameters_bytes"], f["gradients_bytes"] or 0, f["optimizer_states_bytes"]]
        return {
            "method": METHOD,
            **f,
            "model_states_bytes": sum(states),
            "total_bytes": sum(states) + f["buffers_bytes"] + f["activations_bytes"],
            **extra,
        }


__all__ = [
    "METHOD",
    "ActivationCount",
    "MemoryProbe",
    "SavedActivations",
    "StorageTally",
    "optimizer_state_tensors",
    "tensor_bytes",
]
