"""DataParallel: single.py plus one wrapper; one process drives every visible GPU.

Every step nn.DataParallel copies (replicates) the module from GPU 0 to the other GPUs,
scatters the inputs, runs the replicas in threads of this one process (sharing its GIL),
gathers the outputs on GPU 0 for the loss and sums the gradients back there, where the
optimizer runs: GPU 0 works more than the others and the copies are paid every step.
"""

import argparse
import hashlib
import json
import os
import statistics
import time

import torch
from torch import nn


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=60, help="SGD steps in all (default 60)")
    p.add_argument("--warmup", type=int, default=5, help="first steps not timed (default 5)")
    p.add_argument("--batch-size", type=int, default=256, help="global batch (default 256)")
    p.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    p.add_argument("--json", metavar="PATH", help="write the run's record here (JSON)")
    p.add_argument("--dump-weights", metavar="PATH", help="final weights, raw float32")
    args = p.parse_args()
    if not 0 <= args.warmup < args.steps:
        p.error("--warmup must be at least 0 and less than --steps")
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


def train(args: argparse.Namespace) -> None:
    torch.set_num_threads(args.threads)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(0)  # the same initial weights in every script
    layers = [nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10)]
    model = nn.Sequential(*layers).to(device)
    # With no GPU visible, DataParallel keeps no device_ids: forward() is model.module(x).
    model = nn.DataParallel(model, device_ids=list(range(torch.cuda.device_count())) or None)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()  # the mean over the batch
    losses, times = [], []
    for step in range(args.steps):
        x, y = make_batch(step, args.batch_size)
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
    record = {"script": "dp", "world_size": 1, "device": device.type,
              "torch": torch.__version__, "threads_per_process": args.threads,
              "global_batch": args.batch_size, "steps": args.steps, "warmup": args.warmup,
              "step_times_s": times, "loss_first": first_last[0].item(),
              "loss_last": first_last[1].item()}  # fmt: skip
    if not model.device_ids:
        record["note"] = "no GPU visible: nn.DataParallel called the module as is, unreplicated"
    report(args, record, model.module)


if __name__ == "__main__":
    train(parse_args())
