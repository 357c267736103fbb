"""Tests for trainscope.data.mnist_files: locating, loading and downloading MNIST.

Downloads go to a local ThreadingHTTPServer on 127.0.0.1, never to the internet.
"""

from __future__ import annotations

import functools
import hashlib
import socket
import threading
from collections import Counter
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import shared_mnist_dir
from trainscope.data import mnist_files
from trainscope.data.idx import read_idx, write_idx
from trainscope.data.mnist_files import (
    FILES,
    download_mnist,
    ensure_mnist,
    find_mnist_files,
    load_mnist_arrays,
    sha256_of,
)
from trainscope.errors import DataError

REPO_ROOT = Path(__file__).resolve().parents[2]
NAMES = list(FILES)  # the four canonical .gz names


def write_fake_mnist(
    root: Path, n_train: int = 50, n_test: int = 20, *, raw: tuple[str, ...] = (), seed: int = 0
) -> None:
    """Write small random MNIST files; names listed in ``raw`` are written uncompressed."""
    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    for prefix, n in (("train", n_train), ("t10k", n_test)):
        for kind, arr in (
            ("images-idx3-ubyte", rng.integers(0, 256, (n, 28, 28), dtype=np.uint8)),
            ("labels-idx1-ubyte", rng.integers(0, 10, n, dtype=np.uint8)),
        ):
            stem = f"{prefix}-{kind}"
            write_idx(root / (stem if stem in raw else f"{stem}.gz"), arr)


# --------------------------------------------------------------------------- find / load


def test_find_and_load_gz_and_raw_mix(tmp_path: Path) -> None:
    write_fake_mnist(tmp_path, raw=("train-labels-idx1-ubyte", "t10k-images-idx3-ubyte"))
    paths = find_mnist_files(tmp_path)
    assert paths["train"] == (
        tmp_path / "train-images-idx3-ubyte.gz",
        tmp_path / "train-labels-idx1-ubyte",
    )
    assert paths["test"] == (
        tmp_path / "t10k-images-idx3-ubyte",
        tmp_path / "t10k-labels-idx1-ubyte.gz",
    )

    train_x, train_y, test_x, test_y = load_mnist_arrays(tmp_path)
    assert train_x.shape == (50, 28, 28) and train_x.dtype == np.uint8
    assert train_y.shape == (50,) and test_x.shape == (20, 28, 28) and test_y.shape == (20,)
    assert int(train_y.max()) <= 9
    np.testing.assert_array_equal(test_x, read_idx(tmp_path / "t10k-images-idx3-ubyte"))


def test_count_mismatch_names_both_files(tmp_path: Path) -> None:
    write_fake_mnist(tmp_path)
    write_idx(tmp_path / "train-labels-idx1-ubyte.gz", np.zeros(49, dtype=np.uint8))
    with pytest.raises(DataError) as exc:
        load_mnist_arrays(tmp_path)
    msg = str(exc.value)
    assert "\n" not in msg
    assert "train-images-idx3-ubyte.gz holds 50 images" in msg
    assert "train-labels-idx1-ubyte.gz holds 49 labels" in msg


def test_labels_out_of_range(tmp_path: Path) -> None:
    write_fake_mnist(tmp_path)
    labels = np.zeros(20, dtype=np.uint8)
    labels[7] = 12
    write_idx(tmp_path / "t10k-labels-idx1-ubyte.gz", labels)
    with pytest.raises(DataError, match=r"t10k-labels-idx1-ubyte.gz holds label 12 at index 7"):
        load_mnist_arrays(tmp_path)


def test_images_must_be_3d_uint8(tmp_path: Path) -> None:
    write_fake_mnist(tmp_path)
    write_idx(tmp_path / "train-images-idx3-ubyte.gz", np.zeros((50, 784), dtype=np.uint8))
    with pytest.raises(DataError, match="MNIST images are 3-D uint8"):
        load_mnist_arrays(tmp_path)


