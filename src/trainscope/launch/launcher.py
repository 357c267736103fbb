"""Launching: one process in-process, several through torchrun (``torch.distributed.run``).

``trainscope run --nproc N`` re-runs itself under torchrun: the resolved config goes to a
temporary YAML file and every worker runs ``trainscope run --config FILE``, started as a
fresh interpreter that imports trainscope exactly as the console script does (never
``python -m`` from the current directory).
The same command also works when the user starts it with ``torchrun`` directly; a worker
knows it was launched from torchrun's environment variables and never launches again.
``trainscope collectives`` starts its workers the same way (:func:`launch_command`).

Everything that can be refused without starting a process is refused here first: nccl
without CUDA, more GPU ranks than GPUs on this node.

Whether a run goes to processes of its own or runs in this one is decided in one place,
:func:`run_or_launch`: the CLI (``trainscope run``), the Python API (``trainscope.run``)
and studies (through :func:`run_any`) all call it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from trainscope import registry
from trainscope.config import USER_OMP_ENV, DistConfig, RunConfig
from trainscope.errors import ConfigError, DeviceError, Terminated, TrainscopeError
from trainscope.records import launch_outcomes
from trainscope.records.jsonio import try_json_object
from trainscope.runtime.gc_imports import imports_without_gc
from trainscope.runtime.threads import launch_env_load


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
    registry.precheck_strategy(cfg)  # e.g. a pipeline's stages against the model's blocks
    world = cfg.dist.world_size
    splits = registry.STRATEGIES[cfg.dist.strategy].splits_batch
    if splits and cfg.data.batch_size % world:
        # Every multi-process strategy splits the global batch evenly across ranks.
        raise ConfigError(
            f"the global batch size {cfg.data.batch_size} does not split evenly across "
            f"{world} processes: choose a multiple of {world}"
        )


# What every launched Python process runs first: drop the current directory from the
# front of sys.path (where ``python -c`` puts it, like ``python -m``) so that a file such
# as ./yaml.py in the folder where the user runs trainscope is never imported in its
# place; PYTHONSAFEPATH (Python >= 3.11) does the same before the interpreter starts.
_BOOT = "import sys\nif sys.path and sys.path[0] in ('', '.'):\n    del sys.path[0]\n{body}"
WORKER_CODE = _BOOT.format(
    body="from trainscope.runtime.signals import die_with_parent\n"
    "die_with_parent()\n"
    "from trainscope.cli import main\n"
    "sys.exit(main())\n"
)
AGENT_CODE = _BOOT.format(body="from trainscope.launch.agent import main\nsys.exit(main())\n")


def worker_argv(config_file: Path, extra: list[str]) -> list[str]:
    """``trainscope run --config FILE`` as a launched process runs it."""
    return [sys.executable, "-c", WORKER_CODE, "run", "--config", str(config_file), *extra]


def torchrun_argv(cfg: RunConfig, config_file: Path, extra: list[str]) -> list[str]:
    """The torchrun command line for ``cfg``'s launch settings."""
    return agent_argv(cfg.dist, worker_argv(config_file, extra))


def agent_argv(d: DistConfig, worker: list[str]) -> list[str]:
    """The torchrun command line that starts ``worker`` (a :func:`worker_argv`-like
    command) in each of ``d``'s processes."""
    from trainscope.runtime.dist import free_port

    argv = [sys.executable, "-c", AGENT_CODE, f"--nproc-per-node={d.nproc}"]
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
    if d.max_restarts:
        # torchrun stops every worker when one fails and starts them all again; they find
        # their run directory and resume from its last checkpoint (train.run).
        argv += [f"--max-restarts={d.max_restarts}"]
    # --no-python: each worker is the interpreter started exactly as worker_argv says,
    # not ``python -m`` (which would put the current directory first on sys.path).
    argv += ["--no-python", "--", *worker]
    return argv


def launch_env(launch_dir: str) -> dict[str, str]:
    """The environment of launched processes: safe sys.path, the parent to die with, and
    the folder where each writes how it ended."""
    env = dict(os.environ)
    env["PYTHONSAFEPATH"] = "1"
    env["TRAINSCOPE_PARENT_PID"] = str(os.getpid())
    env["TRAINSCOPE_LAUNCH_DIR"] = launch_dir
    # torchrun sets OMP_NUM_THREADS=1 in workers where it is unset: what the user set (or
    # nothing) goes along, so --threads auto shares out the cores instead (runtime.threads).
    env[USER_OMP_ENV] = os.environ.get("OMP_NUM_THREADS", "")
    return env


