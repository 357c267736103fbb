"""``--measure``: train a few steps of the same configuration, put the meter beside the estimate.

The run goes through :func:`trainscope.train.run.run`, as ``trainscope run`` would (same
workload, optimizer, precision, checkpointing, composition order), on the current device
in one process, into a temporary directory: 3 steps of one epoch, no weights saved, and a
validation set cut to one batch (it changes nothing in the training step). The memory
meter counts the second step (:class:`trainscope.profiling.memory.MemoryProbe`); the
estimate is then made for that step: one device, the micro-batch it trained on and, for
text-cls, the padded length of that step's batch (text-cls pads each batch to its longest
sequence, so the length is read off the model's input while the run trains).

Only what trainscope trains can be measured: ``--precision fp32``, or ``autocast``
(``trainscope run --precision bf16``).
"""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainscope.config import DataConfig, RunConfig, RuntimeConfig, TrainConfig, WorkloadConfig
from trainscope.errors import ConfigError
from trainscope.estimate.core import Estimate, Setup

RUN_PRECISION = {"fp32": "fp32", "autocast": "bf16"}
STEPS = 3


@dataclass
class Row:
    """One component, estimated beside measured."""

    component: str
    estimated: int
    measured: int | None

    @property
    def error_pct(self) -> float | None:
        """(estimated - measured) / measured, in percent (None where nothing to divide by)."""
        if self.measured is None:
            return None
        if self.measured == 0:
            return 0.0 if self.estimated == 0 else None
        return 100.0 * (self.estimated - self.measured) / self.measured


@dataclass
class Measured:
    """The meter's ``memory`` section of the run, and what it was measured on."""

    memory: dict[str, Any]
    device: str
    batch_size: int
    seq_len: int | None
    """The probe step's padded sequence length (text-cls), else None."""


def run_config(wcfg: WorkloadConfig, setup: Setup, out: Path) -> Any:
    """The RunConfig of the measuring run of ``setup``'s batch size, optimizer, precision,
    checkpointing and device (see the module docs)."""
    batch_size, precision = setup.batch_size, setup.precision
    if precision not in RUN_PRECISION:
        raise ConfigError(
            f"--measure trains as trainscope does: --precision fp32 or autocast, not {precision}"
        )
    options = dict(wcfg.options)
    # Evaluation is not measured: keep it to one batch so the run stays short.
    if wcfg.name == "gpt-char":
        options.setdefault("eval_windows", batch_size)
    elif wcfg.name == "text-cls":
        options.setdefault("eval_limit", batch_size)
    return RunConfig(
        workload=dataclasses.replace(wcfg, options=options),
        data=DataConfig(batch_size=batch_size),
        train=TrainConfig(
            epochs=1,
            max_steps_per_epoch=STEPS,
            optimizer=setup.optimizer,
            save_weights=False,
            log_every=STEPS,
        ),
        runtime=RuntimeConfig(
            device=setup.device,
            precision=RUN_PRECISION[precision],
            checkpointing=setup.checkpointing,
            progress=False,
            timing_warmup_steps=0,
            system_interval_s=60.0,
        ),
        out=str(out),
    )


def measure(wcfg: WorkloadConfig, setup: Setup) -> Measured:
    """Train :data:`STEPS` steps of ``wcfg`` as ``setup`` says (batch size, optimizer,
    precision, checkpointing, device) and return the meter's figures."""
    import torch

    lengths: list[int] = []

    def record(module: Any, args: tuple[Any, ...]) -> None:
        # text-cls's model takes the padded batch as one mapping: note its length per
        # training forward (the recomputation of checkpointed blocks does not call it).
        batch = args[0] if args else None
        if module.training and isinstance(batch, Mapping) and "input_ids" in batch:
            lengths.append(int(batch["input_ids"].shape[-1]))

    from trainscope.train.run import run

    handle = torch.nn.modules.module.register_module_forward_pre_hook(record)
    try:
        with tempfile.TemporaryDirectory(prefix="trainscope-estimate-") as tmp:
            summary = run(run_config(wcfg, setup, Path(tmp) / "run"))
    finally:
        handle.remove()
    memory = summary.get("memory") or {}
    if "activations_bytes" not in memory:
        raise ConfigError(f"the run counted no memory: {memory.get('note', 'no memory section')}")
    # The meter counts the second step of a run of more than one (the first otherwise).
    probe = 1 if STEPS > 1 else 0
    seq = lengths[probe] if probe < len(lengths) else None
    return Measured(memory, str(summary.get("device", setup.device)), setup.batch_size, seq)


def compare(est: Estimate, measured: Measured) -> list[Row]:
    """Component by component, the world-size-1 estimate beside the meter's counts."""
    col = est.columns["ddp"]  # one device: every sharding holds the same
    act = est.activations
    m, a = measured.memory, measured.memory.get("activations", {})
    states = col.states
    est_act = act.total if act is not None else 0
    rows = [
        Row("weights (parameters)", _i(states.weights), m.get("parameters_bytes")),
        Row("buffers", col.buffers, m.get("buffers_bytes")),
        Row("gradients", _i(states.gradients), m.get("gradients_bytes")),
        Row(
            "optimizer states",
            _i(states.optimizer_states + states.master_weights),
            m.get("optimizer_states_bytes"),
        ),
        Row("activations", est_act, m.get("activations_bytes")),
        Row(
            "  saved by autograd",
            act.saved_by_autograd if act else 0,
            a.get("saved_by_autograd_bytes"),
        ),
        Row(
            "  kept by selective checkpointing",
            act.selective_saved if act else 0,
            a.get("selective_saved_bytes"),
        ),
        Row(
            "autocast weight copies",
            act.autocast_weight_copies if act else 0,
            a.get("autocast_weight_copies_bytes"),
        ),
        Row("model states", _i(col.model_states), m.get("model_states_bytes")),
        Row(
            "total (as the meter counts)",
            _i(col.model_states) + col.buffers + est_act,
            m.get("total_bytes"),
        ),
    ]
    return rows


def _i(x: float) -> int:
    return int(round(x))


__all__ = ["RUN_PRECISION", "STEPS", "Measured", "Row", "compare", "measure", "run_config"]
