"""The lab's chapters: each a classic question of efficient training, and the study that
answers it by measuring on this machine (torch-free: the plan and the document need no
torch; the studies run it).

A chapter names its study kind and the study's flags in two budgets: ``quick`` (small
workloads, few repeats: the whole quick lab in minutes on 2 CPU cores) and ``full``.
A chapter made of several commands names a maker (:mod:`trainscope.lab.makers`) instead.
Chapters whose measurement is not built yet are listed with neither: the document says
so, never a figure it did not measure.
"""

from __future__ import annotations

from trainscope import registry
from trainscope.errors import ConfigError
from trainscope.registry import Chapter
from trainscope.util.spread import MIN_N_TO_CLAIM

_SHAKESPEARE = ("--data-dir", "{data}/tinyshakespeare")
_MINILM = ("--data-dir", "{data}/sst2", "--pretrained", "{data}/minilm-l6", "--max-length",
           "64")  # fmt: skip

# A comparison claims a difference only from 3 repeats of each side (util.spread): fewer
# would leave every quick chapter saying "too few repeats to conclude".
_QUICK_N = str(MIN_N_TO_CLAIM)

CHAPTERS: tuple[Chapter, ...] = (
    Chapter(1, "distribute", "Why distribute, and what it costs",
            "What does a second process buy, what does it cost, how far does it go, and what "
            "does one slow rank cost all the others?", None, maker="distribute"),
    Chapter(2, "precision", "How mixed precision saves memory and time",
            "What do fp32, tf32, fp16 and bf16 cost per step and in memory, and do they "
            "train to the same loss?", "precision",
            quick=("--repeats", _QUICK_N, "--set", "train.epochs=3"),
            full=("--repeats", "3")),
    Chapter(3, "checkpointing", "Activation checkpointing",
            "How much activation memory does recomputation save, and what does it cost in "
            "time?", "checkpointing",
            quick=("--repeats", _QUICK_N, "--set", "train.max_steps_per_epoch=12", *_SHAKESPEARE),
            full=("--repeats", "3", *_SHAKESPEARE), data=("tinyshakespeare",)),
    Chapter(4, "dp-ddp", "DataParallel vs DistributedDataParallel",
            "What changes in the code from one process to DataParallel and to "
            "DistributedDataParallel, and what does each cost per step?", None, maker="dp-ddp"),
    Chapter(5, "workers", "How many DataLoader workers?",
            "What does num_workers=0 mean, and where do more workers stop helping?",
            "loader",
            quick=("--workers", "0,1,2", "--sweep-epochs", "1", "--iter-workers", "0,2",
                   "--repeats", _QUICK_N),
            full=("--repeats", "3")),
    Chapter(6, "time", "Where a training run's time goes",
            "Which stage of a step takes the time, and what to do about it? (MNIST with "
            "augmentation, one compute thread: a common first setting)", None,
            data=("mnist",), maker="time"),
    Chapter(7, "amp", "AMP vs fp32, end to end",
            "Same model, data and steps in fp32 and under autocast: loss, final quality, "
            "memory and time", "precision",
            quick=("--precisions", "fp32,fp16,bf16", "--workload", "gpt-char", *_SHAKESPEARE,
                   "--preset", "tiny", "--epochs", "2", "--max-steps-per-epoch", "40",
                   "--repeats", _QUICK_N),
            full=("--precisions", "fp32,fp16,bf16", "--workload", "gpt-char", *_SHAKESPEARE,
                  "--preset", "tiny", "--epochs", "3", "--max-steps-per-epoch", "200",
                  "--repeats", "3"),
            data=("tinyshakespeare",)),
    Chapter(8, "lora", "LoRA vs full fine-tuning",
            "What does training only low-rank adapters of a pretrained MiniLM-L6 on SST-2 "
            "save, and what does it cost?", "finetune",
            quick=(*_MINILM, "--epochs", "2", "--max-steps-per-epoch", "8", "--warmup-steps",
                   "4", "--repeats", _QUICK_N, "--no-warmup"),
            full=(*_MINILM, "--epochs", "3", "--max-steps-per-epoch", "30", "--warmup-steps",
                  "12", "--repeats", "3"),
            data=("sst2", "minilm-l6")),
    Chapter(9, "sync", "Synchronising gradients by hand",
            "Gather-scatter, all-reduce, buckets, DDP: which is fastest, and why?",
            "strategies",
            quick=("--strategies", "single,ddp,gather-scatter,allreduce,allreduce-bucketed",
                   "--repeats", _QUICK_N),
            full=("--repeats", "3"), fit=True),
    Chapter(10, "collectives", "The collectives",
            "What does each collective compute, and how fast is it here?", "collectives",
            quick=("--nproc", "2", "--sizes", "4K:256K", "--repeats", "3"),
            full=("--nproc", "2", "--sizes", "4K:16M"), command=("collectives",)),
    Chapter(11, "gpt2-memory", "Why a 1.5B GPT-2 needs about 32 GB to train",
            "Where does training memory go, and what do ZeRO and checkpointing bring?", None,
            maker="gpt2-memory"),  # its estimates need no data; tinyshakespeare/ adds one measured
    Chapter(12, "int8", "INT8 post-training quantization",
            "What do size, accuracy and evaluation time become in int8?", None,
            data=("mnist",), maker="int8"),
)  # fmt: skip
"""Every chapter, in order."""


def all_chapters() -> tuple[Chapter, ...]:
    """Every chapter in number order: the built-in ones and those registered
    (:func:`trainscope.registry.register_chapter`); one that takes a built-in's number or
    name is refused."""
    taken = {c.number for c in CHAPTERS} | {c.slug for c in CHAPTERS}
    extra = list(registry.CHAPTERS.values())
    for c in extra:
        if c.number in taken or c.slug in taken:
            raise ConfigError(f"lab chapter {c.number} {c.slug!r} takes a built-in "
                              "chapter's number or name")  # fmt: skip
    return tuple(sorted((*CHAPTERS, *extra), key=lambda c: c.number))


def chapter(number: int) -> Chapter:
    """The chapter numbered ``number``."""
    chapters = all_chapters()
    for c in chapters:
        if c.number == number:
            return c
    listed = ", ".join(str(c.number) for c in chapters)
    raise ConfigError(f"the lab has no chapter {number}: chapters are {listed}")


def parse_only(text: str | None) -> list[Chapter]:
    """``--only 2,5`` -> those chapters, in order (None: every chapter)."""
    if text is None:
        return list(all_chapters())
    numbers: list[int] = []
    for part in str(text).split(","):
        part = part.strip()
        if not part:
            continue
        if not (part.isascii() and part.isdigit()):
            raise ConfigError(f"--only: chapter numbers separated by commas, got {text!r}")
        numbers.append(int(part))
    if not numbers:
        raise ConfigError("--only: name at least one chapter")
    return [chapter(n) for n in sorted(set(numbers))]


__all__ = ["CHAPTERS", "Chapter", "all_chapters", "chapter", "parse_only"]
