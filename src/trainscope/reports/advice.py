"""What to optimise first: the biggest stage of a profile, named with a concrete suggestion.

Pure functions of measured stage seconds. Each rule states its threshold and quotes the
measurement it fired on, so a suggestion can be checked against the table beside it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trainscope.diagnosis.rules import DATA_WAIT_SHARE, H2D_SHARE
from trainscope.diagnosis.rules import EVALUATION_WALL_SHARE as EVALUATION_SHARE
from trainscope.diagnosis.sync_rules import COMM_SHARE
from trainscope.records.run_dir import STAGE_LABELS, STAGES
from trainscope.render.document import escape_inline

STEP_STAGES = ("data_wait", "h2d", "forward", "backward", "comm", "pipeline_wait", "optimizer")
# Thresholds of the secondary rules (shares of the step or of the wall time): those the
# doctor has too are the doctor's (one place, docs/doctor.md); setup and "other" are this
# profile's own (the doctor's short-run rule is minor at 50%).
DATA_WAIT_STEP_SHARE = DATA_WAIT_SHARE
EVALUATION_WALL_SHARE = EVALUATION_SHARE
H2D_STEP_SHARE = H2D_SHARE
COMM_STEP_SHARE = COMM_SHARE
SETUP_WALL_SHARE = 0.30
OTHER_WALL_SHARE = 0.10


@dataclass
class Finding:
    """One observation with its suggestion."""

    stage: str
    share: float
    """Share of wall time (of the step for data wait and copies, see ``of``)."""
    of: str
    """"wall" or "step": what ``share`` is a share of."""
    text: str
    """The finding as the report's inline markup (code spans; record values escaped)."""


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _ctx(ctx: dict[str, Any], key: str) -> str:
    # A knob's value as it was recorded: text inside the suggestion's inline markup.
    return escape_inline(str(ctx.get(key, "?")))


def _suggest(stage: str, share: float, of: str, ctx: dict[str, Any]) -> str:
    """The suggestion for one stage; ``ctx`` holds the run's knobs (workers, loader...)."""
    label = STAGE_LABELS.get(stage, stage)
    where = f"{_pct(share)} of the {'training step' if of == 'step' else 'wall time'}"
    cuda = str(ctx.get("device", "")).startswith("cuda")
    if stage == "data_wait":
        if ctx.get("loader") == "fast":
            return (
                f"{label} is {where} although the data already sit on the device (--loader "
                "fast): the time goes to indexing and batched augmentation; use lighter "
                "augmentation or larger batches."
            )
        if ctx.get("script"):
            return (
                f"{label} is {where}: the model waits for batches. Raise num_workers (now "
                f"{_ctx(ctx, 'num_workers')}): `trainscope study loader -- SCRIPT` measures "
                "the best value on the unchanged script, `--inject num_workers=N` applies it."
            )
        return (
            f"{label} is {where}: the model waits for batches. Raise num_workers (now "
            f"{_ctx(ctx, 'num_workers')}; `trainscope study loader` measures the best "
            "value, `--num-workers auto` picks it), or use `--loader fast` for a data set "
            "that fits in memory."
        )
    if stage == "h2d":
        return (
            f"{label} is {where}: use pinned memory (--pin-memory) so copies run "
            "asynchronously, or keep the data on the device (--loader fast)."
        )
    if stage in ("forward", "backward"):
        extra = (
            "mixed precision (bf16, or fp16 with GradScaler; `trainscope study precision`), "
            "a larger batch, or torch.compile"
            if cuda
            else "a larger batch (fewer, bigger kernels), more CPU threads, or a GPU; "
            "on a GPU, mixed precision (`trainscope study precision`)"
        )
        return (
            f"{label} is {where}: the model's own compute dominates, which is where time "
            f"should go. To make it cheaper: {extra}."
        )
    if stage == "comm":
        return (
            f"{label} is {where}: gradients are synchronised after backward, one collective "
            f"per tensor (strategy {_ctx(ctx, 'strategy')}). DDP (--strategy ddp) buckets "
            "them and overlaps the all-reduce with backward; `trainscope study strategies` "
            "measures the difference."
        )
    if stage == "optimizer":
        return (
            f"{label} is {where}: many small parameter tensors make the per-tensor update "
            "loop expensive; use the foreach/fused optimizer implementations or a larger "
            "batch (fewer steps per epoch)."
        )
    if stage == "evaluation":
        return (
            f"{label} is {where}: evaluate less often (--eval-every, now "
            f"{_ctx(ctx, 'eval_every')}) or on a subsample of the validation set."
        )
    if stage == "compile":
        return (
            f"{label} is {where}: a one-off cost that pays back only over enough steps. "
            "Compare the steady-state step time with and without --compile: the run must "
            "save more than this across its steps."
        )
    if stage == "setup" and ctx.get("script"):
        return (
            f"{label} is {where}: fixed start-up costs (the script's imports, data and "
            "model) dominate because the run is short. Profile more steps (--steps) before "
            "optimising the loop."
        )
    if stage == "setup":
        return (
            f"{label} is {where}: fixed start-up costs (loading data, building the model, "
            "first-use imports) dominate because the run is short. Profile a longer run "
            "(more --epochs) before optimising the loop, or cache preprocessed data."
        )
    return (
        f"{label} is {where}: time outside every measured stage (Python overhead between "
        "steps, logging, epoch boundaries). Raise --log-every (now "
        f"{_ctx(ctx, 'log_every')}) and look for synchronising calls such as .item()."
    )


def findings(
    stages_s: dict[str, float], wall_s: float, ctx: dict[str, Any] | None = None
) -> list[Finding]:
    """The biggest stage first, then every secondary rule that fires.

    ``stages_s`` are mean seconds per stage (``STAGES`` keys), ``wall_s`` the mean wall
    time. Data wait and copies are judged against the training step (their sum over the
    five step stages), everything else against wall time.
    """
    ctx = ctx or {}
    if not stages_s or not wall_s or wall_s <= 0:
        return []
    step_total = sum(stages_s.get(s, 0.0) for s in STEP_STAGES)
    named = [s for s in STAGES if s in stages_s]
    if not named:  # only stages this version does not know: nothing to rank
        return []
    biggest = max(named, key=lambda s: stages_s[s])
    out = [Finding(biggest, stages_s[biggest] / wall_s, "wall", "")]
    out[0].text = "Biggest stage: " + _suggest(biggest, out[0].share, "wall", ctx)

    def rule(stage: str, share: float, of: str, limit: float) -> None:
        if share > limit and stage != biggest:
            text = _suggest(stage, share, of, ctx)
            out.append(Finding(stage, share, of, f"Above {_pct(limit)}: {text}"))

    if step_total > 0:
        rule("data_wait", stages_s.get("data_wait", 0.0) / step_total, "step", DATA_WAIT_STEP_SHARE)
        rule("h2d", stages_s.get("h2d", 0.0) / step_total, "step", H2D_STEP_SHARE)
        rule("comm", stages_s.get("comm", 0.0) / step_total, "step", COMM_STEP_SHARE)
    rule("evaluation", stages_s.get("evaluation", 0.0) / wall_s, "wall", EVALUATION_WALL_SHARE)
    rule("setup", stages_s.get("setup", 0.0) / wall_s, "wall", SETUP_WALL_SHARE)
    rule("other", stages_s.get("other", 0.0) / wall_s, "wall", OTHER_WALL_SHARE)
    return out
