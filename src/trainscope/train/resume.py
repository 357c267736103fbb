"""Resuming a run in place: which checkpoint it goes on from, whether that checkpoint
fits what is being run now, and what the earlier attempts were.

A resume is refused, with every difference shown, when the model, the optimizer, the
batch, the world size, the data or anything else that decides the numbers differs from
the checkpoint's run; what only decides how long it trains or how it is measured may
change (:data:`MAY_CHANGE`). Everything here reads safetensors and JSON, never pickle.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import torch

from trainscope.config import RunConfig
from trainscope.errors import ConfigError, TrainscopeError
from trainscope.records.attempts import current_events
from trainscope.records.run_dir import read_jsonl, try_summary
from trainscope.runtime.dist import DistInfo, gather_objects
from trainscope.train.checkpoint import (
    Checkpoint,
    checked_state,
    complete_checkpoints,
    damaged_text,
    load_checkpoint,
    local_tensors,
)
from trainscope.train.parts import RunPlace
from trainscope.train.state import TrainState
from trainscope.util.textsafe import one_line

# Config keys a resume may change: how long to train (more epochs), how often to evaluate,
# log and checkpoint, how the run is measured and launched. Numbers do not depend on them
# (the input pipeline gives every sample the same content whatever num_workers is).
# train.optimizer_impl is not one: fused rounds the update differently from the for-loop
# (measured on CPU: Adam's parameters 4e-9..1.5e-8 apart after 5 steps), and foreach
# matching the for-loop bit for bit (as it did on CPU) is what torch's kernels happen to
# do, not a promise (other devices run other kernels), so a resume keeps the impl the
# checkpoint ran with.
MAY_CHANGE = (
    "train.epochs",
    "train.eval_every",
    "train.log_every",
    "train.checkpoint_every",
    "train.checkpoint_every_epoch",
    "train.keep_checkpoints",
    "train.save_weights",
    "workload.download",
    "data.num_workers",
    "data.pin_memory",
    "data.persistent_workers",
    "data.prefetch_factor",
    "runtime.device",  # compared as the device type actually used, below
    "runtime.timing",
    "runtime.checkpointing",  # recomputes the same values: memory and time change, not numbers
    "runtime.system_interval_s",
    "runtime.timing_warmup_steps",
    "runtime.progress",
    "runtime.track",
    "dist.timeout_s",
    "dist.stall_timeout_s",
    "dist.max_restarts",
    "dist.requeue",
    "dist.master_addr",
    "dist.master_port",
    "dist.rdzv_endpoint",
    "dist.node_rank",
    "out",
    "overwrite",
    "resume",
)


def _flat(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and v:
            out.update(_flat(v, key + "."))
        else:
            out[key] = v
    return out


def _defaults() -> dict[str, Any]:
    """Every config key's default, flattened as :func:`config_differences` compares."""
    return _flat(RunConfig().to_dict())


