"""Typed run configuration: dataclasses, validation, YAML in and out (torch-free).

A :class:`RunConfig` is built from defaults, then a YAML file, then CLI overrides, and is
validated as a whole before anything runs. The resolved config is saved with every run
(``config.yaml``) and can be fed back with ``--config`` to rerun it.
"""

from __future__ import annotations

import copy
import dataclasses
import os
import re
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainscope import registry
from trainscope.errors import ConfigError
from trainscope.recipes import apply_recipe
from trainscope.util.checks import (  # noqa: F401 (INT_LIMIT, SEED_LIMIT, gib, show re-exported)
    INT_LIMIT,
    SEED_LIMIT,
    check_types,
    gib,
    need_integer,
    need_number,
    need_positive,
    need_seed,
    show,
)
from trainscope.util.safe_yaml import (  # noqa: F401  (load_yaml, safe_load_yaml re-exported)
    MAX_YAML_DEPTH,
    load_yaml,
    safe_load_yaml,
)
from trainscope.util.target import parse_target

SINK_NAMES = ("wandb", "tensorboard")
"""The experiment trackers a run may also log to (``tracking:`` in a config)."""
BUILTIN_WORKLOADS = tuple(registry.WORKLOADS)
"""The workloads trainscope ships (their registry entries, at import); a workload
registered later (:func:`trainscope.registry.register_workload`) is chosen as they are."""
PRECISIONS = ("fp32", "tf32", "fp16", "bf16")
OPTIMIZERS = ("sgd", "adam", "adamw", "muon")
OPTIMIZER_IMPLS = ("auto", "for-loop", "foreach", "fused")
SCHEDULES = ("constant", "cosine", "linear", "one-cycle")
TIMING_MODES = ("auto", "exact")
LOADERS = ("torch", "fast")
BACKENDS = ("auto", "nccl", "gloo")
DEVICES_RE = re.compile(r"^(auto|cpu|cuda(:\d+)?)$")
# Activation checkpointing policies (trainscope.techniques.activation_checkpointing applies them).
CHECKPOINTING_HELP = "none | full | every-K (every K-th block) | selective (keep matmul outputs)"
_EVERY_K = re.compile(r"^every-([1-9][0-9]{0,5})$")
# A user's own workload: "package.module:factory".
FACTORY_RE = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")

# --------------------------------------------------------------------------- limits
# Bounds on what a config may ask for, so that an absurd value is one clear error before
# anything runs, not a stalled machine, an exhausted memory or an OverflowError.
# PyTorch's default is 2; more only holds memory, and the DataLoader queues that many
# indices per worker up front (10**9 would take minutes before the first batch).
MAX_PREFETCH_FACTOR = 64
MIN_SYSTEM_INTERVAL_S = 0.1  # below, the sampler costs more than it measures
MAX_SYSTEM_INTERVAL_S = 86_400.0  # a day; far longer waits overflow the thread's timer
MAX_DIST_TIMEOUT_S = 7 * 86_400.0  # a week; far longer overflows the timedelta
# The process group forms under the same timeout: below a second, gloo cannot even
# connect its ranks on one machine (1e-9 s surfaced as torch's DistNetworkError).
MIN_DIST_TIMEOUT_S = 1.0
MAX_THREADS = 4096  # intra-op threads per process: far above any CPU's core count
# Set by trainscope's launcher in its workers: the OMP_NUM_THREADS the user had (empty:
# none). torchrun puts 1 there otherwise, which says nothing about what the user wanted.
USER_OMP_ENV = "TRAINSCOPE_USER_OMP_NUM_THREADS"
MAX_BUCKET_MB = 1024.0 * 1024.0  # 1 TiB: larger is one bucket for any model anyway
PP_SCHEDULES = registry.OPTIONS["dist.pp_schedule"].choices
"""``--pp-schedule``: torch.distributed.pipelining's ScheduleGPipe, Schedule1F1B and
ScheduleInterleaved1F1B (two stages per rank)."""
PP_SPLITS = registry.OPTIONS["dist.pp_split"].choices
"""``--pp-split``: how the blocks are shared out among the stages."""
MAX_MICROBATCHES = 4096  # beyond any batch a pipeline step splits; bounds the schedule's lists
MAX_SPLIT = MAX_MICROBATCHES  # a count option's bound (stages, replicas, microbatches)
# Learning rates: far above any that trains (one of 100 diverges any model in a step), and
# far below what overflows float32 inside torch's update (1e300 surfaced as torch's
# "value cannot be converted to type float without overflow" at the first step).
MAX_LR = 100.0
MUON_ONLY = ("muon_lr", "muon_ns_dtype", "muon_ns_steps")
MUON_NS_DTYPES = ("auto", "bf16", "fp32")
"""TrainConfig fields only --optimizer muon reads."""


