"""What trainscope sees of a script it did not write: torch's public hooks, onto the clock.

:class:`ScriptHooks` installs, for the time of a run and nothing longer:

- a global module forward pre-hook and forward hook (``always_call``): the *outermost*
  module call is a stage — ``forward`` when gradients are on and the module trains,
  ``evaluation`` when gradients are off or the module is in eval mode (unless another
  model that trains is in train mode: a frozen teacher's forward is part of the step);
- global optimizer step pre- and post-hooks: ``optimizer``; the step of the *leading*
  optimizer (the one that has stepped most often, the first one on a tie) ends a
  training step. ``zero_grad`` (the optimizer's and the module's) and a learning-rate
  scheduler's ``step`` (after the first optimizer step) count as ``optimizer``;
- ``torch.autograd.backward`` (``loss.backward()`` calls it) and ``torch.autograd.grad``:
  ``backward``; a one-element tensor given to it is the step's loss (GradScaler's scaled
  loss is read back unscaled);
- DataLoader iterators (creating one starts its workers; ``next`` blocks until a batch
  is there): ``data_wait``, or ``evaluation`` in an evaluation context;
- ``torch.save`` and safetensors' ``save_file``: ``checkpoint``.

Functions and methods replaced here are put back by :meth:`ScriptHooks.remove`, exactly
as they were. Nothing in the script is changed.
"""

from __future__ import annotations

import warnings
import weakref
from collections.abc import Callable
from typing import Any

import torch
import torch.optim.optimizer as optim_hooks
import torch.utils.data.dataloader as dataloader
from torch import nn

from trainscope.profiling.memory import (
    SavedActivations,
    optimizer_state_tensors,
    tensor_bytes,
)
from trainscope.script.clock import STEP_STAGES, StageClock
from trainscope.script.finders import batch_size, scheduler_classes
from trainscope.script.model_inject import ModelSettings
from trainscope.script.ticks import CudaTicks
from trainscope.workloads.base import find_blocks

# torch warns, on each call of a ``torch.compile``d module while global module hooks are
# registered, that they fire once more for the OptimizedModule: those are trainscope's
# hooks, which count the outermost call only, so the warning is not the script's to see.
_COMPILE_HOOKS_WARNING = r"Using `torch\.compile\(module\)` when there are global hooks"

_compiling = torch.compiler.is_compiling

MAX_TRACKED = 16
"""Models, optimizers and loaders kept track of at most (a script that builds thousands
costs no more memory here than one that builds a few)."""


class StepLimit(BaseException):
    """``--steps N`` reached: the script is ended at the start of its next step.

    A BaseException, like KeyboardInterrupt, so that no ``except Exception`` in the
    script swallows it."""

    def __init__(self, steps: int) -> None:
        super().__init__(f"stopped after {steps} training step(s) (--steps {steps})")
        self.steps = steps


