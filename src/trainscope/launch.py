"""Launching: one process in-process, several through torchrun (``torch.distributed.run``).

``trainscope run --nproc N`` re-runs itself under torchrun: the resolved config goes to a
temporary YAML file and every worker runs ``python -m trainscope.cli run --config FILE``.
The same command also works when the user starts it with ``torchrun`` directly; a worker
knows it was launched from torchrun's environment variables and never launches again.

Everything that can be refused without starting a process is refused here first: nccl
without CUDA, more GPU ranks than GPUs on this node.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

from trainscope.config import RunConfig
from trainscope.errors import ConfigError, DeviceError, TrainscopeError


def needs_launch(cfg: RunConfig) -> bool:
    """True when this process must start torchrun rather than train itself."""
    from trainscope.runtime.dist import under_torchrun

    return cfg.dist.world_size > 1 and not under_torchrun()


def check_launch(cfg: RunConfig) -> None:
    """Refuse, before any process starts, what cannot run on this node."""
    import torch

    wants_cuda = cfg.runtime.device.startswith("cuda") or (
        cfg.runtime.device == "auto" and torch.cuda.is_available()
    )
    if cfg.dist.backend == "nccl" and not (wants_cuda and torch.cuda.is_available()):
        raise DeviceError(
            "backend nccl needs CUDA GPUs (and a CUDA device); use --backend gloo on CPU"
        )
    if wants_cuda:
        gpus = torch.cuda.device_count()
        if cfg.dist.nproc > gpus:
            raise DeviceError(
                f"--nproc {cfg.dist.nproc} GPU ranks asked for on this node, but it has "
                f"{gpus} GPU(s); use --nproc {gpus} or --device cpu"
            )
    world = cfg.dist.world_size
    if cfg.data.batch_size % world:
        # Every multi-process strategy splits the global batch evenly across ranks.
        raise ConfigError(
            f"the global batch size {cfg.data.batch_size} does not split evenly across "
            f"{world} processes: choose a multiple of {world}"
        )


def torchrun_argv(cfg: RunConfig, config_file: Path, extra: list[str]) -> list[str]:
    """The torchrun command line for ``cfg``'s launch settings."""
    from trainscope.runtime.dist import free_port

    d = cfg.dist
    argv = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={d.nproc}"]
    if d.nnodes == 1 and d.rdzv_endpoint is None and d.master_port is None:
        # One node: a private rendezvous on a free local port (what --standalone does,
        # without its reliance on a fixed default port).
        argv += ["--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{free_port()}"]
        argv += ["--nnodes=1"]
    elif d.rdzv_endpoint is not None:
        argv += [f"--nnodes={d.nnodes}", "--rdzv-backend=c10d"]
        argv += [f"--rdzv-endpoint={d.rdzv_endpoint}", f"--node-rank={d.node_rank}"]
    else:
        # Static rendezvous: node 0 hosts the store at master_addr:master_port.
        argv += [f"--nnodes={d.nnodes}", f"--node-rank={d.node_rank}"]
        argv += [f"--master-addr={d.master_addr}", f"--master-port={d.master_port}"]
    argv += ["-m", "trainscope.cli", "run", "--config", str(config_file), *extra]
    return argv


def launch(cfg: RunConfig, extra: list[str] | None = None, *, torchrun: bool = True) -> int:
    """Start ``cfg``'s processes through torchrun (or, with ``torchrun=False``, one plain
    ``trainscope run`` process) and wait; returns the exit code."""
    if torchrun:
        check_launch(cfg)
    with tempfile.TemporaryDirectory(prefix="trainscope-launch-") as tmp:
        path = Path(tmp) / "config.yaml"
        path.write_text(yaml.safe_dump(cfg.to_dict(), sort_keys=False))
        if torchrun:
            argv = torchrun_argv(cfg, path, list(extra or []))
        else:
            argv = [sys.executable, "-m", "trainscope.cli", "run", "--config", str(path)]
            argv += list(extra or [])
        # torchrun sets OMP_NUM_THREADS=1 in each worker unless it is already set: N
        # workers of many threads each would oversubscribe the CPU cores.
        return subprocess.run(argv, env=dict(os.environ), check=False).returncode


def run_any(cfg: RunConfig, console: Any = None, *, fresh_process: bool = False) -> dict[str, Any]:
    """Run ``cfg`` and return its summary: in this process, or through torchrun when it
    needs several processes. ``fresh_process`` runs even a one-process configuration in a
    process of its own, so that its peak memory and start-up are its own (studies that
    compare memory across strategies need that). After a launch the summary is read back
    from the run directory."""
    if not needs_launch(cfg) and not fresh_process:
        from trainscope.train.run import run

        return run(cfg, console)
    if cfg.out is None:
        raise TrainscopeError("a launched run needs an explicit out directory")
    code = launch(cfg, ["--quiet", "--no-progress"], torchrun=needs_launch(cfg))
    summary_path = Path(cfg.out) / "summary.json"
    try:
        summary = json.loads(summary_path.read_text())
    except (OSError, ValueError):
        raise TrainscopeError(
            f"the launched run exited with {code} and left no summary in {cfg.out}"
        ) from None
    if code != 0 or summary.get("status") != "completed":
        raise TrainscopeError(
            f"the launched run failed (exit {code}): {summary.get('error') or 'see its output'}"
        )
    return summary
