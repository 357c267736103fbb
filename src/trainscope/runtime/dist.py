"""Process groups: who this process is (a :class:`DistInfo` value), set-up and tear-down.

A run is distributed when torchrun started it (``RANK``/``WORLD_SIZE``... in the
environment) or when a multi-process strategy runs alone (``--strategy ddp`` with one
process: a world of one, so the wrapper's own cost can be measured next to ``single``).
Nothing here is global state: the :class:`DistInfo` value is passed to whoever needs it.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch

from trainscope.errors import DeviceError

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
    """Join the process group torchrun set up, or make a world of one on 127.0.0.1."""
    import torch.distributed as dist

    backend = choose_backend(backend_request, device_type)
    timeout = timedelta(seconds=timeout_s)
    if under_torchrun():
        restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT") or 0)
        if restart:
            # torchrun keeps one store across restarts (its agent's): without a prefix of
            # their own, ranks of a restarted attempt may read the dead attempt's gloo
            # addresses before the new ones are written (seen: "Connection refused").
            from torch.distributed.rendezvous import rendezvous

            store, rank, world = next(rendezvous("env://", timeout=timeout))
            store = dist.PrefixStore(f"trainscope/attempt-{restart}", store)
            dist.init_process_group(
                backend=backend, store=store, rank=rank, world_size=world, timeout=timeout
            )
        else:
            dist.init_process_group(backend=backend, timeout=timeout)
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