def test_dir_without_mnist_files(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(DataError) as exc:
        find_mnist_files(tmp_path)
    msg = str(exc.value)
    assert msg.startswith(f"no MNIST files in {tmp_path}")
    assert "train-images-idx3-ubyte.gz" in msg and "\n" not in msg


def test_some_files_missing_are_named(tmp_path: Path) -> None:
    write_fake_mnist(tmp_path)
    (tmp_path / "t10k-images-idx3-ubyte.gz").unlink()
    (tmp_path / "train-labels-idx1-ubyte.gz").unlink()
    with pytest.raises(DataError) as exc:
        find_mnist_files(tmp_path)
    msg = str(exc.value)
    assert "missing train-labels-idx1-ubyte.gz, t10k-images-idx3-ubyte.gz" in msg
    assert "train-images-idx3-ubyte.gz" not in msg.split("(found")[0]


def test_missing_dir(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"MNIST data dir .*nowhere does not exist"):
        find_mnist_files(tmp_path / "nowhere")
    with pytest.raises(DataError, match="does not exist"):
        load_mnist_arrays(tmp_path / "nowhere")


def test_real_test_set_split_into_four_files(tmp_path: Path) -> None:
    shared = shared_mnist_dir()
    images = read_idx(shared / "t10k-images-idx3-ubyte.gz")
    labels = read_idx(shared / "t10k-labels-idx1-ubyte.gz")
    write_idx(tmp_path / "train-images-idx3-ubyte.gz", images[:8000])
    write_idx(tmp_path / "train-labels-idx1-ubyte.gz", labels[:8000])
    write_idx(tmp_path / "t10k-images-idx3-ubyte.gz", images[8000:])
    write_idx(tmp_path / "t10k-labels-idx1-ubyte.gz", labels[8000:])

    train_x, train_y, test_x, test_y = load_mnist_arrays(tmp_path)
    assert train_x.shape == (8000, 28, 28) and train_y.shape == (8000,)
    assert test_x.shape == (2000, 28, 28) and test_y.shape == (2000,)
    np.testing.assert_array_equal(test_x, images[8000:])
    np.testing.assert_array_equal(train_y, labels[:8000])


# --------------------------------------------------------------------------- download


class _Server:
    """A local HTTP server over a directory, counting requests per path."""

    def __init__(self, directory: Path) -> None:
        self.requests: Counter[str] = Counter()
        requests = self.requests

        class Handler(SimpleHTTPRequestHandler):
            def do_GET(self) -> None:
                requests[self.path] += 1
                super().do_GET()

            def log_message(self, format: str, *args: object) -> None:
                pass  # keep pytest output clean

        self.httpd = ThreadingHTTPServer(
            ("127.0.0.1", 0), functools.partial(Handler, directory=str(directory))
        )
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/"
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[_Server, Path, dict[str, tuple[str, int]]]]:
    """Fake MNIST under served/good, a corrupt copy under served/bad, and their file table."""
    good = tmp_path / "served" / "good"
    write_fake_mnist(good, n_train=30, n_test=10)
    bad = tmp_path / "served" / "bad"
    write_fake_mnist(bad, n_train=30, n_test=10, seed=1)  # same sizes, other bytes
    table = {name: (sha256_of(good / name), (good / name).stat().st_size) for name in NAMES}
    server = _Server(tmp_path / "served")
    yield server, good, table
    server.close()


