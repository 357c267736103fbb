"""Reading and writing IDX files, the format MNIST ships in (stdlib + numpy only).

An IDX file is a 4-byte magic number -- two zero bytes, a dtype code, the number of
dimensions -- then one big-endian uint32 per dimension, then the values in C order,
big-endian. MNIST distributes its four files gzip-compressed.

Every problem with a file raises :class:`~trainscope.errors.DataError` with a one-line
message naming the file, because the CLI prints it as is.
"""

from __future__ import annotations

import gzip
import math
import os
import struct
import uuid
import zlib
from pathlib import Path
from typing import BinaryIO

import numpy as np

from trainscope.config import gib, memory_budget_bytes
from trainscope.errors import DataError

__all__ = ["IDX_DTYPES", "IMAGES_MAGIC", "LABELS_MAGIC", "read_idx", "write_idx"]

# The magic numbers MNIST's files carry: unsigned bytes, 3 dimensions / 1 dimension.
IMAGES_MAGIC = 0x00000803
LABELS_MAGIC = 0x00000801

# dtype code -> numpy dtype as stored on disk (multi-byte types are big-endian).
IDX_DTYPES: dict[int, np.dtype] = {
    0x08: np.dtype(np.uint8),
    0x09: np.dtype(np.int8),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}
# Native dtype -> code, for writing; keyed by (kind, itemsize) so byte order does not matter.
_CODES = {(dt.kind, dt.itemsize): code for code, dt in IDX_DTYPES.items()}

_GZIP_MAGIC = b"\x1f\x8b"
_CHUNK = 1 << 20
# IDX data are read whole into memory: a header announcing more than this is refused
# before reading (MNIST's largest file holds 47 MB; EMNIST's about 550 MB).
MAX_IDX_BYTES = 1 << 32
# Deflate cannot expand data by more than ~1032:1, so a gzip file of C bytes holds at most
# about C * 1032 bytes; a header asking for more is corrupt, and we must not allocate for it.
_MAX_GZIP_RATIO = 1040


def _one_line(exc: BaseException) -> str:
    """An exception's text squeezed onto one line (DataError messages must be one line)."""
    text = " ".join(str(exc).split())
    return text or type(exc).__name__


def read_idx(path: str | os.PathLike[str]) -> np.ndarray:
    """Read an IDX file (gzip-compressed or not) into a writable, native-endian array.

    Compression is detected by the gzip magic bytes, whatever the file is called; a file
    named ``*.gz`` that holds a plain IDX file is read as such. Raises DataError when the
    file is missing, is not an IDX file, is a truncated gzip stream, or holds more or fewer
    bytes of data than its header announces.
    """
    p = Path(path)
    if not p.exists():
        raise DataError(f"IDX file {p} does not exist")
    if not p.is_file():
        raise DataError(f"IDX file {p} is not a regular file")
    try:
        with open(p, "rb") as raw:
            start = raw.read(2)
            raw.seek(0)
            size_on_disk = os.fstat(raw.fileno()).st_size
            if start == _GZIP_MAGIC:
                with gzip.GzipFile(fileobj=raw, mode="rb") as f:
                    return _read_stream(f, p, bound=size_on_disk * _MAX_GZIP_RATIO + 4096)
            if p.name.endswith(".gz") and start != b"\x00\x00":
                # Neither gzip nor IDX: most likely a download cut off in its first bytes.
                raise DataError(f"{p} is a truncated or corrupt gzip file (no gzip header)")
            return _read_stream(raw, p, bound=size_on_disk)
    except (gzip.BadGzipFile, EOFError, zlib.error) as exc:
        # BadGzipFile is an OSError, so it must be caught before the generic OSError below.
        raise DataError(f"{p} is a truncated or corrupt gzip file ({_one_line(exc)})") from None
    except OSError as exc:
        raise DataError(f"cannot read IDX file {p}: {_one_line(exc)}") from None


def _read_exact(f: BinaryIO, n: int) -> bytes:
    """Read up to n bytes, looping because a stream may return short reads before EOF."""
    parts = []
    while n > 0:
        chunk = f.read(n)
        if not chunk:
            break
        parts.append(chunk)
        n -= len(chunk)
    return b"".join(parts)


# Bytes read past the end the header promises before a file is refused: enough to say
# "more than announced", never the rest of a stream that may expand without end (a gzip
# "bomb" of a few MB decompresses to GBs).
_EXCESS_READ = 1 << 20


def _count_rest(f: BinaryIO, limit: int) -> tuple[int, bool]:
    """Consume up to ``limit`` more bytes of the stream: (how many, whether more follow)."""
    total = 0
    while total < limit and (chunk := f.read(min(_CHUNK, limit - total))):
        total += len(chunk)
    return total, total >= limit and bool(f.read(1))


