"""Tests for trainscope.data.idx: IDX round trips, corrupt files, and the real MNIST test set."""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import raises_within_memory, shared_mnist_dir
from trainscope.data.idx import IMAGES_MAGIC, LABELS_MAGIC, read_idx, write_idx
from trainscope.errors import DataError

REPO_ROOT = Path(__file__).resolve().parents[2]
MNIST_TEST_COUNTS = [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]


def _one_line(exc: pytest.ExceptionInfo[DataError]) -> str:
    msg = str(exc.value)
    assert "\n" not in msg
    return msg


@pytest.mark.parametrize("suffix", ["", ".gz"])
def test_roundtrip_images_and_labels(tmp_path: Path, suffix: str) -> None:
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, size=(7, 28, 28), dtype=np.uint8)
    labels = rng.integers(0, 10, size=7, dtype=np.uint8)
    write_idx(tmp_path / f"img{suffix}", images)
    write_idx(tmp_path / f"lbl{suffix}", labels)

    got_images = read_idx(tmp_path / f"img{suffix}")
    got_labels = read_idx(tmp_path / f"lbl{suffix}")
    assert got_images.dtype == np.uint8 and got_images.shape == (7, 28, 28)
    np.testing.assert_array_equal(got_images, images)
    np.testing.assert_array_equal(got_labels, labels)
    # Writable, so torch.from_numpy takes it without a warning.
    assert got_images.flags.writeable

    raw = (tmp_path / f"img{suffix}").read_bytes()
    if suffix:
        raw = gzip.decompress(raw)
    assert struct.unpack(">I", raw[:4])[0] == IMAGES_MAGIC
    assert struct.unpack(">3I", raw[4:16]) == (7, 28, 28)
    lraw = (tmp_path / f"lbl{suffix}").read_bytes()
    if suffix:
        lraw = gzip.decompress(lraw)
    assert struct.unpack(">I", lraw[:4])[0] == LABELS_MAGIC


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int32, np.float32, np.float64])
def test_roundtrip_other_dtypes(tmp_path: Path, dtype: type) -> None:
    arr = (np.arange(24).reshape(2, 3, 4) - 12).astype(dtype)
    write_idx(tmp_path / "a.idx.gz", arr)
    got = read_idx(tmp_path / "a.idx.gz")
    assert got.dtype == np.dtype(dtype)  # native byte order, not the on-disk big-endian
    assert got.dtype.isnative
    np.testing.assert_array_equal(got, arr)


def test_gzip_detected_by_magic_bytes_and_plain_file_named_gz(tmp_path: Path) -> None:
    arr = np.arange(10, dtype=np.uint8)
    write_idx(tmp_path / "x.gz", arr)
    (tmp_path / "x.gz").rename(tmp_path / "compressed-without-suffix")
    np.testing.assert_array_equal(read_idx(tmp_path / "compressed-without-suffix"), arr)
    write_idx(tmp_path / "plain", arr)
    (tmp_path / "plain").rename(tmp_path / "plain-named.gz")
    np.testing.assert_array_equal(read_idx(tmp_path / "plain-named.gz"), arr)


def test_write_rejects_unsupported_dtype(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="no dtype for int64"):
        write_idx(tmp_path / "a.idx", np.zeros(3, dtype=np.int64))
    assert list(tmp_path.iterdir()) == []


def test_bad_magic_number(tmp_path: Path) -> None:
    path = tmp_path / "bad.idx"
    path.write_bytes(b"\x12\x34\x08\x01" + struct.pack(">I", 3) + b"abc")
    with pytest.raises(DataError) as exc:
        read_idx(path)
    assert "bad magic number 0x12340801" in _one_line(exc) and str(path) in str(exc.value)


def test_unknown_dtype_code_is_bad_magic(tmp_path: Path) -> None:
    path = tmp_path / "bad.idx"
    path.write_bytes(b"\x00\x00\x07\x01" + struct.pack(">I", 3) + b"abc")
    with pytest.raises(DataError, match="bad magic number 0x00000701"):
        read_idx(path)


def test_truncated_gzip(tmp_path: Path) -> None:
    path = tmp_path / "img.gz"
    write_idx(path, np.random.default_rng(1).integers(0, 256, (20, 28, 28), dtype=np.uint8))
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 50])
    with pytest.raises(DataError) as exc:
        read_idx(path)
    msg = _one_line(exc)
    assert "truncated or corrupt gzip file" in msg and str(path) in msg


def test_gz_file_cut_to_one_byte(tmp_path: Path) -> None:
    path = tmp_path / "img.gz"
    path.write_bytes(b"\x1f")
    with pytest.raises(DataError, match="truncated or corrupt gzip file"):
        read_idx(path)


def test_data_shorter_than_header(tmp_path: Path) -> None:
    path = tmp_path / "short.idx"
    path.write_bytes(b"\x00\x00\x08\x03" + struct.pack(">3I", 2, 28, 28) + bytes(1000))
    with pytest.raises(DataError) as exc:
        read_idx(path)
    assert "holds 1000 bytes of data, header says 1568" in _one_line(exc)


