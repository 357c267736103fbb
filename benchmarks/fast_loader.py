"""Fast input path vs DataLoader: one data-only epoch of MNIST-shaped data with augmentation.

Both sides produce the same batches of model-ready tensors: uint8 28x28 images scaled to
[0, 1], random affine (rotation, translation, scale), normalised. The DataLoader side is
the usual recipe, ``DataLoader(num_workers=0)`` over a data set whose ``__getitem__``
transforms one image at a time; the fast side keeps the images on the device and
augments whole batches (``trainscope.data.fast.FastLoader``).

Each measurement is a separate process (``--one fast|torch``), the two kinds alternate,
and the script reports medians and the ratio of medians; run it with nothing else busy:

    python benchmarks/fast_loader.py --runs 5
    python benchmarks/fast_loader.py --runs 5 --device cuda      # where a GPU is present
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time


def one_epoch(kind: str, samples: int, batch_size: int, device: str, threads: int) -> dict:
    """Build the data, then time one full data-only epoch (every batch on the device)."""
    import torch
    from torch.utils.data import DataLoader

    from trainscope.data.augment import RandomAffine
    from trainscope.data.fast import FastLoader
    from trainscope.workloads.builtin import MNIST_MEAN, MNIST_STD, ImageSet

    if threads:
        torch.set_num_threads(threads)
    dev = torch.device(device)
    g = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (samples, 1, 28, 28), dtype=torch.uint8, generator=g)
    labels = torch.randint(0, 10, (samples,), generator=g)
    data = ImageSet(images, labels, RandomAffine(), scale=255.0, mean=MNIST_MEAN, std=MNIST_STD)
    if kind == "fast":
        loader = FastLoader(data.in_memory(), batch_size, dev, shuffle=True, seed=0)
    else:
        loader = DataLoader(
            data,
            batch_size=batch_size,
            shuffle=True,
            num_workers=0,
            generator=torch.Generator().manual_seed(0),
        )

    def sync() -> None:
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)

    # One short warm-up pass over a few batches (first-call allocations, kernels).
    for i, (x, _) in enumerate(loader):
        x.to(dev)
        if i == 3:
            break
    sync()
    t0 = time.perf_counter()
    n = 0
    for x, y in loader:
        x = x.to(dev, non_blocking=True)
        y = y.to(dev, non_blocking=True)
        n += y.shape[0]
    sync()
    seconds = time.perf_counter() - t0
    return {"kind": kind, "epoch_s": seconds, "samples": n, "device": str(dev)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5, help="measurements of each kind")
    ap.add_argument("--samples", type=int, default=55000, help="images per epoch (MNIST: 55k)")
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--one", choices=["fast", "torch"], help=argparse.SUPPRESS)
    ap.add_argument("--json", action="store_true", help="print the raw results as JSON")
    args = ap.parse_args()
    if args.one:
        res = one_epoch(args.one, args.samples, args.batch_size, args.device, args.threads)
        print(json.dumps(res))
        return
    results: dict[str, list[float]] = {"torch": [], "fast": []}
    for i in range(args.runs):
        for kind in ("torch", "fast") if i % 2 == 0 else ("fast", "torch"):
            cmd = [
                sys.executable,
                __file__,
                "--one",
                kind,
                "--samples",
                str(args.samples),
                "--batch-size",
                str(args.batch_size),
                "--device",
                args.device,
                "--threads",
                str(args.threads),
            ]
            out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
            res = json.loads(out.strip().splitlines()[-1])
            results[kind].append(res["epoch_s"])
            print(f"run {i + 1} {kind:5s}: {res['epoch_s']:.3f} s/epoch", file=sys.stderr)
    med = {k: statistics.median(v) for k, v in results.items()}
    print(
        f"{args.samples} MNIST-shaped images, batch {args.batch_size}, random affine, "
        f"device {args.device}, {args.runs} runs each (separate processes, alternating):"
    )
    for k in ("torch", "fast"):
        vals = ", ".join(f"{v:.3f}" for v in results[k])
        label = "DataLoader(num_workers=0), per-sample" if k == "torch" else "fast path, batched"
        print(f"  {label:40s} median {med[k]:.3f} s/epoch  [{vals}]")
    from trainscope.util.spread import differ, no_difference_text, spread

    torch_s, fast_s = spread(results["torch"]), spread(results["fast"])
    if differ(torch_s, fast_s):  # a ratio only where the min–max ranges do not overlap
        ratio = med["torch"] / med["fast"]
        print(f"  data-only speed-up (median DataLoader / median fast): {ratio:.1f}x")
    else:
        print(f"  data-only speed-up: {no_difference_text(torch_s, fast_s)}")
    if args.json:
        print(json.dumps({"results": results, "median": med}))


if __name__ == "__main__":
    main()
