"""The seed's 4-GPU BERT-base table (gather/scatter 3.73 s/it, all_reduce 0.84, DDP 0.44)
against the α–β model: what the model predicts on named interconnects, and what single
link would have to be behind the measured gaps (torch-free, nothing is run):

    python benchmarks/seed_case.py
    python benchmarks/seed_case.py --world 4 --latency-us 5

The three strategies compute the same forward and backward, so the *differences* of
their times per iteration are communication (and what DDP hides behind backward):

- gather-scatter - allreduce, both after backward, is the model's
  (2(n-1) - 2(n-1)/n)·G/B plus latency terms: it gives the bandwidth B that gap implies;
- allreduce - DDP is at most allreduce's whole communication (DDP hiding all of it):
  the gap gives the *highest* bandwidth at which that much saving is possible.

If the two bandwidths disagree, no single link explains the table.
"""

from __future__ import annotations

import argparse

from trainscope.collectives.predict_cli import INTERCONNECTS
from trainscope.comm.cost_model import given, terms
from trainscope.comm.predict import GradTensors, predict
from trainscope.estimate.archs import named
from trainscope.estimate.tensors import tensor_numels

SEED = {"gather-scatter": 3.73, "allreduce": 0.84, "ddp": 0.44}  # s/it, 4 GPUs, BERT-base


def bert_base() -> GradTensors:
    """BERT-base's fp32 gradients, tensor by tensor."""
    flat, units = tensor_numels(named("bert-base"))
    return GradTensors("bert-base", tuple(4 * t for t in flat), tuple(4 * sum(u) for u in units))


def implied(grads: GradTensors, n: int, alpha: float) -> tuple[float, float]:
    """(GB/s behind gather-scatter - allreduce, the highest GB/s at which allreduce - ddp
    is possible), from the seed's times."""
    k = len(grads.sizes)
    g = grads.total
    lat_gs = 2 * k * terms("gather", n)[0] * alpha
    lat_ar = k * terms("all_reduce", n)[0] * alpha
    bytes_gs = 2 * terms("gather", n)[1] * g  # gather + scatter, flat at the root
    bytes_ar = terms("all_reduce", n)[1] * g
    gap1 = SEED["gather-scatter"] - SEED["allreduce"] - (lat_gs - lat_ar)
    gap2 = SEED["allreduce"] - SEED["ddp"] - lat_ar
    return (bytes_gs - bytes_ar) / gap1 / 1e9, bytes_ar / gap2 / 1e9


def main() -> None:
    """Print the predictions and the implied bandwidths."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--world", type=int, default=4)
    ap.add_argument("--latency-us", type=float, default=5.0)
    args = ap.parse_args()
    grads, n = bert_base(), args.world
    print(f"BERT-base: {sum(grads.sizes) / 4 / 1e6:.1f}M parameters, {len(grads.sizes)} tensors, "
          f"{grads.total / 1e6:.0f} MB of fp32 gradients; {n} ranks")  # fmt: skip
    print("\nPredicted communication per step (ms), no overlap:")
    names = ("gather-scatter", "allreduce", "ddp")
    print(f"{'link (per direction, latency)':<32}" + "".join(f"{s:>16}" for s in names))
    for key, (bw, lat, _) in INTERCONNECTS.items():
        preds = {p.strategy: p for p in predict(grads, n, given(lat, bw, n), strategies=names)}
        label = f"{key} ({bw:g} GB/s, {lat * 1e6:g} us)"
        print(f"{label:<32}" + "".join(f"{preds[s].comm_s * 1e3:>16.1f}" for s in names))
    print("\nThe seed measured (s/it): " + ", ".join(f"{k} {v}" for k, v in SEED.items()))
    b1, b2 = implied(grads, n, args.latency_us * 1e-6)
    print(f"gather-scatter - allreduce = {SEED['gather-scatter'] - SEED['allreduce']:.2f} s "
          f"implies a link of {b1:.2f} GB/s")  # fmt: skip
    print(f"allreduce - ddp = {SEED['allreduce'] - SEED['ddp']:.2f} s is possible only "
          f"below {b2:.2f} GB/s (DDP hiding all of allreduce's communication)")  # fmt: skip
    at_b1 = predict(grads, n, given(args.latency_us * 1e-6, b1, n), strategies=["allreduce"])
    whole = SEED["allreduce"]
    print(f"at {b1:.2f} GB/s the model's allreduce communication alone is "
          f"{at_b1[0].comm_s:.2f} s, against the seed's whole {whole} s iteration")  # fmt: skip


if __name__ == "__main__":
    main()
