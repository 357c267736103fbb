"""Weights & Biases sink: mirrors a run to W&B, offline unless credentials are configured.

Files go to ``<run_dir>/wandb/`` (``wandb.init(dir=run_dir)``). Without an API key the
run is written offline there and can be uploaded later with ``wandb sync``; nothing in
this module ever needs the network to work.

x-axes: every metric family gets its own step metric via ``define_metric`` and no
``log`` call passes ``step=``. W&B's ``step=`` must only grow; the system sampler logs
from another thread at its own pace, and mixing ``step=`` calls with step-less ones makes
W&B drop rows ("ignoring partial history record", seen with wandb 0.31). With custom
x-axes every row is committed as it comes and charts still plot against the optimizer step
(``train/step``), the epoch (``epoch/epoch``) or seconds since start (``system/elapsed_s``).
"""

from __future__ import annotations

import netrc
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from trainscope.tracking.sink import (
    Sink,
    epoch_scalars,
    flat_summary,
    step_scalars,
    system_scalars,
)
from trainscope.util.textsafe import one_line

DEFAULT_BASE_URL = "https://api.wandb.ai"


def has_credentials(environ: Mapping[str, str] | None = None) -> bool:
    """Whether W&B credentials are configured: WANDB_API_KEY, an identity token, or netrc.

    Reads the environment and the netrc file only, so it is instant, side-effect free and
    never touches the network. (``wandb.api.api_key`` is deprecated in wandb 0.31 and
    ``wandb.login(prompt=False)`` saves settings and may query the server.) A key kept only
    in wandb's own settings file is not seen: set ``WANDB_MODE=online`` in that case.
    """
    env = os.environ if environ is None else environ
    if env.get("WANDB_API_KEY") or env.get("WANDB_IDENTITY_TOKEN_FILE"):
        return True
    host = urlparse(env.get("WANDB_BASE_URL") or DEFAULT_BASE_URL).hostname
    path = env.get("NETRC") or os.path.join(os.path.expanduser("~"), ".netrc")
    if not host or not os.path.isfile(path):
        return False
    try:
        # An explicit path: the stdlib then skips its permission check, as wandb does.
        entry = netrc.netrc(path).authenticators(host)
    except (OSError, netrc.NetrcParseError):
        return False
    return bool(entry and entry[2])


def resolve_mode(environ: Mapping[str, str] | None = None) -> str:
    """``$WANDB_MODE`` when set, else ``online`` with credentials and ``offline`` without."""
    env = os.environ if environ is None else environ
    mode = (env.get("WANDB_MODE") or "").strip()
    if mode:
        return mode
    return "online" if has_credentials(env) else "offline"


class WandbSink(Sink):
    """Logs steps, epochs, system samples and the summary to one W&B run."""

    name = "wandb"
    folder = "wandb"

    def __init__(self, quiet: bool = False) -> None:
        import wandb  # heavy (about 0.5 s): only when this sink is asked for

        self._wandb = wandb
        self.quiet = quiet
        """``-q``: W&B prints nothing (its ``silent`` setting), nor does this sink."""
        self._run: Any = None
        self._t0: float | None = None
        self.mode: str | None = None
        """The mode the run was started in (``online``, ``offline``, ...)."""

    def start(self, run_dir: Path, config: dict[str, Any], summary: dict[str, Any]) -> None:
        """Start the W&B run in ``run_dir/wandb`` and define the x-axes."""
        wandb = self._wandb
        self.mode = resolve_mode()
        self._run = wandb.init(
            project=os.environ.get("WANDB_PROJECT", "trainscope"),
            name=run_dir.name,
            dir=str(run_dir),
            config=config,
            mode=self.mode,
            # A W&B run already active in this process (the user's own, or a sink left
            # over by a failed run) must not be reused: each trainscope run gets its own.
            reinit="create_new",
            settings=wandb.Settings(**self._settings()),
        )
        run = self._run
        for axis, pattern in (
            ("train/step", ("train/*", "stages/*")),
            ("epoch/epoch", ("epoch/*",)),
            ("system/elapsed_s", ("system/*",)),
        ):
            run.define_metric(axis)
            for glob in pattern:
                run.define_metric(glob, step_metric=axis)
        run.summary.update(flat_summary(summary))
        if self.mode == "offline" and not os.environ.get("WANDB_MODE") and not self.quiet:
            where = getattr(run.settings, "sync_dir", None) or run_dir / "wandb"
            print(
                "wandb: no W&B credentials (WANDB_API_KEY or netrc), logging offline; "
                f"upload later with: wandb sync {one_line(where)}",
                file=sys.stderr,
                flush=True,
            )

    def _settings(self) -> dict[str, Any]:
        # console="off": trainscope's progress display would be captured frame by frame,
        # and the run record keeps what matters. Stats off: trainscope samples the system
        # itself (forwarded as system/*), a second sampler would only compete with training.
        settings: dict[str, Any] = {"console": "off"}
        if self.quiet:
            settings["silent"] = True  # no banner, history or summary on the terminal
        if "x_disable_stats" in getattr(self._wandb.Settings, "model_fields", {}):
            settings["x_disable_stats"] = True  # experimental name: only where it exists
        return settings

    def log_steps(self, records: list[dict[str, Any]]) -> None:
        """One W&B row per step: ``train/loss``, ``stages/<stage>_s``, ``train/epoch``."""
        for record in records:
            row: dict[str, Any] = {"train/step": record["step"], **step_scalars(record)}
            if record.get("epoch") is not None:
                row["train/epoch"] = record["epoch"]
            self._run.log(row)

    def log_epoch(self, row: dict[str, Any]) -> None:
        """One W&B row per epoch: ``epoch/train_loss``, ``epoch/val_accuracy``, ..."""
        self._run.log({"epoch/epoch": row["epoch"], **epoch_scalars(row)})

    def log_system(self, sample: dict[str, Any]) -> None:
        """One W&B row per sample: ``system/cpu_percent``, ``system/gpu0_util_percent``, ..."""
        if self._t0 is None:
            self._t0 = sample["t"]
        self._run.log({"system/elapsed_s": sample["t"] - self._t0, **system_scalars(sample)})

    def finish(self, summary: dict[str, Any]) -> None:
        """Write the summary's scalars to the run summary and finish (exit code 1 if failed)."""
        run, self._run = self._run, None
        if run is None:
            return
        run.summary.update(flat_summary(summary))
        run.finish(exit_code=0 if summary.get("status") == "completed" else 1)
