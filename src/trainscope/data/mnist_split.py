"""``trainscope data mnist-split SRC DST``: an MNIST-format training set made from the
10,000-image MNIST test set alone (stdlib + numpy; numpy is imported only when it runs).

Where only the test files are at hand (``t10k-images-idx3-ubyte.gz`` and
``t10k-labels-idx1-ubyte.gz``, as in this project's ``../shared/data/mnist``), the first
``--train`` images (8,000 by default) become the training files and the rest the test
files, under the four standard names, so ``--workload mnist --data-dir DST`` reads them
like the real thing. Figures from such a split are not those of the standard 60k/10k
split: say which was used.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from trainscope.errors import ConfigError, DataError

N_TRAIN = 8000
"""Training images taken from the test set by default (the rest stay test images)."""

HELP = "make an MNIST training split from the test set alone (8,000 train / 2,000 test)"


def split_test_set(src: str | Path, dst: str | Path, n_train: int = N_TRAIN) -> tuple[int, int]:
    """Write DST's train files (the first ``n_train`` test images) and t10k files (the
    rest); returns (train, test) counts. Refuses to replace any file already in DST."""
    from trainscope.data.idx import read_idx, write_idx
    from trainscope.data.mnist_files import SPLITS, find_test_files

    images_path, labels_path = find_test_files(src)
    images, labels = read_idx(images_path), read_idx(labels_path)
    if len(images) != len(labels):
        raise DataError(
            f"{images_path} holds {len(images)} images but {labels_path} {len(labels)} labels"
        )
    if not 1 <= n_train < len(labels):
        raise ConfigError(f"--train must be in 1..{len(labels) - 1}, got {n_train}")
    out = Path(dst).expanduser()
    targets = [out / f"{stem}.gz" for pair in SPLITS.values() for stem in pair]
    taken = [p.name for p in targets if p.exists() or p.with_suffix("").exists()]
    if taken:
        raise DataError(f"{out} already holds {', '.join(taken)}: choose a new folder")
    out.mkdir(parents=True, exist_ok=True)
    (train_img, train_lbl), (test_img, test_lbl) = SPLITS["train"], SPLITS["test"]
    write_idx(out / f"{train_img}.gz", images[:n_train])
    write_idx(out / f"{train_lbl}.gz", labels[:n_train])
    write_idx(out / f"{test_img}.gz", images[n_train:])
    write_idx(out / f"{test_lbl}.gz", labels[n_train:])
    return n_train, len(labels) - n_train


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``data`` (with ``mnist-split``) to a subparsers object; returns its parser."""
    p = subparsers.add_parser(
        "data", help="prepare data sets", description="Prepare data sets for the workloads."
    )
    kinds = p.add_subparsers(dest="data_command", metavar="COMMAND", parser_class=type(p))
    s = kinds.add_parser("mnist-split", help=HELP, description=__doc__.split("\n\n")[1])
    s.add_argument("src", metavar="SRC", help="folder with t10k-images/labels-idx*-ubyte(.gz)")
    s.add_argument("dst", metavar="DST", help="folder to write the four MNIST files to")
    s.add_argument(
        "--train", type=int, default=N_TRAIN, metavar="N", help=f"training images ({N_TRAIN})"
    )
    p.set_defaults(handler=main)
    return p


def main(args: argparse.Namespace) -> int:
    """Run ``trainscope data COMMAND``; returns the exit status."""
    if args.data_command != "mnist-split":
        raise ConfigError("data needs a COMMAND: mnist-split")
    n_train, n_test = split_test_set(args.src, args.dst, args.train)
    print(
        f"wrote {n_train:,} training and {n_test:,} test images to {args.dst} "
        f"(from the test set); use --workload mnist --data-dir {args.dst}"
    )
    return 0


__all__ = ["N_TRAIN", "add_parser", "main", "split_test_set"]