def config_differences(saved: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """``key: then -> now`` for every config value that differs and may not.

    A key the saved config lacks came after that run was written (train.optimizer_impl):
    it ran as the key's default does, so that default stands in for it."""
    a, b = _flat(saved), _flat(now)
    defaults = _defaults()
    out = []
    for key in sorted(set(a) | set(b)):
        then = a[key] if key in a else defaults.get(key)
        if key in MAY_CHANGE or then == b.get(key):
            continue
        out.append(f"{key}: {then!r} then, {b.get(key)!r} now")
    return out


def data_fingerprint(dataset: Any) -> dict[str, Any]:
    """The training split's size and, where its tensors are in memory, their SHA-256
    (the raw tensors before any augmentation): a resume on changed data is refused."""
    from trainscope.data.fast import in_memory

    try:
        n = len(dataset)
    except TypeError:
        n = None
    tensors: list[torch.Tensor] = []
    split = in_memory(dataset)
    if split is not None:
        tensors = [split.inputs, split.targets]
    elif isinstance(getattr(dataset, "data", None), torch.Tensor):
        tensors = [dataset.data]  # e.g. a text corpus cut into windows
    digest = None
    if tensors:
        h = hashlib.sha256()
        for t in tensors:
            t = t.detach().cpu().contiguous()
            h.update(f"{t.dtype}{tuple(t.shape)}".encode())
            h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
        digest = h.hexdigest()
    return {"samples": n, "sha256": digest}


def model_differences(saved: dict[str, torch.Tensor], model: dict[str, torch.Tensor]) -> list[str]:
    """Tensors the checkpoint has and the model does not, and the other way, and shapes."""
    out = [f"model tensor {k}: in the checkpoint only" for k in sorted(set(saved) - set(model))]
    out += [f"model tensor {k}: in the model only" for k in sorted(set(model) - set(saved))]
    for k in sorted(set(saved) & set(model)):
        if tuple(saved[k].shape) != tuple(model[k].shape):
            out.append(
                f"model tensor {k}: shape {tuple(saved[k].shape)} then, {tuple(model[k].shape)} now"
            )
    return out


def check_fits(
    run: dict[str, Any], now: dict[str, Any], ckpt: Checkpoint, model: dict[str, torch.Tensor],
    saved_model: dict[str, torch.Tensor],
) -> None:  # fmt: skip
    """Refuse (ConfigError) a checkpoint whose run differs from this one, listing how.

    ``run`` is what the checkpoint recorded about its run; ``now`` the same facts of this
    one: ``config`` (plain data), ``world_size``, ``device_type`` and ``data``.
    """
    diffs = config_differences(run.get("config") or {}, now["config"])
    for key in ("world_size", "device_type"):
        if run.get(key) != now[key]:
            diffs.append(f"{key}: {run.get(key)!r} then, {now[key]!r} now")
    then, data = run.get("data") or {}, now["data"]
    if then.get("samples") != data["samples"]:
        diffs.append(f"training samples: {then.get('samples')} then, {data['samples']} now")
    elif then.get("sha256") and data["sha256"] and then["sha256"] != data["sha256"]:
        diffs.append("training data: the same number of samples, different contents (SHA-256)")
    diffs += model_differences(saved_model, model)
    if diffs:
        _refuse(ckpt, diffs)


def precheck(run_dir: Path, config: dict[str, Any], world_size: int, restarted: bool) -> None:
    """Before a resumed run writes anything: refuse it if the newest complete checkpoint
    was written by a run that differs (by its recorded config and world size), if there
    is none to go on from (unless torchrun restarted the run), or if the run completed
    and no more epochs are asked for. The model and data are compared once built."""
    found = complete_checkpoints(run_dir / "checkpoints")
    if not found:
        if restarted:
            return
        raise TrainscopeError(
            f"--resume {run_dir}: no complete checkpoint to go on from (run with "
            "--checkpoint-every N or --checkpoint-every-epoch to write them)"
        )
    # The newest that is whole (a damaged one is named again, and skipped, when the run
    # loads them); when none is, refused now, naming each, before anything is written.
    damaged: list[str] = []
    for ckpt in found:
        try:
            run = checked_state(ckpt).get("run") or {}
            break
        except TrainscopeError as e:
            damaged.append(str(e))
    else:
        if restarted:
            return
        raise TrainscopeError(
            f"--resume {run_dir}: {damaged_text(run_dir / 'checkpoints', damaged)}"
        )
    diffs = config_differences(run.get("config") or {}, config)
    if run.get("world_size") not in (None, world_size):
        diffs.append(f"world_size: {run.get('world_size')!r} then, {world_size!r} now")
    if diffs:
        _refuse(ckpt, diffs)
    previous = try_summary(run_dir / "summary.json")
    saved = ((run.get("config") or {}).get("train") or {}).get("epochs") or 0
    if previous.get("status") == "completed" and config["train"]["epochs"] <= saved:
        raise ConfigError(
            f"--resume {run_dir}: the run completed all its {saved} epochs; pass --epochs N "
            f"(more than {saved}) to train it longer"
        )


def _refuse(ckpt: Checkpoint, diffs: list[str]) -> None:
    shown = "; ".join(one_line(d) for d in diffs[:8])
    more = f" (and {len(diffs) - 8} more)" if len(diffs) > 8 else ""
    raise ConfigError(
        f"cannot resume from {ckpt.path}: this run differs from the one that wrote it: "
        f"{shown}{more}. Only the epoch count, evaluation/log/checkpoint intervals and "
        "measurement options may change on a resume; start a new run for the rest"
    )


def agree_checkpoint(
    root: Path, info: DistInfo, warn: Any, damaged: list[str] | None = None
) -> tuple[Checkpoint, dict[str, Any]] | None:
    """The newest checkpoint step that every rank has complete and can load; each rank
    loads its own. A damaged one is named (``warn``, and in ``damaged``) and an earlier
    step tried. None when there is no step every rank can go on from (the run then starts
    from the beginning)."""
    mine = [c.step for c in complete_checkpoints(root)]
    every = gather_objects(mine, info)
    common = sorted(set.intersection(*(set(s) for s in every)), reverse=True)
    for step in common:
        ckpt = Checkpoint(root / f"step-{step}", step)
        try:
            sd: dict[str, Any] | None = load_checkpoint(ckpt)
        except TrainscopeError as e:
            warn(f"{e}; falling back to an earlier checkpoint")
            if damaged is not None:
                damaged.append(str(e))
            sd = None
        if all(gather_objects(sd is not None, info)):
            assert sd is not None
            return ckpt, sd
    if any(every) and not common:
        warn("the ranks have no checkpoint step in common: starting from the beginning")
    return None


def how_it_ended(summaries: list[dict[str, Any] | None]) -> str:
    """How the previous attempt ended, from the summaries its ranks left (rank 0's first);
    one still "running" means that process died without finishing its record."""
    first = summaries[0] or {}
    status = first.get("status")
    if status == "completed":
        text = "completed"
    elif status in ("failed", "preempted", "cancelled"):
        text = f"{status}: {first.get('error') or 'no reason recorded'}"
    else:
        text = "ended without finishing its record (killed: SIGKILL, out of memory, power)"
    dead = [str(r) for r, s in enumerate(summaries) if r and (s or {}).get("status") == "running"]
    if dead:
        text += f"; rank(s) {', '.join(dead)} ended without a record"
    return one_line(text)


def earlier_attempts(previous: dict[str, Any], ended: str) -> list[dict[str, Any]]:
    """The attempts the run had before this one (from rank 0's previous summary), the
    last one's end filled in."""
    attempts = previous.get("attempts")
    if not isinstance(attempts, list) or not attempts:
        attempts = [{"attempt": 1, "started_at": previous.get("started_at"), "from_step": 0}]
    last = {**attempts[-1], "ended": ended, "finished_at": previous.get("finished_at")}
    return [*attempts[:-1], last]


def recorded_events(run_dir: Path) -> tuple[list[dict[str, Any]], int]:
    """``metrics.jsonl`` as the run stands (each step once), and the highest step any
    attempt recorded (what a resume from an earlier step does again)."""

    raw = read_jsonl(run_dir / "metrics.jsonl")
    steps = [e["step"] for e in raw if e.get("event") == "step" and isinstance(e.get("step"), int)]
    return current_events(raw), max(steps, default=0)


def resume_into(place: RunPlace, state: TrainState, facts: dict[str, Any]) -> None:
    """Put a run where its newest checkpoint left off: its TrainState (RNG included) and
    its RunProgress (``place.progress``), each restored in one call, then a ``resume``
    line in the metrics and the attempts in the record. ``facts``: the run's own (what
    the checkpoint must have been made under). Without any checkpoint a run restarted by
    torchrun starts over; a ``--resume`` asked for by the user is refused."""
    ctx, writer = place.ctx, place.writer
    previous = gather_objects(ctx.previous, ctx.info)  # every rank's, for how it ended
    damaged: list[str] = []
    root = writer.run_dir / "checkpoints"
    found = agree_checkpoint(root, ctx.info, place.note, damaged)
    events, highest = recorded_events(writer.run_dir)
    if found is None:
        _start_over(place, root, damaged)
        position = {"from_step": 0, "from_epoch": 0, "epoch_step": 0, "checkpoint": None}
    else:
        position = _restore(place, state, facts, *found, events)
    _record_resume(place, position, previous, highest)


def _start_over(place: RunPlace, root: Path, damaged: list[str]) -> None:
    """No checkpoint every rank can load: refused for ``--resume``; from the beginning
    for a run torchrun restarted."""
    run_dir = place.writer.run_dir
    if not place.ctx.restarted:
        raise TrainscopeError(
            f"--resume {run_dir}: {damaged_text(root, damaged)}"
            if damaged
            else f"--resume {run_dir}: no complete checkpoint to go on from (run "
            "with --checkpoint-every N or --checkpoint-every-epoch to write them)"
        )
    place.note(
        "restarted with every checkpoint damaged: training from the beginning"
        if damaged
        else "restarted with no checkpoint written yet: training from the beginning"
    )


def _restore(
    place: RunPlace, state: TrainState, facts: dict[str, Any], ckpt: Checkpoint,
    sd: dict[str, Any], events: list[dict[str, Any]],
) -> dict[str, Any]:  # fmt: skip
    """Check that the checkpoint fits this run, then load it into the trainer's progress
    and state; returns where the run goes on from."""
    run = sd["run"]
    mine = local_tensors(state.model.state_dict())  # FSDP: this rank's shards
    check_fits(run, facts, ckpt, mine, sd["model"])
    step = sd["step"]
    # The checkpoint's own write time was measured after it was written: in its line.
    written = [e for e in events if e.get("event") == "checkpoint" and e.get("step") == step]
    seconds = written[-1].get("seconds") or 0.0 if written else 0.0
    steps = [
        {"batch_size": e.get("batch_size"), "stages": e.get("stages") or {}}
        for e in events
        if e.get("event") == "step" and isinstance(e.get("step"), int) and e["step"] <= step
    ]
    place.progress.load_state_dict(run, written_s=seconds, step_records=steps)
    state.load_state_dict(sd)  # last: RNG states as the checkpoint left them
    return {
        "from_step": step,
        "from_epoch": sd["epoch"],
        "epoch_step": sd.get("epoch_step", 0),
        "checkpoint": str(ckpt.path.relative_to(place.writer.run_dir)),
    }


def _record_resume(
    place: RunPlace, position: dict[str, Any], previous: list[dict[str, Any] | None], highest: int
) -> None:
    """The ``resume`` line, the config it goes on with, the attempts and a note."""
    ctx, writer = place.ctx, place.writer
    ended = how_it_ended(previous)
    step, epoch, epoch_step = position["from_step"], position["from_epoch"], position["epoch_step"]
    redone = max(0, highest - step)
    writer.log(
        "resume", **position, previous=ended, steps_redone=redone,
        by="torchrun" if ctx.restarted else "--resume",
    )  # fmt: skip
    writer.flush()
    if ctx.info.is_main:  # the config it goes on with (e.g. more epochs), now that it fits
        writer.write_config(place.cfg.saved_dict())
    place.record.resumed(
        earlier_attempts(previous[0] or {}, ended), **position, steps_redone=redone
    )
    inside = f", {epoch_step} step(s) into epoch {epoch + 1}" if epoch_step else ""
    place.note(
        f"attempt {ctx.attempt}: resumed from step {step} (after epoch {epoch}{inside}); the "
        f"previous attempt {ended}. Times cover every attempt's setup and its work up to its "
        f"last checkpoint; the {redone} step(s) taken after it were done again and count once"
    )