def launch(
    cfg: RunConfig, extra_args: list[str] | None = None, *, torchrun: bool = True
) -> launch_outcomes.LaunchResult:
    """Start ``cfg``'s processes through torchrun (or, with ``torchrun=False``, one plain
    ``trainscope run`` process) and wait.

    The processes print no error of their own: each leaves how it ended in a private
    launch folder, and the result carries one line built from those (the earliest real
    failure, not the ranks that were stopped because of it). If this process is told to
    stop (Ctrl-C, SIGTERM, ...), it passes the signal on, waits for the processes to
    record their end, and re-raises; nothing it started outlives it.
    """
    if torchrun:
        check_launch(cfg)
    with tempfile.TemporaryDirectory(prefix="trainscope-launch-") as tmp:
        path = Path(tmp) / "config.yaml"
        # Where to write and whether to replace it go on the workers' command line, as the
        # user gave them: a config file never switches deletion on (see cli.py).
        path.write_text(
            yaml.safe_dump(
                {**cfg.to_dict(), "out": None, "overwrite": False, "resume": False}, sort_keys=False
            )
        )
        where = ["--resume", cfg.out] if cfg.resume else ["--out", cfg.out] if cfg.out else []
        extra = [*where, *(["--overwrite"] * cfg.overwrite)]
        extra += list(extra_args or [])
        argv = torchrun_argv(cfg, path, extra) if torchrun else worker_argv(path, extra)
        # Each worker sets its own threads (--threads; auto: the cores shared out among
        # the node's processes), whatever OMP_NUM_THREADS torchrun gave it.
        env = launch_env(tmp)
        if torchrun and cfg.runtime.threads == "auto":
            # Measured once here, before the ranks start: side by side they would each
            # count the others' start-up as other load (runtime.threads).
            env |= launch_env_load()
        code = _wait(subprocess.Popen(argv, env=env, start_new_session=True))
        return launch_outcomes.conclude(Path(tmp), code)


def launch_command(d: DistConfig, args: list[str]) -> launch_outcomes.LaunchResult:
    """Start ``trainscope ARGS`` in each of ``d``'s processes through torchrun and wait,
    as :func:`launch` does (one line for a failure; a signal passed on, waited for and
    re-raised). A command other than ``run`` checks what it needs before calling this."""
    with tempfile.TemporaryDirectory(prefix="trainscope-launch-") as tmp:
        argv = agent_argv(d, [sys.executable, "-c", WORKER_CODE, *args])
        code = _wait(subprocess.Popen(argv, env=launch_env(tmp), start_new_session=True))
        return launch_outcomes.conclude(Path(tmp), code)


# Seconds to wait for launched processes to record their end after a signal; torchrun
# itself gives its workers 30 s before it kills them.
STOP_GRACE_S = 40.0


def _wait(proc: subprocess.Popen) -> int:
    """Wait for ``proc``; on Ctrl-C or a signal, pass it on, wait, re-raise."""
    try:
        return proc.wait()
    except BaseException as e:
        sig = e.signum if isinstance(e, Terminated) else signal.SIGINT
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(sig)
        try:
            proc.wait(timeout=STOP_GRACE_S)
        except BaseException:  # still running, or a second Ctrl-C: no more waiting
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        raise


@dataclass
class RunOutcome:
    """How :func:`run_or_launch` ended."""

    code: int
    """The exit status: a launch's, or 0/1 for a run in this process (completed or not)."""
    summary: dict[str, Any] | None
    """The run's summary: returned by a run in this process, read back from the run
    directory after a launch (None where there is none to read)."""
    error: str | None = None
    """A failed launch: one line saying why (a run in this process raises instead)."""
    launched: bool = False
    """Whether the run went to processes of its own."""


def run_or_launch(
    cfg: RunConfig,
    console: Any = None,
    *,
    fresh_process: bool = False,
    extra_args: list[str] | None = None,
    own_process: bool = False,
) -> RunOutcome:
    """Run ``cfg`` in this process, or launch it when it needs several processes (through
    torchrun) or, with ``fresh_process``, a process of its own even for one (so that its
    peak memory and start-up are its own: studies that compare memory need that). The
    one place that decides; the CLI, the Python API and studies (:func:`run_any`) call it.

    ``console`` shows a run in this process; ``extra_args`` go on the launched processes'
    command line (``--quiet``, ``--no-progress``); ``own_process``: the caller owns the
    process (the command line), so its first imports may freeze the collector's
    objects. A run in this process that fails raises (after recording it); a launch that
    fails returns its code and one line why."""
    # The command line owns its process: its first imports (torch, the trainer) run
    # with the collector paused, then frozen (runtime.gc_imports). A library caller's
    # process (a notebook) is left as it is.
    with imports_without_gc() if own_process else contextlib.nullcontext():
        torchrun = needs_launch(cfg)
        if not torchrun and not fresh_process:
            from trainscope.train.run import run
    if not torchrun and not fresh_process:
        summary = run(cfg, console)
        return RunOutcome(0 if summary.get("status") == "completed" else 1, summary)
    result = launch(cfg, extra_args, torchrun=torchrun)
    run_dir = Path(cfg.out) if cfg.out is not None else result.run_dir
    summary = try_json_object(run_dir / "summary.json") if run_dir is not None else None
    return RunOutcome(result.code, summary, result.error, launched=True)


def run_any(cfg: RunConfig, console: Any = None, *, fresh_process: bool = False) -> dict[str, Any]:
    """Run ``cfg`` (see :func:`run_or_launch`) and return its summary; a launched run that
    did not complete raises. A launched run needs an explicit out directory."""
    if cfg.out is None and (fresh_process or needs_launch(cfg)):
        raise TrainscopeError("a launched run needs an explicit out directory")
    outcome = run_or_launch(
        cfg, console, fresh_process=fresh_process, extra_args=["--quiet", "--no-progress"]
    )
    summary = outcome.summary
    if not outcome.launched:
        assert summary is not None
        return summary
    if outcome.code != 0 or summary is None or summary.get("status") != "completed":
        raise TrainscopeError(
            f"the launched run failed (exit {outcome.code}): {outcome.error or 'see its output'}"
        )
    return summary
