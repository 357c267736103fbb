"""DistributedDataParallel: single.py as one process (rank) per device, in step.

Each rank holds the whole model and trains on its slice of every global batch; during
backward() DDP all-reduces (averages) the gradients bucket by bucket, so every rank takes
the same step. No copies of the module per step, no GIL shared by devices. The all-reduce
waits for the slowest rank, so rank 0's step time is the step's time.
"""

import argparse
import hashlib
import json
import os
import socket
import statistics
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=60, help="SGD steps in all (default 60)")
    p.add_argument("--warmup", type=int, default=5, help="first steps not timed (default 5)")
    p.add_argument("--batch-size", type=int, default=256, help="global batch (default 256)")
    p.add_argument("--threads", type=int, default=1, help="torch threads per rank (default 1)")
    p.add_argument("--nproc", type=int, default=2, help="processes to start (default 2)")
    p.add_argument("--json", metavar="PATH", help="write the run's record here (JSON)")
    p.add_argument("--dump-weights", metavar="PATH", help="final weights, raw float32")
    args = p.parse_args()
    if not 0 <= args.warmup < args.steps:
        p.error("--warmup must be at least 0 and less than --steps")
    args.world_size = int(os.environ.get("WORLD_SIZE", args.nproc))  # torchrun sets it
    if args.world_size < 1 or args.batch_size % args.world_size:
        raise SystemExit(f"ddp.py: error: --batch-size must split over {args.world_size} processes")
    return args


def make_batch(step: int, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Global batch `step`: random inputs labelled by a random linear "teacher" (seeded)."""
    teacher = torch.randn(64, 10, generator=torch.Generator().manual_seed(0))
    x = torch.randn(size, 64, generator=torch.Generator().manual_seed(1 + step))
    return x, (x @ teacher).argmax(dim=1)


def clock(device: torch.device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize(device)  # GPU work is asynchronous: wait for it to finish
    return time.perf_counter()


def report(args: argparse.Namespace, record: dict, model: nn.Module) -> None:
    """Print a one-line summary; write the JSON record and the final weights if asked."""
    weights = torch.cat([t.detach().float().cpu().flatten() for t in model.state_dict().values()])
    record["weights_sha256"] = hashlib.sha256(weights.numpy().tobytes()).hexdigest()
    record["weights_l2"] = weights.norm().item()
    print(f"{record['script']}: {record['world_size']} process(es), {record['device']}, "
          f"{1e3 * statistics.median(record['step_times_s']):.2f} ms/step (median), "
          f"loss {record['loss_first']:.4f} -> {record['loss_last']:.4f}")  # fmt: skip
    if args.json:
        with open(f"{args.json}.tmp", "w") as f:
            json.dump(record, f, indent=2, allow_nan=False)
        os.replace(f"{args.json}.tmp", args.json)  # readers never see a half-written file
    if args.dump_weights:
        weights.numpy().tofile(args.dump_weights)  # numpy.fromfile(path, "float32") reads it


def train(rank: int, args: argparse.Namespace) -> None:
    torch.set_num_threads(args.threads)
    local_rank = int(os.environ.get("LOCAL_RANK", rank))  # this rank's GPU on its machine
    device = torch.device(f"cuda:{local_rank}" if torch.cuda.is_available() else "cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    backend = "nccl" if device.type == "cuda" else "gloo"  # meet at MASTER_ADDR:MASTER_PORT
    dist.init_process_group(backend, rank=rank, world_size=args.world_size)
    torch.manual_seed(0)  # the same initial weights in every script
    layers = [nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10)]
    model = nn.Sequential(*layers).to(device)
    # Broadcasts rank 0's weights, and all-reduces the gradients as backward() makes them.
    model = DDP(model, device_ids=[local_rank] if device.type == "cuda" else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()  # the mean over the batch
    losses, times = [], []
    for step in range(args.steps):
        x, y = make_batch(step, args.batch_size)
        x, y = x.chunk(args.world_size)[rank], y.chunk(args.world_size)[rank]  # its share
        start = clock(device)
        x, y = x.to(device), y.to(device)
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        if step >= args.warmup:
            times.append(clock(device) - start)
        losses.append(loss.detach())
    first_last = torch.stack([losses[0], losses[-1]])
    dist.all_reduce(first_last)  # the global batch's loss: the mean of the ranks' losses
    first_last /= args.world_size
    record = {"script": "ddp", "world_size": args.world_size, "device": device.type,
              "torch": torch.__version__, "threads_per_process": args.threads,
              "global_batch": args.batch_size, "steps": args.steps, "warmup": args.warmup,
              "step_times_s": times, "loss_first": first_last[0].item(),
              "loss_last": first_last[1].item()}  # fmt: skip
    if rank == 0:  # every rank holds the same weights: one reports
        report(args, record, model.module)
    del model, optimizer  # DDP's reducer uses the group: let it go before the group does
    dist.barrier()  # no rank leaves the group while another still talks over it
    dist.destroy_process_group()


if __name__ == "__main__":
    args = parse_args()
    if {"RANK", "WORLD_SIZE", "LOCAL_RANK"} <= os.environ.keys():  # started by torchrun
        train(int(os.environ["RANK"]), args)
    else:  # start the ranks here; they meet on a port the OS says is free (bind to port 0)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(s.getsockname()[1]))
        mp.spawn(train, args=(args,), nprocs=args.world_size)
