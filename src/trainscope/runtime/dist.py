"""Process groups: who this process is (a :class:`DistInfo` value), set-up and tear-down.

A run is distributed when torchrun started it (``RANK``/``WORLD_SIZE``... in the
environment) or when a multi-process strategy runs alone (``--strategy ddp`` with one
process: a world of one, so the wrapper's own cost can be measured next to ``single``).
Nothing here is global state: the :class:`DistInfo` value is passed to whoever needs it.
"""

from __future__ import annotations

import os
import re
import socket
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch

from trainscope.errors import DeviceError, TrainscopeError
from trainscope.runtime.scheduler import claimed_world

TORCHRUN_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


@dataclass(frozen=True)
class DistInfo:
    """This process's place in the job."""

    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    local_world_size: int = 1
    backend: str | None = None
    """The process group's backend, None when no group was made."""

    @property
    def distributed(self) -> bool:
        """A process group exists (even a world of one)."""
        return self.backend is not None

    @property
    def is_main(self) -> bool:
        """Rank 0: the process that writes the run record."""
        return self.rank == 0


def under_torchrun() -> bool:
    """True when torchrun (or another launcher setting its variables) started us."""
    return all(v in os.environ for v in ("RANK", "WORLD_SIZE", "LOCAL_RANK"))


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (for one-node rendezvous)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def choose_backend(requested: str, device_type: str) -> str:
    """nccl on CUDA, gloo on CPU, unless asked otherwise; nccl without CUDA is an error."""
    if requested == "auto":
        return "nccl" if device_type == "cuda" else "gloo"
    if requested == "nccl" and (device_type != "cuda" or not torch.cuda.is_available()):
        raise DeviceError("backend nccl needs CUDA GPUs; use gloo (or auto) on CPU")
    return requested


def init_distributed(backend_request: str, device_type: str, timeout_s: float) -> DistInfo:
    """Join the process group torchrun set up, or make a world of one on 127.0.0.1.

    Ranks that the variables claim but that never come (one ``srun`` task where
    SLURM_NTASKS says two, a RANK/WORLD_SIZE pair whose other ranks were never started)
    are one line naming them and the variables, not torch's store timeout."""
    import torch.distributed as dist

    backend = choose_backend(backend_request, device_type)
    timeout = timedelta(seconds=timeout_s)
    if under_torchrun():
        _wait_for_rank0(timeout_s)
        try:
            _join(backend, timeout)
        except dist.DistError as e:
            missing = _never_joined(e, timeout_s)
            if missing is None:
                raise
            raise missing from e
        env = os.environ
        return DistInfo(
            rank=dist.get_rank(),
            local_rank=int(env["LOCAL_RANK"]),
            world_size=dist.get_world_size(),
            local_world_size=int(env.get("LOCAL_WORLD_SIZE", env["WORLD_SIZE"])),
            backend=backend,
        )
    dist.init_process_group(
        backend=backend,
        init_method=f"tcp://127.0.0.1:{free_port()}",
        rank=0,
        world_size=1,
        timeout=timeout,
    )
    return DistInfo(backend=backend)


def _join(backend: str, timeout: timedelta) -> None:
    """``init_process_group`` from torchrun's variables (``env://``)."""
    import torch.distributed as dist

    restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT") or 0)
    if not restart:
        dist.init_process_group(backend=backend, timeout=timeout)
        return
    # torchrun keeps one store across restarts (its agent's): without a prefix of their
    # own, ranks of a restarted attempt may read the dead attempt's gloo addresses before
    # the new ones are written (seen: "Connection refused").
    from torch.distributed.rendezvous import rendezvous

    store, rank, world = next(rendezvous("env://", timeout=timeout))
    store = dist.PrefixStore(f"trainscope/attempt-{restart}", store)
    dist.init_process_group(
        backend=backend, store=store, rank=rank, world_size=world, timeout=timeout
    )


# Seconds between a waiting rank's attempts to reach rank 0's store.
_KNOCK_S = 0.2


def _wait_for_rank0(timeout_s: float) -> None:
    """A rank other than 0: wait (up to the timeout) until something listens where rank 0
    hosts the store, or say in one line that rank 0 never came. Knocked with a plain
    socket first, because torch's own client logs a multi-line C++ report on each try."""
    env = os.environ
    if env.get("RANK") in (None, "0") or not env.get("MASTER_PORT", "").isdigit():
        return
    addr, port = env.get("MASTER_ADDR") or "127.0.0.1", int(env["MASTER_PORT"])
    deadline = time.monotonic() + timeout_s
    while True:
        left = deadline - time.monotonic()
        try:
            with socket.create_connection((addr, port), timeout=max(0.1, min(1.0, left))):
                return
        except OSError:
            if left <= 0:
                break
            time.sleep(min(_KNOCK_S, max(0.0, left)))
    raise TrainscopeError(
        f"rank 0 of {env.get('WORLD_SIZE', '?')[:12]} never joined within {timeout_s:g} s "
        f"(nothing answered at {addr[:80]}:{port}): {claimed_world(env)}; start every rank, "
        "or correct the variables"
    )


def _never_joined(e: BaseException, timeout_s: float) -> TrainscopeError | None:
    """Rank 0's store timed out waiting for the others: which never came, in one line
    (None for any other failure to form the group)."""
    m = re.search(r"(\d+)/(\d+) clients joined", str(e))
    if m is None:
        return None
    joined, world = int(m[1]), int(m[2])
    if joined == 1:  # only rank 0 itself: every other rank is missing
        who = "rank 1" if world == 2 else f"ranks 1..{world - 1}"
    else:
        who = f"{world - joined} of ranks 1..{world - 1}"
    return TrainscopeError(
        f"{who} of {world} never joined within {timeout_s:g} s: {claimed_world(os.environ)}, "
        f"but only {joined} came; start one process per rank, or correct the variables"
    )


def destroy_distributed(info: DistInfo) -> None:
    """Leave the process group made by :func:`init_distributed` (no-op without one)."""
    import torch.distributed as dist

    if info.distributed and dist.is_initialized():
        dist.destroy_process_group()


def rank_device(device: torch.device, info: DistInfo) -> torch.device:
    """One GPU per local rank; CPU ranks share the CPU."""
    if device.type != "cuda" or not info.distributed:
        return device
    if info.local_rank >= torch.cuda.device_count():
        raise DeviceError(
            f"local rank {info.local_rank} has no GPU: {torch.cuda.device_count()} GPU(s) here"
        )
    torch.cuda.set_device(info.local_rank)
    return torch.device("cuda", info.local_rank)


def broadcast_object(obj: Any, info: DistInfo) -> Any:
    """Rank 0's ``obj`` on every rank (the object itself without a process group)."""
    if not info.distributed or info.world_size == 1:
        return obj
    import torch.distributed as dist

    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def gather_objects(obj: Any, info: DistInfo) -> list[Any]:
    """Every rank's ``obj``, in rank order, on every rank."""
    if not info.distributed or info.world_size == 1:
        return [obj]
    import torch.distributed as dist

    out: list[Any] = [None] * info.world_size
    dist.all_gather_object(out, obj)
    return out
