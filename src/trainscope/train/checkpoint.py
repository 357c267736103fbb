"""Checkpoints of a TrainState: written whole or not at all, read back without pickle.

A checkpoint is a folder ``step-N`` under a run's ``checkpoints/``::

    model.safetensors       the model's tensors
    optimizer.safetensors   the optimizer's per-parameter state tensors
    rng.safetensors         torch's CPU (and CUDA) generator states
    trainer.json            step, epoch, position in the epoch, the optimizer's
                            param groups and scalars, the precision's (GradScaler) state,
                            Python's and NumPy's generator states, and what the run had
                            recorded by then (stage times, epochs, the config it ran)
    COMPLETE.json           written last: every file's size and SHA-256

It is written into ``.tmp-step-N`` (each file fsynced), the manifest last, then renamed
to ``step-N`` and the parent fsynced, as DCP writes its ``.metadata`` last: a folder
without a manifest, or whose files do not match it, is never loaded. Tensors are read
with safetensors and everything else is strict JSON, so loading a checkpoint runs no
code from it (a pickle put in its place is refused as a bad file).
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from trainscope.errors import TrainscopeError
from trainscope.records import schema
from trainscope.records.jsonio import dumps
from trainscope.records.record_specs import CHECKPOINT_FORMAT, TRAINER_STATE
from trainscope.records.record_specs import MANIFEST as MANIFEST_SPEC

MANIFEST = "COMPLETE.json"
# Every file a checkpoint folder holds, the manifest last: all a removal ever touches.
CHECKPOINT_FILES = (
    "model.safetensors",
    "optimizer.safetensors",
    "rng.safetensors",
    "trainer.json",
    MANIFEST,
)
FORMAT = CHECKPOINT_FORMAT
_NAME = re.compile(r"^step-(\d+)$")
TMP_PREFIX = ".tmp-"


# --------------------------------------------------------------------------- shards
# Each rank saves its own part of sharded tensors (FSDP's and tp's DTensors) and gets
# back exactly that part: nothing is gathered to save or scattered to load.


def local_tensors(tensors: dict[str, Any]) -> dict[str, Any]:
    """DTensors (FSDP's shards) as this rank's local tensor; anything else as it is."""
    from torch.distributed.tensor import DTensor  # 0.8 s to import: only when saving

    return {k: v.to_local() if isinstance(v, DTensor) else v for k, v in tensors.items()}


def local_optimizer_state(sd: dict[str, Any]) -> dict[str, Any]:
    """An optimizer's state dict with its DTensor states as this rank's local shards."""
    return {**sd, "state": {idx: local_tensors(entry) for idx, entry in sd["state"].items()}}


def from_local_like(
    loaded: dict[str, Any], reference: dict[str, Any], shaped: bool = False
) -> dict[str, Any]:
    """Local shards read back, made DTensors again where ``reference`` (the live model's
    tensors, or the parameter an optimizer state belongs to) is one: the same mesh and
    placements, so each rank gets back exactly the shard it saved. With ``shaped`` only
    tensors the parameter's shape (exp_avg, momentum) are sharded, not e.g. Adam's step."""
    from torch.distributed.tensor import DTensor  # 0.8 s to import: only when loading

    out = {}
    for k, v in loaded.items():
        ref = reference.get(k)
        if isinstance(ref, DTensor) and isinstance(v, torch.Tensor):
            if not shaped or v.shape == ref.to_local().shape and v.dim() > 0:
                v = DTensor.from_local(
                    v.to(ref.device), ref.device_mesh, ref.placements,
                    shape=ref.shape, stride=ref.stride(),
                )  # fmt: skip
        out[k] = v
    return out


@dataclass(frozen=True)
class Checkpoint:
    """A complete checkpoint on disk."""

    path: Path
    step: int


def _fsync_write(path: Path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _unshared(tensors: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """Tensors safetensors can write, and the aliases left out: a tensor that is another
    one exactly (tied weights, e.g. a GPT's embedding and output head) is written once and
    named as an alias; any other sharing of memory gets a copy of its own."""
    seen: dict[tuple, str] = {}
    kept: dict[str, torch.Tensor] = {}
    aliases: dict[str, str] = {}
    for name, t in tensors.items():
        t = t.detach().cpu()
        key = (t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape), t.stride(),
               t.dtype)  # fmt: skip
        if t.numel() and key in seen:
            aliases[name] = seen[key]
            continue
        seen[key] = name
        kept[name] = t
    storages: dict[int, int] = {}
    for t in kept.values():
        if t.numel():
            ptr = t.untyped_storage().data_ptr()
            storages[ptr] = storages.get(ptr, 0) + 1
    out = {
        k: t.clone() if t.numel() and storages[t.untyped_storage().data_ptr()] > 1 else t
        for k, t in kept.items()
    }
    return {k: v.contiguous() for k, v in out.items()}, aliases


def _tensors_bytes(tensors: dict[str, torch.Tensor]) -> bytes:
    from safetensors.torch import save

    return save(tensors)


def _split_optimizer(sd: dict[str, Any]) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """An optimizer state_dict as tensors (``state.<param>.<key>``) and plain data."""
    tensors: dict[str, torch.Tensor] = {}
    scalars: dict[str, dict[str, Any]] = {}
    for idx, entry in sd["state"].items():
        for key, value in entry.items():
            if isinstance(value, torch.Tensor):
                tensors[f"state.{idx}.{key}"] = value
            else:
                scalars.setdefault(str(idx), {})[key] = value
    return tensors, {"param_groups": sd["param_groups"], "scalars": scalars}


def _join_optimizer(tensors: dict[str, torch.Tensor], plain: dict[str, Any]) -> dict[str, Any]:
    state: dict[int, dict[str, Any]] = {}
    for name, value in tensors.items():
        _, idx, key = name.split(".", 2)
        state.setdefault(int(idx), {})[key] = value
    for idx, entry in (plain.get("scalars") or {}).items():
        state.setdefault(int(idx), {}).update(entry)
    return {"state": state, "param_groups": plain["param_groups"]}


def _rng_split(rng: dict[str, Any]) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Generator states as tensors (torch, CUDA) and JSON (Python, NumPy)."""
    tensors = {"torch": rng["torch"]}
    for i, s in enumerate(rng.get("cuda") or []):
        tensors[f"cuda.{i}"] = s
    version, internal, gauss = rng["python"]
    kind, keys, pos, has_gauss, cached = rng["numpy"]
    plain = {
        "python": [version, list(internal), gauss],
        "numpy": [kind, [int(k) for k in keys], int(pos), int(has_gauss), float(cached)],
    }
    return tensors, plain


def _rng_join(tensors: dict[str, torch.Tensor], plain: dict[str, Any]) -> dict[str, Any]:
    import numpy as np

    version, internal, gauss = plain["python"]
    kind, keys, pos, has_gauss, cached = plain["numpy"]
    cuda = [
        tensors[k]
        for k in sorted((k for k in tensors if k.startswith("cuda.")), key=lambda k: int(k[5:]))
    ]
    return {
        "python": (version, tuple(internal), gauss),
        "numpy": (kind, np.array(keys, dtype=np.uint32), pos, has_gauss, cached),
        "torch": tensors["torch"],
        **({"cuda": cuda} if cuda else {}),
    }


def write_checkpoint(
    root: Path, state_dict: dict[str, Any], after_file: Callable[[str], None] | None = None
) -> Checkpoint:
    """Write ``state_dict`` (a :meth:`TrainState.state_dict`) as ``root/step-N``.

    An existing complete ``step-N`` is kept (the same step is the same state); a left-over
    temporary folder of a killed write is replaced. ``after_file`` is called with each
    file's name once it is written (fault-injection tests kill the process there).
    """
    step = int(state_dict["step"])
    final = root / f"step-{step}"
    if (final / MANIFEST).is_file():
        return Checkpoint(final, step)
    tmp = root / f"{TMP_PREFIX}step-{step}"
    root.mkdir(parents=True, exist_ok=True)
    if tmp.exists():
        _remove_written(tmp)
    tmp.mkdir()
    opt_tensors, opt_plain = _split_optimizer(state_dict["optimizer"])
    rng_tensors, rng_plain = _rng_split(state_dict["rng"])
    model, model_aliases = _unshared(state_dict["model"])
    opt_tensors, opt_aliases = _unshared(opt_tensors)
    rng_tensors, _ = _unshared(rng_tensors)
    files = {
        "model.safetensors": _tensors_bytes(model),
        "optimizer.safetensors": _tensors_bytes(opt_tensors),
        "rng.safetensors": _tensors_bytes(rng_tensors),
        "trainer.json": dumps(
            {
                "format": FORMAT,
                "step": step,
                "epoch": state_dict["epoch"],
                "epoch_step": state_dict.get("epoch_step", 0),
                "optimizer": opt_plain,
                "precision": state_dict.get("precision") or {},
                "scheduler": state_dict.get("scheduler"),
                "rng": rng_plain,
                # What the run had recorded by then (plain data): a resume goes on from it.
                "run": state_dict.get("run") or {},
                "aliases": {"model": model_aliases, "optimizer": opt_aliases},
            }
        ).encode(),
    }
    manifest: dict[str, Any] = {"format": FORMAT, "step": step, "files": {}}
    for name, data in files.items():
        _fsync_write(tmp / name, data)
        manifest["files"][name] = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
        if after_file is not None:
            after_file(name)
    _fsync_write(tmp / MANIFEST, dumps(manifest).encode())  # last: the folder is complete
    _fsync_dir(tmp)
    if final.exists():  # an incomplete step-N (no manifest): never loaded, replaced
        _remove_written(final)
    os.rename(tmp, final)
    _fsync_dir(root)
    return Checkpoint(final, step)


def complete_checkpoints(root: Path) -> list[Checkpoint]:
    """Checkpoints under ``root`` that have a manifest, newest (highest step) first.

    Files are checked against the manifest only when one is loaded.
    """
    if not root.is_dir():
        return []
    found = []
    for entry in root.iterdir():
        m = _NAME.match(entry.name)
        if m and not entry.is_symlink() and (entry / MANIFEST).is_file():
            found.append(Checkpoint(entry, int(m.group(1))))
    return sorted(found, key=lambda c: c.step, reverse=True)


def verify(ckpt: Checkpoint) -> dict[str, Any]:
    """The checkpoint's manifest after checking every file's size and SHA-256 against it;
    one clear error naming the first file that does not match (or the manifest's field
    that does not fit its schema)."""
    manifest = schema.read(ckpt.path / MANIFEST, MANIFEST_SPEC)
    files = manifest["files"]
    if not files:
        raise TrainscopeError(f"{ckpt.path / MANIFEST}: not a trainscope checkpoint manifest")
    for name, meta in files.items():
        path = ckpt.path / name
        if "/" in name or not path.is_file() or path.is_symlink():
            raise TrainscopeError(f"checkpoint file {path} is missing")
        if path.stat().st_size != meta.get("bytes") or _sha256(path) != meta.get("sha256"):
            raise TrainscopeError(
                f"checkpoint file {path} is damaged (its size or SHA-256 differs from {MANIFEST})"
            )
    return manifest


def checked_state(ckpt: Checkpoint) -> dict[str, Any]:
    """The checkpoint's trainer state (trainer.json) once every file matches the
    manifest, trainer.json fits its schema (:data:`~trainscope.records.record_specs.
    TRAINER_STATE`) and each tensor file's header reads as safetensors: what a resume
    checks before it writes anything. One line naming the file (and field) otherwise."""
    from safetensors import SafetensorError, safe_open

    verify(ckpt)
    plain = schema.read(ckpt.path / "trainer.json", TRAINER_STATE)
    for name in ("model.safetensors", "optimizer.safetensors", "rng.safetensors"):
        try:
            with safe_open(str(ckpt.path / name), framework="pt") as f:
                f.keys()
        except (SafetensorError, OSError, ValueError) as e:
            raise TrainscopeError(
                f"checkpoint file {ckpt.path / name} is unreadable: {e}"
            ) from None
    return plain


def load_checkpoint(ckpt: Checkpoint) -> dict[str, Any]:
    """A verified checkpoint as a state dict (the shape :meth:`TrainState.state_dict` has).

    Only safetensors and JSON are read: nothing in the folder can run code.
    """
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    plain = checked_state(ckpt)

    def tensors(name: str) -> dict[str, torch.Tensor]:
        try:
            return load_file(str(ckpt.path / name))
        except (SafetensorError, OSError, ValueError) as e:
            raise TrainscopeError(
                f"checkpoint file {ckpt.path / name} is unreadable: {e}"
            ) from None

    aliases = plain.get("aliases") or {}

    def with_aliases(name: str, part: str) -> dict[str, torch.Tensor]:
        """The file's tensors, plus each tensor written once under another name (tied)."""
        loaded = tensors(name)
        for alias, target in (aliases.get(part) or {}).items():
            if not isinstance(alias, str) or target not in loaded:
                raise TrainscopeError(f"checkpoint file {ckpt.path / 'trainer.json'} is damaged")
            loaded[alias] = loaded[target]
        return loaded

    return {
        "model": with_aliases("model.safetensors", "model"),
        "optimizer": _join_optimizer(
            with_aliases("optimizer.safetensors", "optimizer"), plain["optimizer"]
        ),
        "precision": plain.get("precision") or {},
        "scheduler": plain.get("scheduler"),
        "step": plain["step"],
        "epoch": plain["epoch"],
        "epoch_step": plain.get("epoch_step", 0),
        "rng": _rng_join(tensors("rng.safetensors"), plain["rng"]),
        "run": plain.get("run") or {},
    }


def load_latest(root: Path, warn: Any = None) -> tuple[Checkpoint, dict[str, Any]] | None:
    """The newest checkpoint that loads; a damaged one is named (``warn``) and skipped for
    the one before it. None when there is none."""
    errors = []
    for ckpt in complete_checkpoints(root):
        try:
            return ckpt, load_checkpoint(ckpt)
        except TrainscopeError as e:
            errors.append(str(e))
            if warn is not None:
                warn(f"{e}; falling back to an earlier checkpoint")
    if errors:
        raise TrainscopeError(damaged_text(root, errors))
    return None


def damaged_text(root: Path, errors: list[str]) -> str:
    """One line: no checkpoint under ``root`` loads, and why each does not (the first 4)."""
    shown = "; ".join(errors[:4]) + (f" (and {len(errors) - 4} more)" if len(errors) > 4 else "")
    return f"every checkpoint under {root} is damaged, none to go on from: {shown}"


def _remove_written(folder: Path) -> None:
    """Remove a checkpoint folder of ours: only the file names a checkpoint has, never
    following a link (unlink removes a link itself), then the folder if it is empty."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        for name in CHECKPOINT_FILES:
            try:
                os.unlink(name, dir_fd=fd)
            except FileNotFoundError:
                pass
    finally:
        os.close(fd)
    try:
        folder.rmdir()
    except OSError:
        pass  # something else is in it: not ours to remove


def prune(root: Path, keep: int) -> list[Path]:
    """Remove all but the newest ``keep`` complete checkpoints; returns what was removed.
    A folder holding anything a checkpoint does not is left in place."""
    removed = []
    for ckpt in complete_checkpoints(root)[max(keep, 1) :]:
        _remove_written(ckpt.path)
        if not ckpt.path.exists():
            removed.append(ckpt.path)
    return removed