def checkpointing_policy(text: Any) -> tuple[str, int]:
    """``--checkpointing`` text -> (kind, k): ("none", 0), ("full", 1), ("every", K) or
    ("selective", 1); ``every-1`` is ``full``. Raises ConfigError for anything else."""
    if text in ("none", "full", "selective"):
        return text, 0 if text == "none" else 1
    m = _EVERY_K.match(text) if isinstance(text, str) else None
    if m:
        k = int(m.group(1))
        return ("full", 1) if k == 1 else ("every", k)
    raise ConfigError(f"unknown checkpointing policy {show(text)}: choose {CHECKPOINTING_HELP}")


def need_choice(what: str, value: Any, allowed: Collection[str]) -> None:
    """Raise ConfigError ``unknown WHAT 'value': choose one of ...`` unless ``value`` is
    one of ``allowed``."""
    if value not in allowed:
        raise ConfigError(f"unknown {what} {value!r}: choose one of {', '.join(allowed)}")


def need_lr(name: str, value: Any) -> None:
    """A learning rate: a finite number > 0 and at most :data:`MAX_LR`, or one line."""
    need_number(name, value, low=0.0, low_open=True)
    if value > MAX_LR:
        raise ConfigError(
            f"{name} must be at most {MAX_LR:g} (no model trains at a larger one), "
            f"got {show(value)}"
        )