def _read_stream(f: BinaryIO, p: Path, bound: int) -> np.ndarray:
    """Parse header and data from an open (decompressed) stream; bound caps the data size."""
    head = _read_exact(f, 4)
    if len(head) < 4:
        raise DataError(f"{p} is too short to be an IDX file ({len(head)} bytes)")
    magic = int.from_bytes(head, "big")
    code, ndim = head[2], head[3]
    if head[:2] != b"\x00\x00" or code not in IDX_DTYPES or ndim == 0:
        raise DataError(f"{p}: bad magic number 0x{magic:08x}, not an IDX file")
    dims = _read_exact(f, 4 * ndim)
    if len(dims) < 4 * ndim:
        raise DataError(
            f"{p}: IDX header is truncated (magic 0x{magic:08x} announces "
            f"{ndim} dimensions, file ends after {len(dims) // 4})"
        )
    shape = struct.unpack(f">{ndim}I", dims)
    dtype = IDX_DTYPES[code]
    expected = math.prod(shape) * dtype.itemsize  # Python ints: no overflow on huge headers

    if expected > bound:
        # The file cannot hold that much; count what it does hold rather than allocate.
        got, more = _count_rest(f, bound + _EXCESS_READ)
        held = f"more than {got}" if more else str(got)
        raise DataError(
            f"{p} holds {held} bytes of data, header says {expected} (shape {list(shape)})"
        )
    cap = min(MAX_IDX_BYTES, memory_budget_bytes())
    if expected > cap:
        raise DataError(
            f"{p}: header announces shape {list(shape)}, {expected} bytes of data; an IDX "
            f"data set is read into memory, at most {gib(cap)} here (half of this "
            f"machine's memory, and never more than {MAX_IDX_BYTES >> 30} GiB)"
        )

    # The header is only a claim: memory follows the bytes that actually arrive, read in
    # bounded chunks (one read of the whole size would make gzip build it all at once).
    # A bytearray grows in place as they come, and gives a writable array at the end
    # (np.frombuffer on bytes would be read-only, which torch.from_numpy warns about).
    buf = bytearray()
    while len(buf) < expected:
        chunk = f.read(min(_CHUNK, expected - len(buf)))
        if not chunk:
            break
        buf += chunk
    filled = len(buf)
    if filled < expected:
        raise DataError(
            f"{p} holds {filled} bytes of data, header says {expected} (shape {list(shape)})"
        )
    extra, more = _count_rest(f, _EXCESS_READ)  # stops soon after the promised end
    if extra:
        held = f"more than {expected + extra}" if more else str(expected + extra)
        raise DataError(
            f"{p} holds {held} bytes of data, header says {expected} (shape {list(shape)}); "
            "reading stopped there"
        )

    arr = np.frombuffer(buf, dtype=dtype).reshape(shape)
    if dtype.byteorder == ">":
        # Convert once here so callers (and torch) get native-endian data.
        arr = arr.astype(dtype.newbyteorder("="))
    return arr


def write_idx(path: str | os.PathLike[str], array: np.ndarray) -> None:
    """Write ``array`` as an IDX file, gzip-compressed when the name ends in ``.gz``.

    Supported dtypes: uint8, int8, int16, int32, float32, float64, with 1 to 255
    dimensions. The file is written to a temporary name and renamed into place, so a
    crash never leaves a half-written file under the final name.
    """
    p = Path(path)
    arr = np.asarray(array)
    code = _CODES.get((arr.dtype.kind, arr.dtype.itemsize))
    if code is None:
        supported = ", ".join(str(dt.newbyteorder("=")) for dt in IDX_DTYPES.values())
        raise DataError(
            f"cannot write {p}: IDX has no dtype for {arr.dtype} (supported: {supported})"
        )
    if not 1 <= arr.ndim <= 255:
        raise DataError(f"cannot write {p}: IDX needs 1 to 255 dimensions, array has {arr.ndim}")
    if any(n >= 2**32 for n in arr.shape):
        raise DataError(f"cannot write {p}: dimension in shape {arr.shape} exceeds 2**32 - 1")

    header = bytes([0, 0, code, arr.ndim]) + struct.pack(f">{arr.ndim}I", *arr.shape)
    data = np.ascontiguousarray(arr, dtype=IDX_DTYPES[code]).reshape(-1).view(np.uint8)

    tmp_name = None
    try:
        # Not mkstemp: its files are mode 0600; a plain "x" open keeps the user's umask.
        tmp_name = p.with_name(f".{p.name}.{uuid.uuid4().hex[:12]}.tmp")
        with open(tmp_name, "xb") as raw:
            if p.name.endswith(".gz"):
                # mtime=0 and no file name: the same array always gives the same bytes.
                # Level 6 is zlib's default trade-off; 9 is much slower for ~1% smaller files.
                with gzip.GzipFile(
                    filename="", fileobj=raw, mode="wb", compresslevel=6, mtime=0
                ) as f:
                    f.write(header)
                    f.write(data)
            else:
                raw.write(header)
                raw.write(data)
        os.replace(tmp_name, p)
        tmp_name = None
    except OSError as exc:
        raise DataError(f"cannot write IDX file {p}: {_one_line(exc)}") from None
    finally:
        if tmp_name is not None:
            try:
                os.unlink(tmp_name)
            except OSError:
                pass
