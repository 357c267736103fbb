"""Write an MNIST-format folder from the 10,000-image MNIST test set alone.

The standard training files are large; benchmarks on this project's machines use the
test set (kept in ``../shared/data/mnist``) split into 8,000 training and 2,000 test
images, written under the four standard file names so ``--workload mnist --data-dir``
reads them like the real thing. The same as ``trainscope data mnist-split SRC DST``
(:mod:`trainscope.data.mnist_split`), kept for the commands in docs/benchmarks.md:

    python benchmarks/mnist_from_test_set.py ../shared/data/mnist /tmp/mnist-8k
"""

from __future__ import annotations

import argparse
from pathlib import Path

from trainscope.data.mnist_split import N_TRAIN, split_test_set


def main() -> None:
    """Split SRC's t10k files into DST's train (first 8,000) and t10k (last 2,000) files."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("src", type=Path, help="folder with t10k-images/labels-idx*-ubyte(.gz)")
    ap.add_argument("dst", type=Path)
    args = ap.parse_args()
    n_train, n_test = split_test_set(args.src, args.dst, N_TRAIN)
    print(f"wrote {n_train} training and {n_test} test images to {args.dst}")


if __name__ == "__main__":
    main()