def available_cpus() -> int:
    """CPUs this process may run on (its affinity mask where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):  # no sched_getaffinity (macOS, Windows)
        return os.cpu_count() or 1


def max_workers() -> int:
    """The most worker processes (DataLoader workers, processes per node) a config may ask
    for here: max(32, 4 x the CPUs available to this process).

    Far more processes than CPUs only add start-up time and memory, and a typo such as
    100000 would fork until the machine stalls; 32 keeps small sweeps allowed anywhere.
    """
    return max(32, 4 * available_cpus())


def memory_budget_bytes() -> int:
    """What one data set or model built in host memory may take: half the machine's
    physical memory (64 GiB where the OS does not say), leaving room for the copies
    training makes (normalised tensors, gradients, optimizer state)."""
    try:
        total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        total = 0
    return total // 2 if total > 0 else 64 << 30


SYNTHETIC_ONLY = ("synthetic_samples", "synthetic_shape", "num_classes")
"""WorkloadConfig fields only the synthetic workload (and a user's factory) reads."""


@dataclass
class WorkloadConfig:
    """What to train: a built-in workload name or ``package.module:factory``."""

    name: str = "digits"
    """Workload: digits | mnist | synthetic | gpt-char | text-cls, or
    ``package.module:factory`` for your own."""
    data_dir: str | None = None
    """Local data folder (mnist: the four IDX files); None downloads to the cache."""
    download: bool = True
    """Allow downloading data that is not found locally."""
    augment: bool = False
    """Random-affine augmentation of training images (built-in image workloads)."""
    synthetic_samples: int = 8192
    """synthetic: number of training samples (val and test get a quarter each)."""
    synthetic_shape: tuple[int, int, int] = (1, 28, 28)
    """synthetic: shape (channels, height, width) of one sample."""
    num_classes: int = 10
    """synthetic: number of classes."""
    options: dict[str, Any] = field(default_factory=dict)
    """Workload-specific settings, checked by the workload itself (gpt-char: preset,
    n_layer, ...; text-cls: model, size, task, lora_r, ...; a user factory reads its own)."""

    def __post_init__(self) -> None:
        if self.name not in registry.WORKLOADS and not FACTORY_RE.match(self.name):
            raise ConfigError(
                f"unknown workload {self.name!r}: choose one of {', '.join(registry.WORKLOADS)}"
                " or give package.module:factory"
            )
        self.synthetic_shape = tuple(self.synthetic_shape)  # YAML gives a list
        if len(self.synthetic_shape) != 3 or any(
            not isinstance(s, int) or isinstance(s, bool) or not 0 < s < INT_LIMIT
            for s in self.synthetic_shape
        ):
            raise ConfigError(
                f"synthetic_shape must be three positive sizes (C, H, W), got "
                f"{show(list(self.synthetic_shape))}"
            )
        need_positive("synthetic_samples", self.synthetic_samples)
        need_integer("num_classes", self.num_classes)
        if self.num_classes < 2:
            raise ConfigError(f"num_classes must be at least 2, got {self.num_classes}")
        if self.name == "synthetic":
            self._check_synthetic_size()

    def _check_synthetic_size(self) -> None:
        """The synthetic data are made up front in host memory: refuse sizes that cannot
        fit there, before anything runs."""
        c, h, w = self.synthetic_shape
        n = self.synthetic_samples
        # float32 samples: the training set plus validation and test (a quarter each).
        need = (n + 2 * max(n // 4, 1)) * c * h * w * 4
        budget = memory_budget_bytes()
        if need > budget:
            raise ConfigError(
                f"synthetic data of {n} samples of {c}x{h}x{w} would take {gib(need)} of "
                f"memory, more than the {gib(budget)} allowed (half of this machine's "
                f"memory): lower synthetic_samples or synthetic_shape"
            )


@dataclass
class DataConfig:
    """Input pipeline: batch size and every DataLoader knob that matters for speed."""

    batch_size: int = 32
    """Samples per optimizer step."""
    num_workers: int | str = 0
    """DataLoader worker processes (0 loads in the main process), or "auto": measured on
    the real pipeline at start-up and cached per machine and workload."""
    loader: str = "torch"
    """torch: a DataLoader; fast: in-memory splits held on the device, batches by indexing,
    augmentation batched on the device (workloads whose data fit in memory)."""
    pin_memory: bool = False
    """Page-locked host memory for faster, asynchronous host-to-device copies (CUDA)."""
    persistent_workers: bool = False
    """Keep workers alive between epochs (needs num_workers > 0)."""
    prefetch_factor: int | None = None
    """Batches loaded ahead per worker (needs num_workers > 0; PyTorch's default is 2)."""
    shuffle_seed: int = 0
    """Seed of the training-set shuffle (independent of the model seed)."""
    drop_last: bool = False
    """Drop the last incomplete training batch."""

    def __post_init__(self) -> None:
        need_positive("batch_size", self.batch_size)
        if isinstance(self.num_workers, str):
            if self.num_workers != "auto":
                raise ConfigError(
                    f"num_workers must be an integer >= 0 or auto, got {show(self.num_workers)}"
                )
        else:
            need_integer("num_workers", self.num_workers)
            if self.num_workers < 0:
                raise ConfigError(f"num_workers must be >= 0, got {self.num_workers}")
            limit = max_workers()
            if self.num_workers > limit:
                raise ConfigError(
                    f"num_workers {show(self.num_workers)} is far beyond this machine: at "
                    f"most {limit} (max(32, 4 x the {available_cpus()} CPUs available))"
                )
        need_seed("shuffle_seed", self.shuffle_seed)
        need_choice("loader", self.loader, LOADERS)
        if self.loader == "fast":
            # The fast path has no worker processes and no host-to-device copies to pin.
            # "auto" is allowed: with no workers to choose it means 0.
            if self.num_workers not in (0, "auto") or self.pin_memory or self.persistent_workers:
                raise ConfigError(
                    "loader fast keeps the data on the device: num_workers, pin_memory and "
                    "persistent_workers do not apply (leave them at 0/off)"
                )
        if self.num_workers == 0 and self.persistent_workers:
            raise ConfigError("persistent_workers needs num_workers > 0")
        if self.prefetch_factor is not None:
            if self.num_workers == 0:
                raise ConfigError("prefetch_factor needs num_workers > 0")
            need_positive("prefetch_factor", self.prefetch_factor, MAX_PREFETCH_FACTOR)


@dataclass
class TrainConfig:
    """Optimisation and loop length."""

    epochs: int = 30
    """Passes over the training set."""
    max_steps_per_epoch: int | None = None
    """Stop an epoch early after this many steps (quick experiments)."""
    optimizer: str = "sgd"
    """sgd (with momentum) | adam | adamw | muon (torch.optim.Muon on the hidden 2-D weight
    matrices, AdamW on embeddings, the head, biases and norms)."""
    lr: float = 0.05
    """Learning rate (muon: AdamW's, for what Muon does not train)."""
    muon_lr: float = 0.02
    """muon: Muon's learning rate for the hidden matrices (Keller Jordan's default)."""
    muon_ns_dtype: str = "auto"
    """muon: the dtype of its Newton-Schulz iterations: bf16 (torch.optim.Muon's, the fast
    path of a GPU) | fp32 | auto (fp32 on a CPU without native bf16 units, where bf16
    matmuls are emulated and 5x slower; bf16 elsewhere)."""
    muon_ns_steps: int = 5
    """muon: Newton-Schulz iterations per update (torch.optim.Muon's 5). Fewer make each
    step cheaper and the update less exactly orthogonal."""
    momentum: float = 0.9
    """SGD momentum."""
    weight_decay: float = 0.0
    """L2 penalty (decoupled for adamw), on parameters of two or more dimensions only
    (biases and normalisation weights are not decayed)."""
    betas: list[float] | None = None
    """Adam/AdamW (beta1, beta2); None: torch's (0.9, 0.999)."""
    optimizer_impl: str = "auto"
    """How torch.optim runs the update: auto (torch's default: the per-parameter for-loop
    on CPU, foreach on CUDA) | for-loop (foreach=False) | foreach (foreach=True: one
    multi-tensor kernel per operation) | fused (fused=True: one kernel for the whole
    update; it may round differently from the other two)."""
    schedule: str = "constant"
    """lr schedule: constant | cosine | linear | one-cycle (see trainscope.train.schedule)."""
    warmup_steps: int = 0
    """Linear warm-up over the first N optimizer steps (one-cycle: its rise)."""
    min_lr_ratio: float = 0.0
    """Where cosine and linear decay end, as a fraction of lr (nanoGPT: 0.1)."""
    grad_clip: float = 0.0
    """Clip the gradients' global norm to this before each step (0: no clipping)."""
    seed: int = 0
    """Seed for model initialisation and any randomness outside the shuffle."""
    eval_every: int = 1
    """Evaluate on the validation set every N epochs (and always after the last)."""
    eval_every_steps: int = 0
    """Also evaluate every N optimizer steps, inside epochs, on the same fixed validation
    windows (0: at epoch ends only). Recorded as ``eval`` lines; kept out of training time."""
    target: str | None = None
    """Stop at the first evaluation that meets it: ``val_loss<=1.88``,
    ``test_accuracy>=0.98`` (any figure of the val or test split's evaluation). The record's
    ``target`` section says when, in training time and in process time."""
    time_limit_s: float = 0.0
    """Stop once training (setup, compilation and evaluation excluded) has taken this many
    seconds (0: no limit). A target not met by then is recorded as not reached."""
    log_every: int = 10
    """Resolve timings and losses, write metrics lines, every N steps."""
    data_only: bool = False
    """Only iterate the training batches (and copy them to the device): no model, no
    evaluation. Measures the input pipeline alone."""
    save_weights: bool = True
    """Save the trained weights as RUN_DIR/model.safetensors."""
    checkpoint_every: int = 0
    """Write a checkpoint every N optimizer steps into RUN_DIR/checkpoints/step-N (0: not by
    steps)."""
    checkpoint_every_epoch: bool = False
    """Write a checkpoint at the end of every epoch (after its validation)."""
    keep_checkpoints: int = 2
    """Complete checkpoints kept; older ones are removed as newer ones are written."""

    def __post_init__(self) -> None:
        need_positive("epochs", self.epochs)
        if isinstance(self.checkpoint_every, bool) or not isinstance(self.checkpoint_every, int):
            raise ConfigError(
                f"checkpoint_every must be a whole number, got {self.checkpoint_every!r}"
            )
        need_number("checkpoint_every", self.checkpoint_every, low=0, high=10**12)
        need_positive("keep_checkpoints", self.keep_checkpoints)
        if self.max_steps_per_epoch is not None:
            need_positive("max_steps_per_epoch", self.max_steps_per_epoch)
        need_choice("optimizer", self.optimizer, OPTIMIZERS)
        need_choice("optimizer_impl", self.optimizer_impl, OPTIMIZER_IMPLS)
        need_lr("lr", self.lr)
        need_lr("muon_lr", self.muon_lr)
        need_choice("muon_ns_dtype", self.muon_ns_dtype, MUON_NS_DTYPES)
        need_integer("muon_ns_steps", self.muon_ns_steps)
        need_number("muon_ns_steps", self.muon_ns_steps, low=1, high=20)
        need_number("momentum", self.momentum, low=0.0)
        need_number("weight_decay", self.weight_decay, low=0.0)
        if self.betas is not None:
            if not isinstance(self.betas, (list, tuple)) or len(self.betas) != 2:
                raise ConfigError(f"betas must be two numbers, got {show(self.betas)}")
            for b in self.betas:
                need_number("betas", b, low=0.0, high=1.0)
                if b >= 1.0:
                    raise ConfigError(f"betas must be below 1, got {show(self.betas)}")
            self.betas = [float(b) for b in self.betas]
        if self.schedule not in SCHEDULES:
            raise ConfigError(
                f"unknown schedule {show(self.schedule)}: choose one of {', '.join(SCHEDULES)}"
            )
        need_integer("warmup_steps", self.warmup_steps)
        need_number("warmup_steps", self.warmup_steps, low=0, high=10**12)
        need_number("min_lr_ratio", self.min_lr_ratio, low=0.0, high=1.0)
        need_number("grad_clip", self.grad_clip, low=0.0)
        need_seed("seed", self.seed)
        need_positive("eval_every", self.eval_every)
        need_integer("eval_every_steps", self.eval_every_steps)
        need_number("eval_every_steps", self.eval_every_steps, low=0, high=10**12)
        if self.target is not None:
            parse_target(self.target)
        need_number("time_limit_s", self.time_limit_s, low=0.0, high=10.0**9)
        if self.data_only and (self.target is not None or self.eval_every_steps):
            raise ConfigError(
                "data_only trains no model: --target and --eval-every-steps do not apply"
            )
        need_positive("log_every", self.log_every)


@dataclass
class RuntimeConfig:
    """Where and how the run executes, and how it is measured."""

    device: str = "auto"
    """auto (CUDA when available, else CPU) | cpu | cuda | cuda:N."""
    precision: str = "fp32"
    """fp32 | tf32 | fp16 (autocast + GradScaler) | bf16 (autocast)."""
    timing: str = "auto"
    """auto: perf_counter on CPU, CUDA events on GPU; exact: synchronize at every stage."""
    system_interval_s: float = 1.0
    """Seconds between system-metric samples (CPU %, RSS, GPU)."""
    timing_warmup_steps: int = 5
    """First steps of the run reported apart from the steady state (allocator growth,
    lazy initialisation, autotuning): the steady-state step time excludes them."""
    progress: bool = True
    """Show progress bars on the console."""
    track: list[str] = field(default_factory=list)
    """Tracking sinks mirroring the run (wandb, tensorboard); none by default."""
    checkpointing: str = "none"
    """Activation checkpointing of the workload's blocks: none | full | every-K |
    selective (see trainscope.techniques.activation_checkpointing)."""
    compile: bool = False
    """torch.compile the model (in place); the compilation is timed as its own stage."""
    threads: int | str = "auto"
    """torch intra-op threads per process, or "auto": OMP_NUM_THREADS where it is set,
    else the cores this process may use shared out among the run's processes on the node.
    In a study: the core budget every configuration shares out (threads x processes)."""

    def __post_init__(self) -> None:
        if isinstance(self.threads, str):
            if self.threads != "auto":
                raise ConfigError(
                    f"threads must be an integer >= 1 or auto, got {show(self.threads)}"
                )
        else:
            need_positive("threads", self.threads, MAX_THREADS)
        if not DEVICES_RE.match(self.device):
            raise ConfigError(f"unknown device {self.device!r}: use auto, cpu, cuda or cuda:N")
        need_choice("precision", self.precision, PRECISIONS)
        need_choice("timing mode", self.timing, TIMING_MODES)
        self.track = list(self.track)
        for name in self.track:
            if name not in SINK_NAMES:
                raise ConfigError(
                    f"unknown tracking sink {name!r}: choose from {', '.join(SINK_NAMES)}"
                )
        checkpointing_policy(self.checkpointing)
        if not isinstance(self.compile, bool):
            raise ConfigError(f"compile must be true or false, got {show(self.compile)}")
        lo, hi = MIN_SYSTEM_INTERVAL_S, MAX_SYSTEM_INTERVAL_S
        need_number("system_interval_s", self.system_interval_s, low=lo, high=hi)
        if isinstance(self.timing_warmup_steps, bool) or not isinstance(
            self.timing_warmup_steps, int
        ):
            raise ConfigError(
                f"timing_warmup_steps must be a whole number, got {self.timing_warmup_steps!r}"
            )
        need_number("timing_warmup_steps", self.timing_warmup_steps, low=0, high=1_000_000)


@dataclass
class DistConfig:
    """Parallel strategy and how the processes are launched (through torchrun)."""

    strategy: str = "single"
    """single | dp (DataParallel, one process) | ddp | fsdp (FSDP2) | gather-scatter |
    allreduce (the last two: gradient sync written by hand)."""
    nproc: int = 1
    """Processes per node; more than 1 launches them through torchrun."""
    nnodes: int = 1
    """Machines taking part; each runs ``trainscope run`` with its own ``node_rank``."""
    node_rank: int = 0
    """This machine's index, 0..nnodes-1 (0 hosts the rendezvous with master_addr)."""
    master_addr: str = "127.0.0.1"
    """Address of node 0 (several nodes)."""
    master_port: int | None = None
    """Port on node 0 (several nodes: required unless rdzv_endpoint; one node: a free one)."""
    rdzv_endpoint: str | None = None
    """host:port of a c10d rendezvous, instead of master_addr/master_port."""
    backend: str = "auto"
    """Process-group backend: auto (nccl on CUDA, gloo on CPU) | nccl | gloo."""
    scale_lr: bool = False
    """Multiply the learning rate by the world size (the linear scaling rule)."""
    timeout_s: float = 300.0
    """Seconds a collective may wait before the run fails (a hang becomes an error)."""
    stall_timeout_s: float = 60.0
    """Seconds without progress on any rank after which a multi-process run stops, naming
    the rank(s) behind and the step each reached (instead of waiting for timeout_s)."""
    max_restarts: int = 0
    """Times torchrun restarts every rank after one fails; the restarted ranks resume from
    the run's last complete checkpoint (from the start without one)."""
    requeue: bool = False
    """On a preemption signal (SLURM's pre-timeout SIGUSR1, SIGTERM) checkpoint, record
    ``preempted`` and requeue the SLURM job (``scontrol requeue``); started again with the
    same --out (the requeued job, a restarted pod), the run resumes from that checkpoint.
    Under a scheduler the checkpoint and record come without it too."""
    bucket_mb: float | None = None
    """Gradient buckets of at most this many MiB. allreduce: flatten the gradients into
    such buckets and all-reduce each (None: one all_reduce per gradient tensor); ddp:
    DDP's ``bucket_cap_mb`` (None: DDP's default, 25 MiB after a first bucket of 1 MiB;
    given, every bucket has this cap)."""
    pp_stages: int | None = None
    """pipeline: stages, one per process (None: every process of the run)."""
    microbatches: int | None = None
    """pipeline: microbatches each batch is cut into (None: 4); they must divide it."""
    pp_schedule: str | None = None
    """pipeline: gpipe | 1f1b | interleaved-1f1b (None: 1f1b)."""
    dp_size: int | None = None
    """pipeline, tp: data-parallel replicas of the split model (None: 1); the processes
    are dp_size x pp_stages (or x tp_size), replica by replica."""
    tp_size: int | None = None
    """tp: processes each block's layers are split over (None: every process of the run)."""
    sequence_parallel: bool | None = None
    """tp: the norms, dropouts and residual stream run on each rank's share of the
    sequence (all-gather and reduce-scatter in place of the all-reduces)."""
    pp_split: str | None = None
    """pipeline: how blocks are shared out among stages: even, or measured (each block's
    forward + backward timed on one microbatch before training, and the stages cut so
    that the slowest is as fast as can be) (None: even)."""

    def __post_init__(self) -> None:
        need_choice("strategy", self.strategy, registry.strategy_names())
        need_choice("backend", self.backend, BACKENDS)
        need_positive("nproc", self.nproc)
        if self.nproc > max_workers():
            raise ConfigError(
                f"nproc {show(self.nproc)} is far beyond this machine: at most {max_workers()} "
                f"processes per node (max(32, 4 x the {available_cpus()} CPUs available))"
            )
        need_positive("nnodes", self.nnodes)
        need_integer("node_rank", self.node_rank)
        if not 0 <= self.node_rank < self.nnodes:
            raise ConfigError(
                f"node_rank must be in 0..{self.nnodes - 1}, got {show(self.node_rank)}"
            )
        if self.master_port is not None:
            need_integer("master_port", self.master_port)
            if not 0 < self.master_port < 65536:
                raise ConfigError(f"master_port must be in 1..65535, got {show(self.master_port)}")
        if self.world_size > 1 and not registry.STRATEGIES[self.strategy].multiprocess:
            raise ConfigError(
                f"strategy {self.strategy} runs in one process; several processes "
                f"(nproc x nnodes = {self.world_size}) need one of "
                f"{', '.join(registry.multiprocess_names())}"
            )
        if self.nnodes > 1 and self.master_port is None and self.rdzv_endpoint is None:
            raise ConfigError(
                "several nodes need a meeting point: give master_port (with master_addr) "
                "or rdzv_endpoint"
            )
        need_number("timeout_s", self.timeout_s, low=MIN_DIST_TIMEOUT_S, high=MAX_DIST_TIMEOUT_S)
        self._check_strategy_options()
        need_integer("max_restarts", self.max_restarts)
        need_number("max_restarts", self.max_restarts, low=0, high=1000)
        need_number(
            "stall_timeout_s",
            self.stall_timeout_s,
            low=0.0,
            low_open=True,
            high=MAX_DIST_TIMEOUT_S,
        )

    def _check_strategy_options(self) -> None:
        """Each option some strategy takes (:data:`trainscope.registry.OPTIONS`), checked as
        its kind says; one the chosen strategy does not take is refused."""
        mine = registry.STRATEGIES[self.strategy].options
        replicas = 1
        for key in registry.strategy_options():
            short = key.removeprefix("dist.")
            value = getattr(self, short, None)
            if value is None:
                continue
            if key not in mine:
                owners = registry.option_owners(key)
                raise ConfigError(
                    f"{short} applies to strategy {' or '.join(owners)}, not {self.strategy}"
                )
            option = registry.OPTIONS[key]
            _check_option_value(option, short, value)
            if option.kind == "replicas":
                replicas = value
                if self.world_size % value:
                    raise ConfigError(
                        f"{option.flag} {value} does not divide the {self.world_size} "
                        "processes (nproc x nnodes)"
                    )
        for key in mine:
            option, value = registry.OPTIONS[key], getattr(self, key.removeprefix("dist."))
            if option.kind == "split" and value is not None and value * replicas != self.world_size:
                raise ConfigError(
                    f"{option.flag} {value} x {replicas} data-parallel replica(s) = "
                    f"{value * replicas} processes; this run has nproc x nnodes = "
                    f"{self.world_size}"
                )

    @property
    def world_size(self) -> int:
        """Processes in all: nproc x nnodes."""
        return self.nproc * self.nnodes


def _check_option_value(option: registry.StrategyOption, name: str, value: Any) -> None:
    """One strategy option's value, as its kind says (ConfigError otherwise)."""
    if option.kind in ("count", "split", "replicas"):
        need_positive(name, value, MAX_SPLIT)
    elif option.kind == "mib":
        need_number(name, value, low=0.0, low_open=True, high=MAX_BUCKET_MB)
    elif option.kind == "switch" and not isinstance(value, bool):
        raise ConfigError(f"{name} must be true or false, got {show(value)}")
    elif option.kind == "choice":
        need_choice(name, value, option.choices)


@dataclass
class RunConfig:
    """One run: workload, data pipeline, training, runtime, parallelism, and where the
    record goes."""

    workload: WorkloadConfig = field(default_factory=WorkloadConfig)
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    runtime: RuntimeConfig = field(default_factory=RuntimeConfig)
    dist: DistConfig = field(default_factory=DistConfig)
    out: str | None = None
    """Run directory; None makes runs/<workload>-<timestamp>."""
    overwrite: bool = False
    """Replace the run files in an existing non-empty --out."""
    resume: bool = False
    """Continue the run in ``out`` from its last complete checkpoint (``run --resume``)."""

    def __post_init__(self) -> None:
        if self.resume and self.overwrite:
            raise ConfigError("--resume continues a run in place; it cannot --overwrite it")
        muon_ok = registry.capabilities(self.dist.strategy).muon
        if self.train.optimizer == "muon" and not muon_ok:
            raise ConfigError(
                f"--optimizer muon orthogonalises whole matrices of a whole model: not with "
                f"--strategy {self.dist.strategy} (its parameters are shards or stages)"
            )

    def to_dict(self) -> dict[str, Any]:
        """Plain-data form (every field; :meth:`saved_dict` is what config.yaml holds)."""
        d = dataclasses.asdict(self)
        d["workload"]["synthetic_shape"] = list(self.workload.synthetic_shape)
        return d

    def saved_dict(self) -> dict[str, Any]:
        """What a run's config.yaml holds: :meth:`to_dict` without where it was written
        (rerunning it makes a fresh run directory) and without the settings of the
        synthetic workload in another built-in's (a text-cls run has no ``num_classes:
        10``); read back, the left-out keys take their defaults, so nothing changes."""
        d = {**self.to_dict(), "out": None, "overwrite": False, "resume": False}
        if self.workload.name in registry.WORKLOADS and self.workload.name != "synthetic":
            for key in SYNTHETIC_ONLY:
                d["workload"].pop(key, None)
        return d


SECTIONS: dict[str, type] = {
    "workload": WorkloadConfig,
    "data": DataConfig,
    "train": TrainConfig,
    "runtime": RuntimeConfig,
    "dist": DistConfig,
}


def from_dict(data: dict[str, Any] | None) -> RunConfig:
    """Build and validate a RunConfig from nested plain data (as in config.yaml); the
    workload's default recipe (:mod:`trainscope.recipes`) fills what the data leave out."""
    data = apply_recipe(dict(data or {}), WorkloadConfig.name)
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        if key in SECTIONS:
            if value is None:
                continue
            if not isinstance(value, dict):
                raise ConfigError(f"config section {key!r} must be a mapping")
            check_types(SECTIONS[key], value, key)
            kwargs[key] = SECTIONS[key](**value)
        elif key in ("out", "overwrite", "resume"):
            check_types(RunConfig, {key: value}, "config")
            kwargs[key] = value
        else:
            raise ConfigError(f"unknown config key {key!r}")
    try:
        return RunConfig(**kwargs)
    except TypeError as e:  # wrong types slipping through as constructor errors
        raise ConfigError(str(e)) from None


def merge(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """Apply dotted overrides ("data.batch_size": 256) to nested plain data."""
    out = copy.deepcopy(base)  # never write into the caller's nested dicts
    for dotted, value in overrides.items():
        parts = dotted.split(".")
        if len(parts) > MAX_YAML_DEPTH:  # as deep as a config file may nest, no deeper
            raise ConfigError(f"cannot override {show(dotted)}: more than {MAX_YAML_DEPTH} levels")
        node = out
        for p in parts[:-1]:
            node = node.setdefault(p, {})
            if not isinstance(node, dict):
                raise ConfigError(f"cannot override {dotted}: {p} is not a section")
        node[parts[-1]] = value
    return out


def resolve(config_path: str | Path | None, overrides: dict[str, Any]) -> RunConfig:
    """Defaults <- YAML file <- CLI overrides, validated as a whole."""
    base = load_yaml(config_path) if config_path else {}
    return from_dict(merge(base, overrides))


def deletion_only_from_command_line(
    cfg: Any, overrides: dict[str, Any], config: str | None
) -> None:
    """Only the command line may make a run replace files: a config file (perhaps one
    someone shared) can name where to write, never switch on deleting there."""
    if cfg.resume and not overrides.get("resume"):
        raise ConfigError(
            f"the config file {config} sets resume: true; only --resume RUN_DIR on the "
            "command line continues a run directory"
        )
    if cfg.overwrite and not overrides.get("overwrite"):
        raise ConfigError(
            f"the config file {config} sets overwrite: true; only the --overwrite flag on "
            "the command line may replace what is in a run directory"
        )
    if cfg.overwrite and cfg.out is not None and "out" not in overrides:
        raise ConfigError(
            "--overwrite needs --out on the command line too: the directory to replace is "
            f"not taken from a config file (it names {cfg.out!r})"
        )
