"""Settings changed from outside an unchanged script: ``trainscope profile --inject KEY=VALUE``.

The registry of keys (torch-free: the command line checks ``--inject`` before anything
runs). Each entry says what it changes, how its value is read, whether it changes the
numbers the script computes, and which part of the script it needs (a DataLoader, or
nothing), and which ``trainscope run`` flag it mirrors (so the doctor can state a fix to
a script as an ``--inject`` line). :mod:`trainscope.script.inject` applies them through
public APIs for the time of the run; the record keeps them in ``source.injected``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from trainscope.errors import ConfigError

TRUE_WORDS = ("true", "1", "yes", "on")
FALSE_WORDS = ("false", "0", "no", "off")


def _flag(key: str, text: str) -> bool:
    word = text.strip().lower()
    if word in TRUE_WORDS or word in FALSE_WORDS:
        return word in TRUE_WORDS
    raise ConfigError(f"--inject {key}={text}: give true or false")


def _count(low: int, high: int) -> Callable[[str, str], int]:
    def read(key: str, text: str) -> int:
        try:
            value = int(text.strip())
        except ValueError:
            raise ConfigError(f"--inject {key}={text}: give a whole number") from None
        if not low <= value <= high:
            raise ConfigError(f"--inject {key}={value}: give a number in {low}..{high}")
        return value

    return read


def _choice(*words: str) -> Callable[[str, str], str]:
    def read(key: str, text: str) -> str:
        word = text.strip().lower()
        if word not in words:
            raise ConfigError(f"--inject {key}={text}: give one of {' | '.join(words)}")
        return word

    return read


def _precision(key: str, text: str) -> str:
    word = text.strip().lower()
    if word == "fp16":
        # fp16 needs a GradScaler around the script's backward, its gradient clipping and
        # its step (skipped on inf); rewiring those from outside is not done, so refused.
        raise ConfigError(
            f"--inject {key}=fp16: refused, fp16 needs a GradScaler around the script's "
            "backward, clipping and step, which trainscope does not rewire from outside; "
            "use precision=bf16, or add torch.amp.GradScaler to the script"
        )
    return _choice("bf16")(key, text)


def _compile(key: str, text: str) -> str | bool:
    """true (inductor), false, or one of torch's backends named (checked when applied)."""
    word = text.strip().lower()
    if word in TRUE_WORDS or word in FALSE_WORDS:
        return word in TRUE_WORDS
    if not re.fullmatch(r"[a-z_][a-z0-9_]{0,40}", word):
        raise ConfigError(f"--inject {key}={text}: give true, false or a torch.compile backend")
    return word


def _checkpointing(key: str, text: str) -> str:
    from trainscope.config import checkpointing_policy

    try:
        checkpointing_policy(text.strip())
    except ConfigError as e:
        raise ConfigError(f"--inject {key}={text}: {e}") from None
    return text.strip()


@dataclass(frozen=True)
class Injection:
    """One key of ``--inject``."""

    key: str
    read: Callable[[str, str], Any]
    """(key, text) -> the value, or a ConfigError in one line."""
    help: str
    needs: str = "nothing"
    """What of the script it applies to: ``dataloader`` (every DataLoader it builds),
    ``optimizer`` (every torch optimizer it builds), ``model`` (the outermost model it
    trains), or ``nothing`` (the process)."""
    numerics: bool = False
    """It changes the numbers the script computes (precision), not only their speed."""
    run_flag: str | None = None
    """The ``trainscope run`` flag that sets the same (a doctor's fix flag)."""


INJECTIONS: dict[str, Injection] = {
    i.key: i
    for i in (
        Injection("num_workers", _count(0, 64), "worker processes of every DataLoader",
                  needs="dataloader", run_flag="--num-workers"),
        Injection("pin_memory", _flag, "page-locked batches from every DataLoader (true/false)",
                  needs="dataloader", run_flag="--pin-memory"),
        Injection("persistent_workers", _flag,
                  "every DataLoader keeps its workers between epochs (with workers only)",
                  needs="dataloader"),
        Injection("prefetch_factor", _count(1, 64),
                  "batches each worker loads ahead (with workers only)", needs="dataloader"),
        Injection("threads", _count(1, 1024), "torch's intra-op threads (as --threads)",
                  run_flag="--threads"),
        Injection("precision", _precision,
                  "bf16: autocast around the outermost training forward and the loss "
                  "(fp16 is refused: it needs a GradScaler in the script)",
                  needs="model", numerics=True, run_flag="--precision"),
        Injection("matmul_precision", _choice("highest", "high", "medium"),
                  "torch.set_float32_matmul_precision (high: tf32 matmuls on GPUs)",
                  numerics=True),
        Injection("optimizer_impl", _choice("foreach", "fused"),
                  "every torch optimizer the script builds, built with foreach=True or "
                  "fused=True", needs="optimizer", run_flag="--optimizer-impl"),
        Injection("compile", _compile,
                  "true: the outermost training model compiled in place from its second "
                  "call (or name a backend: aot_eager, eager)", needs="model",
                  run_flag="--compile"),
        Injection("cudnn_benchmark", _flag,
                  "torch.backends.cudnn.benchmark (no effect without CUDA)"),
        Injection("activation_checkpointing", _checkpointing,
                  "full | every-K | selective: the training model's repeated blocks "
                  "checkpointed (model.blocks, else its longest list of like blocks)",
                  needs="model", run_flag="--checkpointing"),
    )
}  # fmt: skip
"""Every key ``--inject`` knows, in the order ``--help`` lists them."""


def parse_injections(items: list[str] | None) -> dict[str, Any]:
    """``["num_workers=4", ...]`` -> ``{"num_workers": 4}``; refused in one line: an
    unknown key (the known ones listed), a bad value, a key given twice."""
    out: dict[str, Any] = {}
    for item in items or []:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(f"--inject {item}: give KEY=VALUE (keys: {', '.join(INJECTIONS)})")
        if key not in INJECTIONS:
            raise ConfigError(f"--inject {key}: unknown key; known: {', '.join(INJECTIONS)}")
        if key in out:
            raise ConfigError(f"--inject {key} is given twice")
        out[key] = INJECTIONS[key].read(key, text)
    return out


def as_arguments(injected: dict[str, Any]) -> list[str]:
    """The ``--inject`` words that give ``injected`` again (a launch's ranks, a rerun)."""
    words = []
    for key, value in injected.items():
        text = str(value).lower() if isinstance(value, bool) else str(value)
        words += ["--inject", f"{key}={text}"]
    return words


def for_fix(fix: dict[str, Any]) -> dict[str, Any] | None:
    """A doctor's fix (``{"--num-workers": 4}``) as ``--inject`` settings, or None where
    a flag has no key or its value is not one the key takes (``--num-workers auto``)."""
    by_flag = {i.run_flag: i for i in INJECTIONS.values() if i.run_flag}
    out: dict[str, Any] = {}
    for flag, value in fix.items():
        entry = by_flag.get(flag)
        if entry is None:
            return None
        text = str(value).lower() if isinstance(value, bool) else str(value)
        try:
            out[entry.key] = entry.read(entry.key, text)
        except ConfigError:
            return None
    return out


def keys_help() -> str:
    """One line per key, for ``trainscope profile --help``."""
    return "; ".join(f"{i.key}: {i.help}" for i in INJECTIONS.values())


__all__ = [
    "INJECTIONS",
    "Injection",
    "as_arguments",
    "for_fix",
    "keys_help",
    "parse_injections",
]
