"""The built-in entries of every table, registered at import in the order every listing
shows them."""

from __future__ import annotations

from typing import Any

from trainscope.registry.extensions import WorkloadEntry, WorkloadOption, register_workload
from trainscope.registry.strategies import (
    Capabilities,
    StrategyEntry,
    StrategyOption,
    Variant,
    register_option,
    register_strategy,
)
from trainscope.registry.studies import RECORD_ONLY, Flag, StudyEntry, register_study

# The options some strategies take, declared once (their owners' entries name them).
for _option in (
    StrategyOption("dist.bucket_mb", "--bucket-mb", "mib",
                   "gradient buckets of at most MB MiB: ddp's bucket_cap_mb (default 25, the "
                   "first 1); allreduce flattens into them, one all_reduce each (default: one "
                   "per tensor)", metavar="MB"),
    StrategyOption("dist.dp_size", "--dp-size", "replicas",
                   "data-parallel replicas of the split model; the processes are D x stages "
                   "(or D x tp-size)", metavar="D", default="1"),
    StrategyOption("dist.tp_size", "--tp-size", "split",
                   "processes each block is split over", metavar="T",
                   default="all of them"),
    StrategyOption("dist.sequence_parallel", "--sequence-parallel", "switch",
                   "norms and residual stream on each process's share of the sequence "
                   "(all-gather and reduce-scatter in place of all-reduces)"),
    StrategyOption("dist.pp_stages", "--pp-stages", "split", "stages, one per process",
                   metavar="S", default="all of them"),
    StrategyOption("dist.microbatches", "--microbatches", "count",
                   "microbatches each batch is cut into, dividing it", metavar="M",
                   default="4"),
    StrategyOption("dist.pp_schedule", "--pp-schedule", "choice",
                   "the schedule: torch.distributed.pipelining's ScheduleGPipe, "
                   "Schedule1F1B or ScheduleInterleaved1F1B (two stages per process)",
                   metavar="NAME", choices=("gpipe", "1f1b", "interleaved-1f1b"),
                   default="1f1b"),
    StrategyOption("dist.pp_split", "--pp-split", "choice",
                   "blocks per stage: even, or measured (each block's forward + backward "
                   "timed on one microbatch, stages cut so the slowest is as fast as can be)",
                   metavar="HOW", choices=("even", "measured")),
):  # fmt: skip
    register_option(_option)

_S = "trainscope.strategies"
_P = "trainscope.comm.predict"
for _entry in (
    StrategyEntry("single", f"{_S}.single:Single", False, "one process, no wrapper",
                  variants=(Variant("single", comm_place="none"),)),
    StrategyEntry("dp", f"{_S}.dp:DataParallelStrategy", False,
                  "torch.nn.DataParallel: one process drives every GPU",
                  variants=(Variant("dp", comm_place="in fwd/bwd"),)),
    StrategyEntry(
        "ddp", f"{_S}.ddp:DDPStrategy", True,
        "DistributedDataParallel: bucketed all-reduce overlapped with backward",
        options=("dist.bucket_mb",),  # DDP's bucket_cap_mb
        capabilities=Capabilities(sync="buckets", comm_in=("backward",)),
        variants=(
            Variant("ddp-1proc", one_process=True, comm_place="in backward"),
            Variant("ddp", predict=f"{_P}:predict_ddp", predict_ops=("all_reduce",),
                    measured_as="backward-delta", comm_place="in backward",
                    overlap_modelled=True),
        ),
    ),
    StrategyEntry(
        "fsdp", f"{_S}.fsdp:FSDPStrategy", True,
        "FullyShardedDataParallel (FSDP2): parameters, gradients and states sharded",
        capabilities=Capabilities(
            shards=frozenset({"parameters", "gradients", "optimizer_states"}),
            sync="sharded", comm_in=("forward", "backward"), muon=False,
        ),
        variants=(Variant("fsdp", predict=f"{_P}:predict_fsdp",
                          predict_ops=("all_gather", "reduce_scatter"),
                          measured_as="fwd-bwd-delta", comm_place="in fwd/bwd"),),
    ),
    StrategyEntry(
        "gather-scatter", f"{_S}.gather_scatter:GatherScatterStrategy", True,
        "hand-written sync through rank 0: gather every gradient, average, scatter back",
        capabilities=Capabilities(sync="per_tensor", comm_in=("comm",)),
        variants=(Variant("gather-scatter", predict=f"{_P}:predict_gather_scatter",
                          predict_ops=("broadcast",), measured_as="comm"),),
    ),
    StrategyEntry(
        "allreduce", f"{_S}.allreduce:AllReduceStrategy", True,
        "hand-written all_reduce per gradient tensor, or per --bucket-mb bucket",
        options=("dist.bucket_mb",),
        capabilities=Capabilities(sync="per_tensor", comm_in=("comm",)),
        variants=(
            Variant("allreduce", predict=f"{_P}:predict_allreduce",
                    predict_ops=("all_reduce",), measured_as="comm"),
            Variant("allreduce-bucketed", bucketed=True,
                    predict=f"{_P}:predict_allreduce_bucketed",
                    predict_ops=("all_reduce",), measured_as="comm"),
        ),
    ),
    StrategyEntry(
        "pipeline", f"{_S}.pipeline:PipelineStrategy", True,
        "pipeline stages over the model's blocks, one per process; microbatches through a "
        "gpipe, 1f1b or interleaved-1f1b schedule",
        options=("dist.pp_stages", "dist.microbatches", "dist.pp_schedule", "dist.pp_split",
                 "dist.dp_size"),
        precheck=f"{_S}.layout:check_pipeline", splits_batch=False, in_strategies_study=False,
        capabilities=Capabilities(sync="model", muon=False),
    ),
    StrategyEntry(
        "tp", f"{_S}.tensor_parallel:TensorParallelStrategy", True,
        "tensor parallelism: every block's attention and MLP split over the processes "
        "(column- then row-split layers, all-reduces inside each block)",
        options=("dist.tp_size", "dist.dp_size", "dist.sequence_parallel"),
        precheck=f"{_S}.layout:check_tp", splits_batch=False, in_strategies_study=False,
        capabilities=Capabilities(shards=frozenset({"parameters", "gradients",
                                                    "optimizer_states"}),
                                  sync="model", muon=False),  # fmt: skip
    ),
):  # fmt: skip
    register_strategy(_entry)