def test_data_longer_than_header(tmp_path: Path) -> None:
    path = tmp_path / "long.idx.gz"
    path.write_bytes(gzip.compress(b"\x00\x00\x08\x01" + struct.pack(">I", 5) + bytes(8)))
    with pytest.raises(DataError) as exc:
        read_idx(path)
    assert "holds 8 bytes of data, header says 5" in _one_line(exc)


def test_absurd_header_does_not_allocate(tmp_path: Path) -> None:
    # A corrupt header announcing ~16 TB must fail fast rather than try to allocate it.
    path = tmp_path / "huge.idx"
    path.write_bytes(b"\x00\x00\x08\x02" + struct.pack(">2I", 2**32 - 1, 4096) + bytes(10))
    with pytest.raises(DataError, match="holds 10 bytes of data"):
        read_idx(path)


def test_truncated_header_and_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "hdr.idx"
    path.write_bytes(b"\x00\x00\x08\x03" + struct.pack(">I", 2))
    with pytest.raises(DataError, match="header is truncated"):
        read_idx(path)
    path.write_bytes(b"")
    with pytest.raises(DataError, match="too short to be an IDX file"):
        read_idx(path)


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nope-idx3-ubyte.gz"
    with pytest.raises(DataError) as exc:
        read_idx(path)
    assert "does not exist" in _one_line(exc) and str(path) in str(exc.value)


def test_real_mnist_test_set() -> None:
    root = shared_mnist_dir()
    images = read_idx(root / "t10k-images-idx3-ubyte.gz")
    labels = read_idx(root / "t10k-labels-idx1-ubyte.gz")
    assert images.shape == (10_000, 28, 28) and images.dtype == np.uint8
    assert labels.shape == (10_000,) and labels.dtype == np.uint8
    assert np.bincount(labels, minlength=10).tolist() == MNIST_TEST_COUNTS
    assert images.max() == 255 and images.min() == 0


def _gzip_with_header(path: Path, shape: tuple[int, ...], payload: bytes) -> Path:
    header = bytes([0, 0, 0x08, len(shape)]) + struct.pack(f">{len(shape)}I", *shape)
    path.write_bytes(gzip.compress(header + payload, compresslevel=1))
    return path


def test_header_claiming_more_than_the_stream_holds_costs_no_memory(tmp_path: Path) -> None:
    # 256 KiB of incompressible bytes: by deflate's bound the file could hold ~270 MB, so
    # a header claiming 200 MB is plausible until the stream ends. Memory must follow the
    # bytes that arrive, not the claim.
    payload = np.random.default_rng(0).integers(0, 256, 256 * 1024, dtype=np.uint8).tobytes()
    path = _gzip_with_header(tmp_path / "claims-200mb.gz", (200, 1000, 1000), payload)
    error, peak = raises_within_memory(DataError, lambda: read_idx(path))
    assert "holds 262144 bytes of data, header says 200000000" in " ".join(str(error).split())
    assert peak < 16 * 2**20


def test_header_beyond_the_in_memory_cap_is_refused_before_reading(tmp_path: Path) -> None:
    from trainscope.data.idx import MAX_IDX_BYTES

    # 5 MiB of gzip could hold ~5 GiB: the claim passes the deflate bound but not the cap.
    payload = np.random.default_rng(1).integers(0, 256, 5 << 20, dtype=np.uint8).tobytes()
    shape = (5, 1 << 15, 1 << 15)  # 5 GiB of uint8
    path = _gzip_with_header(tmp_path / "claims-5gib.gz", shape, payload)
    with pytest.raises(DataError) as exc:
        read_idx(path)
    message = _one_line(exc)
    assert f"header announces shape {list(shape)}" in message
    assert f"at most {MAX_IDX_BYTES >> 30} GiB" in message


def test_a_stream_that_expands_past_its_header_is_cut_off_soon_after(tmp_path: Path) -> None:
    """A gzip "bomb": a header promising 1 MB of images, then 256 MiB of zeros compressed to
    about 256 KB. Reading stops a little past what the header promised (it used to
    decompress and count every byte of the stream), in bounded memory."""
    shape = (1250, 28, 28)  # 980,000 bytes promised
    header = bytes([0, 0, 0x08, 3]) + struct.pack(">3I", *shape)
    path = tmp_path / "bomb-idx3-ubyte.gz"
    with gzip.open(path, "wb", compresslevel=1) as f:
        f.write(header)
        zeros = bytes(1 << 20)
        for _ in range(256):
            f.write(zeros)
    assert path.stat().st_size < 2 << 20
    error, peak = raises_within_memory(DataError, lambda: read_idx(path))
    text = " ".join(str(error).split())
    assert "holds more than" in text and "header says 980000" in text, text
    assert "reading stopped there" in text
    assert peak < 16 * 2**20