class ScriptHooks:
    """The hooks of one script run (see module docs); :meth:`install`, then :meth:`remove`."""

    def __init__(
        self,
        clock: StageClock,
        *,
        on_steps: Callable[[list[dict[str, Any]]], None],
        log_every: int = 10,
        max_steps: int | None = None,
        memory_at: int = 2,
    ) -> None:
        self.clock = clock
        self.on_steps = on_steps
        self.log_every = max(1, log_every)
        self.max_steps = max_steps
        self.memory_at = memory_at
        self.roots: list[nn.Module] = []  # models seen training, first one first
        self._checked: set[int] = set()
        self.optimizers: list[torch.optim.Optimizer] = []
        self._counts: dict[int, int] = {}
        self.loaders: list[dict[str, Any]] = []  # each DataLoader seen, first one first
        # Whether each loader feeds training, decided when it is first iterated and kept
        # with the loader, weakly (keyed by id(), a freed epoch's loader lent its id to
        # the next one, which went uncounted).
        self._loader_training: weakref.WeakKeyDictionary[Any, bool] = weakref.WeakKeyDictionary()
        self.device: torch.device | None = None
        self.autocast: str | None = None
        self.param_dtype: str | None = None
        self._depth = 0
        self._forwards: list[tuple[str, bool]] = []
        self._steps_left = 0  # step boundaries not yet resolved
        self._loader_samples = False  # the step under way got samples from a DataLoader
        self._unscaled: weakref.WeakValueDictionary[int, torch.Tensor] = (
            weakref.WeakValueDictionary()
        )
        self._saved: SavedActivations | None = None
        self._peaks: dict[str, dict[str, int]] = {}
        self._grad_bytes: int | None = None
        self.memory: dict[str, Any] = {}
        self.memory_error: str | None = None
        self._handles: list[Any] = []
        self._patched: list[tuple[Any, str, Any]] = []
        self._filter: Any = None
        # Modules compiled in place during the run -> their compiled call, to put back.
        self._compiled: weakref.WeakKeyDictionary[nn.Module, Any] = weakref.WeakKeyDictionary()
        self.injected: ModelSettings | None = None  # --inject's model keys, if any

    # --- install / remove ----------------------------------------------------------------

    def install(self) -> ScriptHooks:
        """Register the hooks and wrap the functions (see module docs)."""
        from torch.nn.modules import module as nn_module

        self._handles += [
            nn_module.register_module_forward_pre_hook(self._forward_pre),
            nn_module.register_module_forward_hook(self._forward_post, always_call=True),
            optim_hooks.register_optimizer_step_pre_hook(self._step_pre),
            optim_hooks.register_optimizer_step_post_hook(self._step_post),
        ]
        warnings.filterwarnings("ignore", message=_COMPILE_HOOKS_WARNING, category=UserWarning)
        self._filter = warnings.filters[0]
        self._wrap(torch.autograd, "backward", self._timed_backward)
        self._wrap(torch.autograd, "grad", self._timed_backward)
        self._wrap(torch.optim.Optimizer, "zero_grad", self._timed("optimizer"))
        self._wrap(nn.Module, "zero_grad", self._timed("optimizer"))
        self._wrap(dataloader._BaseDataLoaderIter, "__next__", self._timed_next)
        self._wrap(dataloader.DataLoader, "__iter__", self._timed_iter)
        for scheduler in scheduler_classes():
            self._wrap(scheduler, "step", self._timed_schedule)
        self._wrap(nn.Module, "compile", self._seen_when_compiled)
        self._wrap(torch, "save", self._timed("checkpoint"))
        self._wrap(torch.amp.GradScaler, "scale", self._remember_unscaled)
        try:
            import safetensors.torch as st
        except ImportError:  # no safetensors: torch.save is every save there is
            pass
        else:
            self._wrap(st, "save_file", self._timed("checkpoint"))
            self._wrap(st, "save_model", self._timed("checkpoint"))
        return self

    def _wrap(self, owner: Any, name: str, make: Callable[[Any], Any]) -> None:
        original = owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)
        self._patched.append((owner, name, original))
        wrapped = make(original)
        for attr in ("__name__", "__qualname__", "__doc__", "__module__"):
            try:
                setattr(wrapped, attr, getattr(original, attr))
            except (AttributeError, TypeError):
                pass
        wrapped.__wrapped__ = original
        setattr(owner, name, wrapped)

    def remove(self) -> None:
        """Every hook removed and every function put back (last wrapped, first restored)."""
        self._stop_memory_probe()
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        for owner, name, original in reversed(self._patched):
            setattr(owner, name, original)
        self._patched.clear()
        for module, inner in list(self._compiled.items()):
            module._compiled_call_impl = inner  # as module.compile() left it
        self._compiled.clear()
        if self._filter in warnings.filters:
            warnings.filters.remove(self._filter)
            # What filterwarnings does after a change (so cached decisions are dropped).
            getattr(warnings, "_filters_mutated", lambda: None)()

    # --- what a call is ------------------------------------------------------------------

    def _trains(self, module: nn.Module) -> bool:
        """A model with trainable parameters, called with gradients on in train mode: it
        becomes one of the models the run trains (its first call sets the device)."""
        if id(module) not in self._checked and len(self._checked) < 4 * MAX_TRACKED:
            self._checked.add(id(module))
            param = next((p for p in module.parameters() if p.requires_grad), None)
            if param is not None and len(self.roots) < MAX_TRACKED:
                self.roots.append(module)
                if self.device is None:
                    self._first_model(param)
                    if self.injected is not None:
                        self.injected.on_model(module)
        return any(r is module for r in self.roots)

    def _first_model(self, param: torch.Tensor) -> None:
        self.device = param.device
        self.param_dtype = str(param.dtype).replace("torch.", "")
        kind = param.device.type
        if torch.is_autocast_enabled(kind):
            self.autocast = str(torch.get_autocast_dtype(kind)).replace("torch.", "")
        if kind == "cuda":  # from here on, boundaries are CUDA events (see CudaTicks)
            self.clock.ticks = CudaTicks(param.device)

    def _forward_kind(self, module: nn.Module) -> str:
        grad = torch.is_grad_enabled() and not torch.is_inference_mode_enabled()
        if grad and module.training:
            self._trains(module)
            return "forward"
        if any(r is not module and r.training for r in self.roots):
            return "forward"  # a frozen model's call inside a step of one that trains
        return "evaluation"

    def _evaluating(self) -> bool:
        """A batch fetched now is an evaluation's: gradients are off, or every model the
        run trains is in eval mode."""
        if not torch.is_grad_enabled() or torch.is_inference_mode_enabled():
            return True
        return bool(self.roots) and not any(r.training for r in self.roots)

    def _check_limit(self, stage: str) -> None:
        """``--steps N``: the next training stage after N steps ends the script."""
        if self.max_steps is not None and stage in STEP_STAGES:
            if self.clock.steps_done >= self.max_steps:
                raise StepLimit(self.max_steps)

    # --- the hooks -----------------------------------------------------------------------

    # The two module hooks run on every module call of every model, so they return as
    # early as they can. While dynamo traces (a compiled model's inner calls) they do
    # nothing: ``is_compiling()`` is folded to True there, so the bookkeeping neither
    # enters the graph nor breaks it. (``torch.compiler.disable`` on them broke the graph
    # at every module, so a compiled model ran as many small graphs, in effect eagerly.)

    def _forward_pre(self, module: nn.Module, args: tuple[Any, ...]) -> None:
        if _compiling():
            return
        self._depth += 1
        if self._depth != 1:
            return
        self._forwards.append(("", False))  # popped by _forward_post, even if this raises
        stage = self._forward_kind(module)
        self._check_limit(stage)
        entered = self.clock.enter(stage)
        self._forwards[-1] = (stage, entered)
        if self.injected is not None:  # autocast around the training forward and its loss
            if stage == "forward":
                self.injected.on_forward(module)
            else:
                self.injected.loss_done()
        if stage == "forward" and entered and self.roots and module is self.roots[0]:
            self.clock.add_micro()
            if not self._loader_samples:  # no DataLoader batch: the model's input says
                self.clock.add_samples(batch_size(args))
            self._start_memory_probe()

    def _forward_post(self, module: nn.Module, args: Any, output: Any) -> None:
        if _compiling():
            return
        self._depth -= 1
        if self._depth != 0:
            self._depth = max(self._depth, 0)
            return
        if self._forwards:
            stage, entered = self._forwards.pop()
            if entered:
                self.clock.leave(stage)

    def _step_pre(
        self, opt: torch.optim.Optimizer, args: Any, kwargs: Any
    ) -> tuple[Any, Any] | None:
        depth, entered = getattr(opt, "_trainscope_step", (0, False))
        if depth and self.clock.holds("optimizer"):
            # This optimizer's step inside its own step: a subclass's ``super().step()``,
            # hooked too once the parent class has had an instance (torch wraps each
            # class's step on first use). One step, counted once, by the outer call.
            opt._trainscope_step = (depth + 1, entered)  # type: ignore[attr-defined]
            return None
        self._check_limit("optimizer")
        self.injected.loss_done() if self.injected is not None else None
        if not any(o is opt for o in self.optimizers) and len(self.optimizers) < MAX_TRACKED:
            self.optimizers.append(opt)
            self._counts[id(opt)] = 0
        opt._trainscope_step = (1, self.clock.enter("optimizer"))  # type: ignore[attr-defined]
        return self._timed_closure(args, kwargs)

    def _timed_closure(self, args: Any, kwargs: Any) -> tuple[Any, Any] | None:
        """``step(closure)`` (Lightning, LBFGS): the closure's own code is the script's
        (``other``), not the optimizer's; forward and backward inside it are timed as
        themselves. Without this, Lightning's training_step bookkeeping made the
        optimizer stage 63% of a step and the doctor proposed a fused optimizer."""
        # ``args`` starts with the optimizer itself (torch's step wrapper passes it on).
        if kwargs.get("closure") is not None:
            closure, where = kwargs["closure"], "kwargs"
        elif len(args) > 1 and callable(args[1]):
            closure, where = args[1], "args"
        else:
            return None
        clock = self.clock

        def closure_timed(*a: Any, **k: Any) -> Any:
            entered = clock.enter("other")
            try:
                return closure(*a, **k)
            finally:
                if entered:
                    clock.leave("other")

        if where == "kwargs":
            return args, {**kwargs, "closure": closure_timed}
        return (args[0], closure_timed, *args[2:]), kwargs

    def _step_post(self, opt: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        depth, entered = getattr(opt, "_trainscope_step", (1, False))
        if depth > 1:  # the end of a step inside its own step (see _step_pre)
            opt._trainscope_step = (depth - 1, entered)  # type: ignore[attr-defined]
            return
        opt._trainscope_step = (0, False)  # type: ignore[attr-defined]
        if entered:
            self.clock.leave("optimizer")
        if id(opt) not in self._counts:
            return
        self._counts[id(opt)] += 1
        if opt is not self._leader():
            return
        if self._saved is not None:
            # Counted after the step, not before: a closure (Lightning, LBFGS) makes the
            # gradients inside step(), and zero_grad has not run yet.
            params = (p for g in opt.param_groups for p in g["params"])
            self._grad_bytes = tensor_bytes(p.grad for p in params if p.grad is not None)
        self._stop_memory_probe(finished=True)
        # Counts in the optimizers' order; named when the record is written (flush).
        self.clock.step_end([self._counts.get(id(o), 0) for o in self.optimizers])
        self._loader_samples = False
        self._steps_left += 1
        if self._steps_left >= self.log_every:
            self.flush(block=True)

    def _leader(self, after: Any = None) -> Any:
        """The optimizer that has stepped most often (the first on a tie); ``after``: as
        it will be once ``after`` has taken the step it is about to take."""
        best, most = None, -1
        for opt in self.optimizers:
            n = self._counts.get(id(opt), 0) + (opt is after)
            if n > most:
                best, most = opt, n
        return best

    def optimizer_counts(self) -> dict[str, int]:
        """Steps each optimizer took: ``"0: AdamW"`` -> count, in the order first seen."""
        return {f"{i}: {type(o).__name__}": self._counts.get(id(o), 0)
                for i, o in enumerate(self.optimizers)}  # fmt: skip

    def optimizer_rows(self) -> list[dict[str, Any]]:
        """Each optimizer seen: its class, steps, first group's lr, fused / foreach."""
        rows = []
        for opt in self.optimizers:
            lr = opt.param_groups[0].get("lr") if opt.param_groups else None
            rows.append({
                "name": type(opt).__name__,
                "steps": self._counts.get(id(opt), 0),
                "lr": float(lr) if isinstance(lr, (int, float, torch.Tensor)) else None,
                "fused": bool(opt.defaults.get("fused")),
                "foreach": bool(opt.defaults.get("foreach")),
            })  # fmt: skip
        return rows

    def _timed(self, stage: str) -> Callable[[Any], Any]:
        def make(original: Any) -> Any:
            def timed(*args: Any, **kwargs: Any) -> Any:
                self._check_limit(stage)
                entered = self.clock.enter(stage)
                try:
                    return original(*args, **kwargs)
                finally:
                    if entered:
                        self.clock.leave(stage)

            return timed

        return make

    def _seen_when_compiled(self, original: Any) -> Any:
        """``module.compile()`` compiles the module's whole call, global hooks included,
        so its outermost call ran no hook at all (its forward was ``other``, its model
        unseen). The compiled call is wrapped here to run the module hooks eagerly
        around it, and put back by :meth:`remove`."""

        def compile(module: nn.Module, *args: Any, **kwargs: Any) -> Any:
            out = original(module, *args, **kwargs)
            inner = getattr(module, "_compiled_call_impl", None)
            if inner is None or module in self._compiled:
                return out
            self._compiled[module] = inner

            def call(*a: Any, **k: Any) -> Any:
                self._forward_pre(module, a)
                try:
                    return inner(*a, **k)
                finally:
                    self._forward_post(module, a, None)

            module._compiled_call_impl = call
            return out

        return compile

    def _timed_schedule(self, original: Any) -> Any:
        """A learning-rate scheduler's ``step`` is ``optimizer`` (as in trainscope's own
        loop), once an optimizer has stepped: a scheduler's constructor steps it once,
        during the script's set-up, which must not end ``setup``."""
        timed = self._timed("optimizer")(original)

        def step(*args: Any, **kwargs: Any) -> Any:
            if any(self._counts.values()):
                return timed(*args, **kwargs)
            return original(*args, **kwargs)

        return step

    def _timed_backward(self, original: Any) -> Any:
        def backward(tensors: Any, *args: Any, **kwargs: Any) -> Any:
            self._check_limit("backward")
            self.injected.loss_done() if self.injected is not None else None
            entered = self.clock.enter("backward")
            if entered and isinstance(tensors, torch.Tensor) and tensors.numel() == 1:
                loss = self._unscaled.get(id(tensors), tensors)
                self.clock.add_loss(loss.detach())
            try:
                return original(tensors, *args, **kwargs)
            finally:
                if entered:
                    self.clock.leave("backward")

        return backward

    def _remember_unscaled(self, original: Any) -> Any:
        def scale(scaler: Any, outputs: Any) -> Any:
            out = original(scaler, outputs)
            if isinstance(out, torch.Tensor) and isinstance(outputs, torch.Tensor):
                out._trainscope_unscaled = outputs.detach()  # lives as long as ``out``
                self._unscaled[id(out)] = out._trainscope_unscaled
            return out

        return scale

    def _fetch(self, original: Any, it: Any, creating: bool, training: bool | None) -> Any:
        """``training``: whether the loader feeds training, as first seen (None: unknown).
        A training loader's batch is data wait even while the model is still in eval
        mode: Hugging Face's Trainer fetches the next batch after an evaluation and only
        then calls ``model.train()`` (it was counted as evaluation, its samples lost)."""
        if not torch.is_grad_enabled() or torch.is_inference_mode_enabled():
            stage = "evaluation"
        elif training is not None:
            stage = "data_wait" if training else "evaluation"
        else:
            stage = "evaluation" if self._evaluating() else "data_wait"
        self._check_limit(stage)
        entered = self.clock.enter(stage)
        try:
            out = original(it)
        finally:
            if entered:
                self.clock.leave(stage)
        if stage == "data_wait" and not creating:
            n = batch_size(out)
            if n:
                self.clock.add_samples(n)
                self._loader_samples = True
        return out

    def _timed_next(self, original: Any) -> Any:
        def __next__(it: Any) -> Any:
            training = getattr(it, "_trainscope_training", None)
            return self._fetch(original, it, creating=False, training=training)

        return __next__

    def _timed_iter(self, original: Any) -> Any:
        def __iter__(loader: Any) -> Any:
            training = self._loader_training.get(loader)
            if training is None:
                training = not self._evaluating()
                self._loader_training[loader] = training
                if len(self.loaders) < MAX_TRACKED:
                    self.loaders.append(self._loader_row(loader, training))
            it = self._fetch(original, loader, creating=True, training=training)
            try:  # its batches are the loader's, whatever mode the model is in then
                it._trainscope_training = training
            except AttributeError:  # an iterator with __slots__: decided per batch
                pass
            return it

        return __iter__

    @staticmethod
    def _loader_row(loader: Any, training: bool) -> dict[str, Any]:
        return {
            "num_workers": loader.num_workers,
            # a batch sampler's own (accelerate's loaders, Hugging Face's Trainer)
            "batch_size": loader.batch_size or getattr(loader.batch_sampler, "batch_size", None),
            "pin_memory": bool(loader.pin_memory),
            "training": training,
        }

    # --- step records --------------------------------------------------------------------

    def flush(self, block: bool = True) -> None:
        """Resolve the finished steps, read their losses in one go, hand the records on."""
        records = self.clock.resolve(block=block)
        self._steps_left -= len(records)
        if not records:
            return
        losses = [loss for r in records for loss in r["losses"]]
        values = iter(torch.stack([x.float().reshape(()) for x in losses]).cpu().tolist()
                      if losses else [])  # fmt: skip
        names = list(self.optimizer_counts())
        for r in records:
            read = [next(values) for _ in r.pop("losses")]
            r["loss"] = sum(read) if read else None
            r["optimizers"] = dict(zip(names, r["optimizers"]))
        self.on_steps(records)

    # --- the memory probe ----------------------------------------------------------------

    def _start_memory_probe(self) -> None:
        """On the probe step's first training forward: count what autograd saves."""
        if self._saved is not None or self.memory or self.clock.steps_done != self.memory_at - 1:
            return
        model = self.roots[0] if len(self.roots) == 1 else nn.ModuleList(self.roots)
        try:
            # split at the blocks --inject activation_checkpointing would checkpoint
            self._saved = SavedActivations(model, lambda m: find_blocks(m)[1]).__enter__()
        except Exception as e:  # the probe must never break the script
            self.memory_error = f"{type(e).__name__}: {e}"
            self._saved = None
            return
        if self.device is not None and self.device.type == "cuda":
            # Each stage's peak is its own: the allocator's peak is reset as each ends.
            torch.cuda.reset_peak_memory_stats(self.device)
            self._peaks = {"stage_peak_allocated_bytes": {}, "stage_peak_reserved_bytes": {}}
            self.clock.on_leave = self._cuda_peak

    def _cuda_peak(self, stage: str) -> None:
        """The CUDA allocator's peaks since the last stage ended, as ``stage``'s."""
        allocated = torch.cuda.max_memory_allocated(self.device)
        reserved = torch.cuda.max_memory_reserved(self.device)
        peaks = self._peaks
        for key, value in (("stage_peak_allocated_bytes", allocated),
                           ("stage_peak_reserved_bytes", reserved)):  # fmt: skip
            peaks[key][stage] = max(peaks[key].get(stage, 0), value)
        torch.cuda.reset_peak_memory_stats(self.device)

    def _stop_memory_probe(self, finished: bool = False) -> None:
        saved, self._saved = self._saved, None
        if saved is None:
            return
        saved.__exit__(None, None, None)
        self.clock.on_leave = None
        if not finished:
            return
        models = [p for r in self.roots for p in r.parameters()]
        buffers = [b for r in self.roots for b in r.buffers()]
        act = saved.count
        self.memory = {
            "step": self.clock.steps_done + 1,
            "parameters_bytes": tensor_bytes(models),
            "buffers_bytes": tensor_bytes(buffers),
            "gradients_bytes": self._grad_bytes,
            "optimizer_states_bytes": tensor_bytes(
                t for o in self.optimizers for t in optimizer_state_tensors(o)
            ),
            "activations_bytes": act.total_bytes,
            "activations": {
                "saved_by_autograd_bytes": act.saved_by_autograd_bytes,
                "selective_saved_bytes": act.selective_saved_bytes,
                "autocast_weight_copies_bytes": act.autocast_weight_copies_bytes,
                "storages": act.tensors,
                "peak_in_flight_bytes": act.peak_in_flight_bytes,
                # the split at the model's blocks (what full checkpointing would keep)
                **{
                    k: getattr(act, k)
                    for k in ("blocks", "inside_blocks_bytes", "block_inputs_bytes")
                },  # fmt: skip
            },
        }
        if self._peaks:
            self.memory["cuda"] = self._peaks

    def memory_section(self, method: str) -> dict[str, Any]:
        """The ``memory`` section: what the probe step held, as a native run's."""
        f = self.memory
        if not f:
            why = self.memory_error or f"no training step {self.memory_at} was seen"
            return {"method": method, "note": f"{why}: nothing counted"}
        states = [f["parameters_bytes"], f["gradients_bytes"] or 0, f["optimizer_states_bytes"]]
        return {
            "method": method,
            **f,
            "model_states_bytes": sum(states),
            "total_bytes": sum(states) + f["buffers_bytes"] + f["activations_bytes"],
            "models": len(self.roots),
            "optimizers": len(self.optimizers),
        }


__all__ = ["MAX_TRACKED", "ScriptHooks", "StepLimit"]
