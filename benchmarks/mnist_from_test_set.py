"""Write an MNIST-format folder from the 10,000-image MNIST test set alone.

The standard training files are large; benchmarks on this project's machines use the
test set (kept in ``../shared/data/mnist``) split into 8,000 training and 2,000 test
images, written under the four standard file names so ``--workload mnist --data-dir``
reads them like the real thing:

    python benchmarks/mnist_from_test_set.py ../shared/data/mnist /tmp/mnist-8k
"""

from __future__ import annotations

import argparse
from pathlib import Path

from trainscope.data.idx import read_idx, write_idx

N_TRAIN = 8000


def main() -> None:
    """Split SRC's t10k files into DST's train (first 8,000) and t10k (last 2,000) files."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("src", type=Path, help="folder with t10k-images/labels-idx*-ubyte(.gz)")
    ap.add_argument("dst", type=Path)
    args = ap.parse_args()
    images = read_idx(args.src / "t10k-images-idx3-ubyte.gz")
    labels = read_idx(args.src / "t10k-labels-idx1-ubyte.gz")
    args.dst.mkdir(parents=True, exist_ok=True)
    for stem, arr in (("images-idx3", images), ("labels-idx1", labels)):
        write_idx(args.dst / f"train-{stem}-ubyte.gz", arr[:N_TRAIN])
        write_idx(args.dst / f"t10k-{stem}-ubyte.gz", arr[N_TRAIN:])
    print(f"wrote {N_TRAIN} training and {len(labels) - N_TRAIN} test images to {args.dst}")


if __name__ == "__main__":
    main()