def _list(text: str) -> dict[str, Any]:
    return {"metavar": "LIST", "help": text}


for _study in (
    StudyEntry(
        "loader",
        "num_workers sweep (data-only epochs), pin/persistent variants, fast path, "
        "and data wait vs compute per iteration",
        "trainscope.studies.loader:plan", "trainscope.reports.study_loader:loader_sections",
        options="trainscope.studies.loader:options_from_args",
        script="trainscope.studies.script_studies:loader_runs",
        flags=(
            Flag(("--workers",), {"default": "0-10", **_list("num_workers values")}),
            Flag(("--sweep-epochs",), {"type": int, "default": 3, "metavar": "N",
                                       "help": "epochs per sweep run"}),
            Flag(("--iter-workers",), {"default": "0,2,4", **_list(
                "num_workers values of the per-iteration training runs")}),
            Flag(("--iter-epochs",), {"type": int, "default": 2, "metavar": "N"}),
            Flag(("--iter-steps",), {"type": int, "default": 50, "metavar": "N",
                                     "help": "steps per epoch"}),
        ),
        sets={
            "train.epochs": "--sweep-epochs and --iter-epochs",
            "train.max_steps_per_epoch": "--iter-steps",
            "train.data_only": "nothing (the sweep is data-only, the iteration runs train)",
            "data.num_workers": "--workers and --iter-workers",
            "data.loader": "nothing (both loaders are measured)",
            "data.pin_memory": "nothing (pin_memory is a variant of the sweep)",
            "data.persistent_workers": "nothing (persistent_workers is a variant of the sweep)",
            "data.prefetch_factor": "nothing (the sweep uses the default)",
        },
    ),
    StudyEntry(
        "profile", "stage breakdown of a training run, with the biggest stage and what to do",
        "trainscope.studies.profile:plan", "trainscope.reports.study_profile:profile_sections",
        fresh_process=True, script="trainscope.studies.script_studies:profile_runs",
    ),
    StudyEntry(
        "precision", "fp32 vs tf32 vs fp16+GradScaler vs bf16: loss, accuracy, time, memory",
        "trainscope.studies.precision:plan",
        "trainscope.reports.study_precision:precision_sections",
        options="trainscope.studies.precision:options_from_args",
        script="trainscope.studies.script_studies:precision_runs",
        flags=(Flag(("--precisions",), {"default": "fp32,tf32,fp16,bf16",
                                         **_list("precisions to compare")}),),
        fresh_process=True,
        sets={"runtime.precision": "--precisions"},
    ),
    StudyEntry(
        "strategies",
        "every registered strategy's configurations (single, dp, ddp, fsdp, gather-scatter, "
        "allreduce per tensor and bucketed) with --nproc N processes: accuracy, time and "
        "communication per iteration (beside the alpha-beta model's prediction with "
        "--cost-model), memory per rank",
        "trainscope.studies.strategies:plan",
        "trainscope.reports.study_strategies:strategies_sections",
        options="trainscope.studies.strategies:options_from_args",
        flags=(
            Flag(("--strategies",), _list(
                "configurations to compare (default all: the study's configurations of every "
                "registered strategy)")),
            Flag(("--cost-model",), {
                "metavar": "DIR",
                "help": "a `trainscope collectives` study: its fitted latency and bandwidth "
                "predict each strategy's communication, shown beside the measured"}),
        ),
        fresh_process=True,
        sets={"dist.strategy": "--strategies"},
    ),
    StudyEntry(
        "checkpointing",
        "activation checkpointing none / every-K / selective / full: saved activations vs "
        "step time (default workload: a 4-block gpt-char)",
        "trainscope.studies.checkpointing:plan",
        "trainscope.reports.study_checkpointing:checkpointing_sections",
        options="trainscope.studies.checkpointing:options_from_args",
        script="trainscope.studies.script_studies:checkpointing_runs",
        flags=(Flag(("--policies",), {"default": "none,every-2,selective,full", **_list(
            "policies to compare")}),),
        sets={"runtime.checkpointing": "--policies"},
    ),
    StudyEntry(
        "finetune",
        "full fine-tuning vs LoRA adapters of a pretrained text-cls model (--pretrained): "
        "trainable parameters, time per stage, gradients, optimizer states and activations, "
        "dev accuracy after the same steps and at the same training time",
        "trainscope.studies.finetune:plan",
        "trainscope.reports.study_finetune:finetune_sections",
        options="trainscope.studies.finetune:options_from_args",
        flags=(Flag(("--lora-ranks",), {"default": "0,8", **_list(
            "LoRA ranks to compare, 0 for full fine-tuning")}),),
        fresh_process=True,
        sets={"workload.options.lora_r": "--lora-ranks"},
    ),
    StudyEntry(
        "parallelism",
        "replicate or split the model at one global batch: single, ddp, fsdp, pipeline "
        "(each schedule at each microbatch count), tp, and dp x pipeline / dp x tp on twice "
        "the processes: step time, the bubble against theory, communication, memory per rank",
        "trainscope.studies.parallelism:plan",
        "trainscope.reports.study_parallelism:parallelism_sections",
        options="trainscope.studies.parallelism:options_from_args",
        flags=(
            Flag(("--layouts",), _list("layouts to compare (default all; see the report)")),
            Flag(("--microbatch-counts",), {"default": "2,4,8", **_list(
                "the pipeline's microbatch counts")}),
            Flag(("--no-2d",), {"action": "store_true",
                                "help": "leave out dp x pipeline and dp x tp"}),
            Flag(("--cost-model",), {
                "metavar": "DIR",
                "help": "a `trainscope collectives` study: its all_reduce fit predicts "
                "tensor parallelism's communication, shown beside the measured"}),
        ),
        fresh_process=True,
        sets={
            "dist.strategy": "--layouts",
            "dist.pp_schedule": "--layouts",
            "dist.dp_size": "--layouts",
            "dist.sequence_parallel": "--layouts",
            "dist.microbatches": "--microbatch-counts",
            "dist.pp_stages": "--nproc",
            "dist.tp_size": "--nproc",
        },
    ),
    StudyEntry(
        "scaling",
        "strong and weak scaling of a data-parallel strategy on --nproc 1,2,4 processes at "
        "an equal core budget: speed-up, efficiency, the wall time more devices do not "
        "shorten, and the alpha-beta projection to 8-1024 devices on named interconnects",
        "trainscope.studies.scaling:plan",
        "trainscope.reports.study_scaling:scaling_sections",
        options="trainscope.studies.scaling:options_from_args",
        flags=(
            Flag(("--nproc",), {"default": "1,2,4", **_list("process counts")}),
            Flag(("--scaling",), {"default": "strong,weak",
                                  **_list("strong and/or weak")}),
            Flag(("--interconnects",), {"default": "nvlink4,ib-100g", **_list(
                "interconnects to project to 8-1024 devices on (also pcie4-x16, ib-400g)")}),
        ),
        fresh_process=True,
        sets={"dist.nproc": "--nproc"},
        replaces=("--nproc",),
    ),
):  # fmt: skip
    register_study(_study)

