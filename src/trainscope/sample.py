"""Text from a trained ``gpt-char`` run: rebuild the model from its run directory and sample.

A gpt-char run directory holds everything needed, and nothing is unpickled:
``gpt_config.json`` (the model's shape), ``vocab.json`` (the characters) and
``model.safetensors`` (the weights).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from trainscope.errors import ConfigError, TrainscopeError

CONFIG_FILE = "gpt_config.json"
VOCAB_FILE = "vocab.json"
WEIGHTS_FILE = "model.safetensors"


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        reason = " ".join(str(exc).split())
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
    ``top_k`` keeps only the k most likely characters at each step. Raises TrainscopeError
    when ``run_dir`` is not a gpt-char run, a file is missing or unreadable, or the prompt
    holds characters the model never saw.
    """
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
    if max_new_tokens < 0:
        raise TrainscopeError(f"max_new_tokens must be >= 0, got {max_new_tokens}")
    if temperature < 0:
        raise TrainscopeError(f"temperature must be >= 0, got {temperature}")
    if top_k is not None and top_k < 1:
        raise TrainscopeError(f"top_k must be positive, got {top_k}")
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

    try:
        dev = torch.device(device)
    except RuntimeError as exc:
        raise TrainscopeError(f"unknown device {device!r}: {exc}") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise TrainscopeError(f"device {device!r} asked for, but CUDA is not available here")
    from safetensors.torch import load_model

    model = GPT(cfg)
    try:
        # load_model (not torch.load): no pickle, and it restores the tied head weight.
        load_model(model, root / WEIGHTS_FILE, strict=True)
    except Exception as exc:  # safetensors raises its own error types for corrupt files
        reason = " ".join(str(exc).split())[:300]
        raise TrainscopeError(f"cannot load {root / WEIGHTS_FILE}: {reason}") from None
    model.to(dev)

    gen = torch.Generator(device=dev).manual_seed(seed)
    idx = torch.tensor([ids], dtype=torch.int64, device=dev)
    out = generate(model, idx, max_new_tokens, temperature=temperature, top_k=top_k, generator=gen)
    return vocab.decode(out[0].tolist())