def _closed_port_url() -> str:
    """A URL on a port nothing listens on: bind a socket, note its port, close it."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/"


def test_download_lands_and_verifies(tmp_path: Path, served) -> None:
    server, good, table = served
    root = tmp_path / "cache" / "mnist"
    assert download_mnist(root, mirrors=[server.url + "good/"], files=table, timeout=5) == root
    assert sorted(p.name for p in root.iterdir()) == sorted(NAMES)
    for name in NAMES:
        assert (root / name).read_bytes() == (good / name).read_bytes()
    assert load_mnist_arrays(root)[0].shape == (30, 28, 28)


def test_wrong_checksum_and_404_mirrors_are_skipped(tmp_path: Path, served) -> None:
    server, _, table = served
    root = tmp_path / "cache"
    mirrors = [server.url + "missing/", server.url + "bad/", server.url + "good"]
    download_mnist(root, mirrors=mirrors, files=table, timeout=5)
    for name in NAMES:
        assert sha256_of(root / name) == table[name][0]
        assert server.requests[f"/missing/{name}"] == 1
        assert server.requests[f"/bad/{name}"] == 1
        assert server.requests[f"/good/{name}"] == 1
    assert sorted(p.name for p in root.iterdir()) == sorted(NAMES)  # no temp files left


def test_all_mirrors_failing(tmp_path: Path, served) -> None:
    _, _, table = served
    root = tmp_path / "cache"
    with pytest.raises(DataError) as exc:
        download_mnist(
            root, mirrors=[_closed_port_url(), _closed_port_url()], files=table, timeout=5
        )
    msg = str(exc.value)
    assert "\n" not in msg
    assert msg.startswith(f"could not download {NAMES[0]} from any MNIST mirror")
    assert "--data-dir" in msg and "offline" in msg
    assert list(root.iterdir()) == []


def test_checksum_failure_on_every_mirror_leaves_no_temp_files(tmp_path: Path, served) -> None:
    server, _, table = served
    root = tmp_path / "cache"
    with pytest.raises(DataError) as exc:
        download_mnist(root, mirrors=[server.url + "bad/"], files=table, timeout=5)
    assert "sha256 mismatch" in str(exc.value) and "--data-dir" in str(exc.value)
    assert list(root.iterdir()) == []


def test_present_valid_files_are_not_downloaded_again(tmp_path: Path, served) -> None:
    server, _, table = served
    root = tmp_path / "cache"
    mirrors = [server.url + "good/"]
    download_mnist(root, mirrors=mirrors, files=table, timeout=5)
    assert sum(server.requests.values()) == 4

    download_mnist(root, mirrors=mirrors, files=table, timeout=5)
    assert sum(server.requests.values()) == 4  # nothing fetched the second time

    # A present but corrupt file is replaced, and only that one is fetched.
    (root / NAMES[1]).write_bytes(b"garbage")
    download_mnist(root, mirrors=mirrors, files=table, timeout=5)
    assert sum(server.requests.values()) == 5
    assert server.requests[f"/good/{NAMES[1]}"] == 2
    assert sha256_of(root / NAMES[1]) == table[NAMES[1]][0]


def test_canonical_table() -> None:
    assert NAMES == [
        "train-images-idx3-ubyte.gz",
        "train-labels-idx1-ubyte.gz",
        "t10k-images-idx3-ubyte.gz",
        "t10k-labels-idx1-ubyte.gz",
    ]
    assert [size for _, size in FILES.values()] == [9912422, 28881, 1648877, 4542]
    assert mnist_files.MIRRORS[0] == "https://ossci-datasets.s3.amazonaws.com/mnist/"
    assert sha256_of(__file__) == hashlib.sha256(Path(__file__).read_bytes()).hexdigest()


# --------------------------------------------------------------------------- ensure


def test_ensure_with_data_dir_returns_it(tmp_path: Path, monkeypatch) -> None:
    write_fake_mnist(tmp_path / "mine")
    monkeypatch.setattr(mnist_files, "download_mnist", _no_download)
    assert ensure_mnist(str(tmp_path / "mine"), tmp_path / "cache") == tmp_path / "mine"
    with pytest.raises(DataError, match="does not exist"):
        ensure_mnist(str(tmp_path / "absent"), tmp_path / "cache")


def test_ensure_uses_filled_cache_without_download(tmp_path: Path, monkeypatch) -> None:
    write_fake_mnist(tmp_path / "cache")
    monkeypatch.setattr(mnist_files, "download_mnist", _no_download)
    assert ensure_mnist(None, tmp_path / "cache", download=False) == tmp_path / "cache"
    assert ensure_mnist(None, tmp_path / "cache") == tmp_path / "cache"


def test_ensure_without_download_tells_user_about_data_dir(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(mnist_files, "download_mnist", _no_download)
    with pytest.raises(DataError) as exc:
        ensure_mnist(None, tmp_path / "cache", download=False)
    assert "--data-dir" in str(exc.value) and "\n" not in str(exc.value)


def test_ensure_downloads_into_cache(tmp_path: Path, monkeypatch) -> None:
    calls: list[Path] = []

    def fake_download(root: Path, **kwargs: object) -> Path:
        calls.append(Path(root))
        write_fake_mnist(Path(root))
        return Path(root)

    monkeypatch.setattr(mnist_files, "download_mnist", fake_download)
    cache = tmp_path / "cache"
    assert ensure_mnist(None, cache) == cache
    assert calls == [cache]


def _no_download(*args: object, **kwargs: object) -> Path:
    raise AssertionError("download_mnist must not be called here")