register_study(
    StudyEntry(
        "time-to-target",
        "which recipe meets --target (e.g. val_loss<=1.88) soonest: a search (--recipes "
        "FILE, or optimizer, lr, batch, schedule length, warm-up and shape one at a time "
        "within --search-budget), then the finalists on new seeds: time to target "
        "(training and process time) with median, spread and n, and the winning command",
        "trainscope.studies.time_to_target:plan",
        "trainscope.reports.study_time_to_target:time_to_target_sections",
        options="trainscope.studies.time_to_target:options_from_args",
        flags=(
            Flag(("--recipes",), {"metavar": "FILE", "help": (
                "a YAML list of candidate recipes, each {name: NAME, flags: '--lr 0.002 ...'} "
                "or {name: NAME, set: {KEY: VALUE}} (default: the built-in search)")}),
            Flag(("--finalists",), {"type": int, "default": 2, "metavar": "K", "help": (
                "the K best candidates of the search repeated on --repeats new seeds, "
                "besides the starting recipe")}),
            Flag(("--search-budget",), {"type": float, "default": 1800.0, "metavar": "S",
                                        "help": "seconds the built-in search may take (each "
                                        "candidate may take the whole --time-limit)"}),
        ),
        fresh_process=True,
        adaptive="trainscope.studies.time_to_target:more",
    )
)  # fmt: skip

