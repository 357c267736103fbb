"""A folder with the MNIST test set alone (as in ../shared/data/mnist): refused at once with
the command that makes a split, and ``trainscope data mnist-split`` making it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import shared_mnist_dir
from tests.data.test_mnist_files import write_fake_mnist
from trainscope.cli import main
from trainscope.data.idx import read_idx
from trainscope.data.mnist_files import find_mnist_files

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def test_only(tmp_path: Path) -> Path:
    """An MNIST folder holding the two t10k files only (60 images)."""
    root = tmp_path / "mnist"
    write_fake_mnist(root, n_test=60)
    for name in ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"):
        (root / name).unlink()
    return root


def test_a_test_only_folder_is_refused_before_the_run_folder_and_torch(
    test_only: Path, tmp_path: Path
) -> None:
    """`run --workload mnist --data-dir` of the test files alone: one line naming the
    command that makes a training split, no run folder, and torch never imported."""
    out = tmp_path / "run"
    code = (
        "import sys\n"
        "from trainscope.cli import main\n"
        f"rc = main(['run', '--workload', 'mnist', '--data-dir', {str(test_only)!r}, "
        f"'--out', {str(out)!r}])\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
        "sys.exit(rc)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert "holds the test set only" in line
    assert f"trainscope data mnist-split {test_only} DIR" in line
    assert not out.exists()


def test_mnist_split_writes_a_folder_the_mnist_workload_reads(
    test_only: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dst = tmp_path / "split"
    assert main(["data", "mnist-split", str(test_only), str(dst), "--train", "45"]) == 0
    assert "45 training and 15 test images" in capsys.readouterr().out
    paths = find_mnist_files(dst)
    images = read_idx(test_only / "t10k-images-idx3-ubyte.gz")
    assert np.array_equal(read_idx(paths["train"][0]), images[:45])
    assert np.array_equal(read_idx(paths["test"][0]), images[45:])
    assert len(read_idx(paths["train"][1])) == 45
    # Never over files already there; a bad --train is one line.
    assert main(["data", "mnist-split", str(test_only), str(dst), "--train", "45"]) == 1
    assert "already holds" in capsys.readouterr().err
    assert main(["data", "mnist-split", str(test_only), str(tmp_path / "x"), "--train", "0"]) == 2
    assert "--train must be in 1..59" in capsys.readouterr().err
    assert main(["data", "mnist-split", str(tmp_path / "none"), str(tmp_path / "y")]) == 1
    assert "does not exist" in capsys.readouterr().err


def test_the_split_of_the_shared_test_set(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    src = shared_mnist_dir()  # skips where ../shared/data/mnist is absent
    assert main(["data", "mnist-split", str(src), str(tmp_path / "m")]) == 0
    assert "8,000 training and 2,000 test images" in capsys.readouterr().out
