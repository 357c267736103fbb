"""How much one collective call's time varies here: 2 gloo processes, the same all_reduce
repeated, in rounds (torch only; no trainscope code is timed):

    python benchmarks/gloo_call_noise.py
    python benchmarks/gloo_call_noise.py --calls 200 --rounds 3

Per round and message size, ``--calls`` calls each after a barrier (the first tenth
untimed), rank 0's perf_counter around the call; printed: the mean and the median per
call and the share of calls above twice the median. Also the hand-written bucketed sync
of LeNet-on-digits' 10 gradients (cat, all_reduce, divide, copy back), as
``--strategy allreduce --bucket-mb 25`` runs it. If the means of the same case differ
between rounds by more than a model's error budget, a prediction of a single call cannot
be checked to that budget on this machine.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

LENET_DIGITS = [216, 24, 3456, 64, 30720, 480, 40320, 336, 3360, 40]  # gradient bytes


def _timed(calls: int, fn) -> list[float]:  # noqa: ANN001
    times = []
    for _ in range(calls):
        dist.barrier()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return times[calls // 10 :]


def _bucketed(grads: list[torch.Tensor]) -> None:
    flat = torch.cat([g.reshape(-1) for g in reversed(grads)])
    dist.all_reduce(flat)
    flat.div_(2)
    offset = 0
    for g in reversed(grads):
        g.copy_(flat[offset : offset + g.numel()].view_as(g))
        offset += g.numel()


def _work(rank: int, port: int, calls: int, rounds: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)  # as torchrun gives each worker
    dist.init_process_group("gloo", rank=rank, world_size=2)
    grads = [torch.randn(n // 4) for n in LENET_DIGITS]
    cases = {
        "all_reduce 1K": torch.randn(256),
        "all_reduce 64K": torch.randn(16384),
        f"all_reduce {sum(LENET_DIGITS)} B": torch.randn(sum(LENET_DIGITS) // 4),
    }
    rows = []
    for r in range(1, rounds + 1):
        for name, t in cases.items():
            rows.append((r, name, _timed(calls, lambda t=t: dist.all_reduce(t))))
        rows.append((r, "bucketed sync (10 tensors)", _timed(calls, lambda: _bucketed(grads))))
    if rank == 0:
        print(f"{'round':>5}  {'case':<28} {'mean ms':>8} {'median ms':>10} {'> 2x median':>12}")
        for r, name, ts in rows:
            med = statistics.median(ts)
            slow = sum(t > 2 * med for t in ts) / len(ts)
            print(f"{r:>5}  {name:<28} {1e3 * statistics.mean(ts):>8.2f} {1e3 * med:>10.2f} "
                  f"{slow:>11.0%}")  # fmt: skip
    dist.destroy_process_group()


def main() -> None:
    """Spawn the two processes and print the table."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    from trainscope.runtime.dist import free_port

    mp.spawn(_work, args=(free_port(), args.calls, args.rounds), nprocs=2)


if __name__ == "__main__":
    main()