RECORD_ONLY["collectives"] = "trainscope.reports.study_collectives:collectives_sections"
RECORD_ONLY["doctor"] = "trainscope.reports.study_doctor:doctor_sections"


_W = "trainscope.workloads"
_DROPOUT = WorkloadOption("dropout", "--dropout", "float", "P", "every dropout of the model")
_GPT_FLAGS = (
    WorkloadOption("preset", "--preset", "text", "NAME",
                   "tiny | cpu (4 x 128, block 64) | shakespeare (6 layers x 384, block 256)"),
    WorkloadOption("n_layer", "--n-layer", "int", "N", "blocks"),
    WorkloadOption("n_head", "--n-head", "int", "N", "attention heads"),
    WorkloadOption("n_embd", "--n-embd", "int", "N", "embedding width"),
    WorkloadOption("block_size", "--block-size", "int", "T", "context length"),
    _DROPOUT,
)  # fmt: skip
_TEXT_CLS_FLAGS = (
    WorkloadOption("model", "--model", "text", "NAME", "bert | roberta"),
    WorkloadOption("size", "--model-size", "text", "SIZE",
                   "tiny | mini | small | base (random weights)"),
    WorkloadOption("pretrained", "--pretrained", "text", "NAME",
                   "a hub model (e.g. bert-base-cased; downloaded once, then cached) or a "
                   "local folder in Hugging Face layout (offline)"),
    WorkloadOption("task", "--task", "text", "NAME", "SST-2 | RTE"),
    WorkloadOption("max_length", "--max-length", "int", "N", "truncate to N tokens"),
    _DROPOUT,
    WorkloadOption("lora_r", "--lora-r", "int", "R", "LoRA rank (0: full fine-tuning)"),
    WorkloadOption("lora_alpha", "--lora-alpha", "float", "A", "LoRA scale"),
    WorkloadOption("lora_targets", "--lora-targets", "names", "LIST",
                   "modules LoRA adapts (default query,value)"),
)  # fmt: skip
_E = "trainscope.estimate.workload"
for _workload in (
    WorkloadEntry(
        "digits",
        f"{_W}.builtin:digits",
        recipe="trainscope.recipes:digits_recipe",
        arch=f"{_E}:lenet_arch",
    ),
    WorkloadEntry(
        "mnist",
        f"{_W}.builtin:mnist",
        recipe="trainscope.recipes:mnist_recipe",
        data_check="trainscope.data.mnist_files:find_mnist_files",
    ),
    WorkloadEntry(
        "synthetic", f"{_W}.builtin:synthetic", recipe="trainscope.recipes:synthetic_recipe"
    ),
    WorkloadEntry(
        "gpt-char",
        f"{_W}.gpt:gpt_char",
        options=f"{_W}.gpt:check_options",
        layout=f"{_W}.gpt:layout",
        recipe="trainscope.recipes:gpt_char_recipe",
        arch=f"{_E}:gpt_arch",
        flags=_GPT_FLAGS,
    ),
    WorkloadEntry(
        "text-cls",
        f"{_W}.text_cls:text_cls",
        options=f"{_W}.text_cls:parse_options",
        layout=f"{_W}.text_cls:layout",
        recipe="trainscope.recipes:text_cls_recipe",
        arch=f"{_E}:bert_arch",
        flags=_TEXT_CLS_FLAGS,
    ),
):
    register_workload(_workload)
