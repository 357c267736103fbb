"""Text from a trained ``gpt-char`` run: rebuild the model from its run directory and sample.

A gpt-char run directory holds everything needed, and nothing is unpickled:
``gpt_config.json`` (the model's shape), ``vocab.json`` (the characters) and
``model.safetensors`` (the weights).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from trainscope.config import DEVICES_RE, SEED_LIMIT, show
from trainscope.errors import ConfigError, TrainscopeError

CONFIG_FILE = "gpt_config.json"
VOCAB_FILE = "vocab.json"
WEIGHTS_FILE = "model.safetensors"
MAX_NEW_TOKENS = 1_000_000
"""The most characters one call generates (the whole Tiny Shakespeare corpus is 1.1 M)."""
MAX_JSON_BYTES = 16 << 20
"""gpt_config.json and vocab.json are a few hundred bytes; a huge one is not a run's."""

# Parameter -> CLI flag, for messages that name what the user typed.
_FLAGS = {
    "max_new_tokens": "--tokens",
    "temperature": "--temperature",
    "top_k": "--top-k",
    "seed": "--seed",
    "device": "--device",
}


def check_settings(
    max_new_tokens: Any,
    temperature: Any,
    top_k: Any,
    seed: Any,
    device: Any,
    *,
    cli: bool = False,
) -> None:
    """Raise a one-line ConfigError for a sampling setting that cannot work (torch-free).

    Tokens 0..MAX_NEW_TOKENS (from 1 with ``cli``); a finite temperature >= 0 (0 is
    greedy); top_k >= 1 or None; a seed 0 <= seed < 2**63; a device auto, cpu, cuda or
    cuda:N. With ``cli`` the messages name the command-line flags, not the parameters.
    """

    def bad(name: str, rule: str, value: Any) -> ConfigError:
        return ConfigError(f"{_FLAGS[name] if cli else name} must be {rule}, got {show(value)}")

    def is_int(value: Any) -> bool:
        return isinstance(value, int) and not isinstance(value, bool)

    least = 1 if cli else 0  # the command has no use for zero characters
    if not is_int(max_new_tokens) or not least <= max_new_tokens <= MAX_NEW_TOKENS:
        raise bad("max_new_tokens", f"an integer in {least}..{MAX_NEW_TOKENS}", max_new_tokens)
    try:
        temp = float(temperature) if isinstance(temperature, (int, float)) else math.nan
    except OverflowError:
        temp = math.nan
    if isinstance(temperature, bool) or not (math.isfinite(temp) and temp >= 0):
        raise bad("temperature", "a finite number >= 0 (0 samples greedily)", temperature)
    if top_k is not None and (not is_int(top_k) or not 1 <= top_k < 2**63):
        raise bad("top_k", "a positive integer", top_k)
    if not is_int(seed) or not 0 <= seed < SEED_LIMIT:
        raise bad("seed", "an integer in 0..2**63 - 1", seed)
    if not isinstance(device, str) or not DEVICES_RE.match(device):
        raise bad("device", "auto, cpu, cuda or cuda:N", device)


def _read_json(path: Path) -> Any:
    try:
        if path.stat().st_size > MAX_JSON_BYTES:
            raise TrainscopeError(f"cannot read {path}: larger than {MAX_JSON_BYTES >> 20} MiB")
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        reason = " ".join(str(exc).split()) or type(exc).__name__
        raise TrainscopeError(f"cannot read {path}: {reason}") from None


def sample_from_run(
    run_dir: str | os.PathLike[str],
    prompt: str = "\n",
    max_new_tokens: int = 500,
    temperature: float = 0.8,
    top_k: int | None = None,
    seed: int = 0,
    device: str = "cpu",
) -> str:
    """Generate ``max_new_tokens`` characters after ``prompt`` with a trained gpt-char model.

    Returns the prompt followed by the generated text. Sampling is reproducible for a given
    ``seed`` (and device). ``temperature`` below 1 sharpens the distribution (0 is greedy);
    ``top_k`` keeps only the k most likely characters at each step. ``device`` is auto
    (CUDA when available), cpu, cuda or cuda:N. Raises ConfigError for a bad setting (see
    :func:`check_settings`), TrainscopeError when ``run_dir`` is not a gpt-char run, a
    file is missing or unreadable, or the prompt holds characters the model never saw.
    """
    check_settings(max_new_tokens, temperature, top_k, seed, device)
    import torch

    from trainscope.data.text import CharVocab
    from trainscope.workloads.gpt import GPT, GPTConfig, generate

    root = Path(run_dir).expanduser()
    if not root.is_dir():
        raise TrainscopeError(f"run directory {root} does not exist")
    if not (root / CONFIG_FILE).is_file():
        raise TrainscopeError(
            f"{root} is not a gpt-char run (it has no {CONFIG_FILE}); sampling needs a run "
            f"of the gpt-char workload"
        )
    for name in (VOCAB_FILE, WEIGHTS_FILE):
        if not (root / name).is_file():
            raise TrainscopeError(
                f"{root} has no {name}; was the run saved with its weights (train.save_model)?"
            )
    if not prompt:
        raise TrainscopeError("the prompt must hold at least one character (e.g. a newline)")

    raw_cfg = _read_json(root / CONFIG_FILE)
    try:
        cfg = GPTConfig(**raw_cfg)
    except (TypeError, ConfigError) as exc:
        raise TrainscopeError(f"{root / CONFIG_FILE} is not a GPT config: {exc}") from None
    try:
        vocab = CharVocab.from_dict(_read_json(root / VOCAB_FILE))
    except ValueError as exc:
        raise TrainscopeError(f"{root / VOCAB_FILE}: {exc}") from None
    if len(vocab) != cfg.vocab_size:
        raise TrainscopeError(
            f"{root / VOCAB_FILE} holds {len(vocab)} characters but the model expects "
            f"{cfg.vocab_size}"
        )
    try:
        ids = vocab.encode(prompt)
    except ValueError as exc:
        raise TrainscopeError(f"prompt: {exc}") from None

    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    dev = torch.device(device)  # the form was checked above
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise TrainscopeError(f"device {device!r} asked for, but CUDA is not available here")
    if dev.type == "cuda" and dev.index is not None and dev.index >= torch.cuda.device_count():
        raise TrainscopeError(
            f"device {device!r} asked for, but this machine has "
            f"{torch.cuda.device_count()} CUDA device(s)"
        )
    from safetensors.torch import load_model

    model = GPT(cfg)
    try:
        # load_model (not torch.load): no pickle, and it restores the tied head weight.
        load_model(model, root / WEIGHTS_FILE, strict=True)
    except Exception as exc:  # safetensors raises its own error types for corrupt files
        reason = " ".join(str(exc).split())[:300]
        raise TrainscopeError(f"cannot load {root / WEIGHTS_FILE}: {reason}") from None
    bad = [
        n for n, t in model.state_dict().items() if t.is_floating_point() and not t.isfinite().all()
    ]
    if bad:  # sampling from them would stop in torch.multinomial with its own error
        more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
        raise TrainscopeError(
            f"{root / WEIGHTS_FILE}: tensor {bad[0]!r}{more} holds NaN or infinite values "
            "(a run that diverged, or a damaged file): there is no model to sample from"
        )
    model.to(dev)

    gen = torch.Generator(device=dev).manual_seed(seed)
    idx = torch.tensor([ids], dtype=torch.int64, device=dev)
    out = generate(model, idx, max_new_tokens, temperature=temperature, top_k=top_k, generator=gen)
    return vocab.decode(out[0].tolist())
