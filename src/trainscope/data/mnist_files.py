"""Finding, validating and downloading the four MNIST files (stdlib + numpy only).

Local copies are only validated structurally, never checksummed: people re-compress or
decompress their copies, and those are just as good. Downloads, on the other hand, are
checked against the canonical sha256 and size before they are moved into place.
"""

from __future__ import annotations

import hashlib
import http.client
import os
import urllib.error
import urllib.request
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import BinaryIO

import numpy as np

from trainscope.data.idx import read_idx
from trainscope.errors import DataError

__all__ = [
    "FILES",
    "MIRRORS",
    "SPLITS",
    "StrPath",
    "download_mnist",
    "ensure_mnist",
    "find_mnist_files",
    "find_test_files",
    "load_mnist_arrays",
    "sha256_of",
    "split_command",
]

# Canonical file name -> (sha256, size in bytes) of the files every mirror serves.
FILES: dict[str, tuple[str, int]] = {
    "train-images-idx3-ubyte.gz": (
        "440fcabf73cc546fa21475e81ea370265605f56be210a4024d2ca8f203523609",
        9912422,
    ),
    "train-labels-idx1-ubyte.gz": (
        "3552534a0a558bbed6aed32b30c495cca23d567ec52cac8be1a0730e8010255c",
        28881,
    ),
    "t10k-images-idx3-ubyte.gz": (
        "8d422c7b0a1c1c79245a5bcf07fe86e33eeafee792b84584aec276f5a2dbc4e6",
        1648877,
    ),
    "t10k-labels-idx1-ubyte.gz": (
        "f7ae60f92e00ec6debd23a6088c31dbd2371eca3ffa0defaefb259924204aec6",
        4542,
    ),
}

# Tried in order; LeCun's own site is last because it is often down or refuses scripts.
MIRRORS: tuple[str, ...] = (
    "https://ossci-datasets.s3.amazonaws.com/mnist/",
    "https://storage.googleapis.com/cvdf-datasets/mnist/",
    "http://yann.lecun.com/exdb/mnist/",
)

# Split -> (images file, labels file), without the .gz suffix.
SPLITS: dict[str, tuple[str, str]] = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}

StrPath = str | os.PathLike[str]
"""A path argument: text, or a path-like object."""

_CHUNK = 1 << 20
_USER_AGENT = "trainscope (MNIST download)"
_EXPECTED = ", ".join(f"{stem}.gz" for pair in SPLITS.values() for stem in pair)


def _one_line(text: object) -> str:
    """Text squeezed onto one line (DataError messages must be one line)."""
    return " ".join(str(text).split())


def sha256_of(path: StrPath) -> str:
    """Return the hex sha256 of a file, read in chunks so large files cost little memory."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def find_mnist_files(data_dir: StrPath) -> dict[str, tuple[Path, Path]]:
    """Locate the MNIST files in ``data_dir``: ``{"train"|"test": (images, labels)}``.

    Each file may be gzipped (``name.gz``, preferred when both exist) or uncompressed
    (``name``). Raises DataError when the directory is missing, holds no MNIST file, or
    lacks some of the four (naming those).
    """
    root = Path(data_dir).expanduser()
    if not root.exists():
        raise DataError(f"MNIST data dir {root} does not exist")
    if not root.is_dir():
        raise DataError(f"MNIST data dir {root} is not a directory")

    found: dict[str, Path] = {}
    missing: list[str] = []
    for pair in SPLITS.values():
        for stem in pair:
            for candidate in (root / f"{stem}.gz", root / stem):
                if candidate.is_file():
                    found[stem] = candidate
                    break
            else:
                missing.append(f"{stem}.gz")
    if not found:
        raise DataError(
            f"no MNIST files in {root} (expected {_EXPECTED}; "
            f"uncompressed copies without .gz also work)"
        )
    if missing:
        have = ", ".join(p.name for p in found.values())
        if set(found) == set(SPLITS["test"]):  # the test set alone (as in ../shared/data)
            raise DataError(
                f"MNIST data dir {root} holds the test set only ({have}); make a training "
                f"split from it with `{split_command(root)}` (8,000 train / 2,000 test "
                "images), then pass --data-dir DIR"
            )
        raise DataError(f"MNIST data dir {root} is missing {', '.join(missing)} (found {have})")
    return {split: (found[img], found[lbl]) for split, (img, lbl) in SPLITS.items()}


def split_command(src: StrPath, dst: str = "DIR") -> str:
    """The command that makes a training split of the test files in ``src``
    (:mod:`trainscope.data.mnist_split`), for messages."""
    import shlex

    return f"trainscope data mnist-split {shlex.quote(str(src))} {dst}"


def find_test_files(data_dir: StrPath) -> tuple[Path, Path]:
    """The MNIST test images and labels in ``data_dir`` (gzipped or not); DataError when
    either is absent."""
    root = Path(data_dir).expanduser()
    if not root.is_dir():
        raise DataError(f"MNIST data dir {root} does not exist or is not a directory")
    paths = []
    for stem in SPLITS["test"]:
        found = [c for c in (root / f"{stem}.gz", root / stem) if c.is_file()]
        if not found:
            raise DataError(f"{root} has no {stem}.gz (nor {stem})")
        paths.append(found[0])
    return paths[0], paths[1]


def _check_split(images: np.ndarray, labels: np.ndarray, img_path: Path, lbl_path: Path) -> None:
    """Raise DataError unless images/labels form a usable MNIST split."""
    if images.ndim != 3 or images.dtype != np.uint8:
        raise DataError(
            f"{img_path} holds a {images.ndim}-D {images.dtype} array of shape "
            f"{list(images.shape)}; MNIST images are 3-D uint8 [N, rows, cols]"
        )
    if labels.ndim != 1 or labels.dtype.kind not in "iu":
        raise DataError(
            f"{lbl_path} holds a {labels.ndim}-D {labels.dtype} array of shape "
            f"{list(labels.shape)}; MNIST labels are 1-D integers [N]"
        )
    if len(images) != len(labels):
        raise DataError(
            f"{img_path} holds {len(images)} images but {lbl_path} holds "
            f"{len(labels)} labels; the counts must match"
        )
    if len(labels) == 0:
        raise DataError(f"{img_path} and {lbl_path} hold no examples")
    bad = np.flatnonzero((labels < 0) | (labels > 9))
    if bad.size:
        i = int(bad[0])
        raise DataError(
            f"{lbl_path} holds label {int(labels[i])} at index {i} "
            f"({bad.size} out of range in all); MNIST labels are 0..9"
        )


def load_mnist_arrays(data_dir: StrPath) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Load and validate MNIST: ``(train_images, train_labels, test_images, test_labels)``.

    Images are uint8 ``[N, rows, cols]`` (28x28 for real MNIST), labels 1-D integers in
    0..9 as stored (uint8 for real MNIST). Raises DataError for missing or malformed files,
    mismatched image/label counts, out-of-range labels, or train/test image sizes that
    differ.
    """
    paths = find_mnist_files(data_dir)
    out: list[np.ndarray] = []
    for img_path, lbl_path in (paths["train"], paths["test"]):
        images, labels = read_idx(img_path), read_idx(lbl_path)
        _check_split(images, labels, img_path, lbl_path)
        out += [images, labels]
    train_images, train_labels, test_images, test_labels = out
    if train_images.shape[1:] != test_images.shape[1:]:
        raise DataError(
            f"{paths['train'][0]} holds {list(train_images.shape[1:])} images but "
            f"{paths['test'][0]} holds {list(test_images.shape[1:])} images"
        )
    return train_images, train_labels, test_images, test_labels


class _MirrorError(Exception):
    """One mirror failed to deliver one file; the message is the reason, one line."""


def _describe(exc: BaseException, url: str) -> str:
    """A one-line reason for a failed fetch of url."""
    if isinstance(exc, urllib.error.HTTPError):
        return f"HTTP {exc.code} {_one_line(exc.reason)} from {url}"
    if isinstance(exc, urllib.error.URLError):
        return f"{_one_line(exc.reason)} ({url})"
    if isinstance(exc, _MirrorError):
        return f"{exc} ({url})"
    return f"{_one_line(exc) or type(exc).__name__} ({url})"


def _open_local(tmp: Path) -> BinaryIO:
    """Create the temp file; failing here is a local problem, so no other mirror is tried."""
    try:
        return open(tmp, "xb")
    except OSError as exc:
        raise DataError(f"cannot create {tmp}: {_one_line(exc)}") from None


def _write_local(out: BinaryIO, chunk: bytes, tmp: Path) -> None:
    """Write to the temp file; a full disk is not the mirror's fault, so it is fatal."""
    try:
        out.write(chunk)
    except OSError as exc:
        raise DataError(f"cannot write {tmp}: {_one_line(exc)}") from None


def _fetch(url: str, dest: Path, sha256: str, size: int | None, timeout: float) -> None:
    """Download url to dest via a temp file in dest's directory, verified before the rename.

    The temp file is removed whatever happens, so a failed download leaves nothing behind.
    """
    tmp = dest.with_name(f".{dest.name}.{uuid.uuid4().hex[:12]}.part")
    try:
        request = urllib.request.Request(url, headers={"User-Agent": _USER_AGENT})
        with urllib.request.urlopen(request, timeout=timeout) as resp:
            h = hashlib.sha256()
            got = 0
            with _open_local(tmp) as out:
                while chunk := resp.read(_CHUNK):
                    got += len(chunk)
                    if size is not None and got > size:
                        # A wrong or endless body: stop instead of filling the disk.
                        raise _MirrorError(f"sent more than the expected {size} bytes")
                    h.update(chunk)
                    _write_local(out, chunk, tmp)
        if size is not None and got != size:
            raise _MirrorError(f"sent {got} bytes, expected {size}")
        digest = h.hexdigest()
        if digest != sha256.lower():
            raise _MirrorError(f"sha256 mismatch: got {digest}, expected {sha256.lower()}")
        os.replace(tmp, dest)
    finally:
        try:
            os.unlink(tmp)
        except OSError:
            pass  # already renamed into place, or never created


def _is_present(path: Path, sha256: str, size: int | None) -> bool:
    """True when path exists with the expected size and sha256 (size first: it is free)."""
    try:
        if not path.is_file() or (size is not None and path.stat().st_size != size):
            return False
        return sha256_of(path) == sha256.lower()
    except OSError:
        return False


def download_mnist(
    root: StrPath,
    *,
    mirrors: Sequence[str] = MIRRORS,
    files: Mapping[str, tuple[str, int | None]] = FILES,
    timeout: float = 30.0,
) -> Path:
    """Download the MNIST files into ``root`` (created if needed) and return ``root``.

    Files already present with the right sha256 are skipped. Each missing file is tried
    on every mirror in order; a mirror that fails or serves bytes with the wrong size or
    sha256 is skipped. ``files`` maps file name -> (sha256, size or None). Raises DataError
    when every mirror fails for a file.
    """
    if isinstance(mirrors, str):
        mirrors = [mirrors]  # a lone URL, not a sequence of one-letter mirrors
    root = Path(root).expanduser()
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DataError(f"cannot create MNIST directory {root}: {_one_line(exc)}") from None

    for name, (sha256, size) in files.items():
        dest = root / name
        if _is_present(dest, sha256, size):
            continue
        reasons: list[str] = []
        offline = True  # stays True only if no mirror answered at all
        for mirror in mirrors:
            url = mirror.rstrip("/") + "/" + name
            try:
                _fetch(url, dest, sha256, size, timeout)
                break
            except urllib.error.HTTPError as exc:
                offline = False  # a server answered, so the network works
                reasons.append(_describe(exc, url))
            except _MirrorError as exc:
                offline = False
                reasons.append(_describe(exc, url))
            except (OSError, http.client.HTTPException, ValueError) as exc:
                # URLError, timeouts, refused connections, bad URLs, broken responses.
                reasons.append(_describe(exc, url))
        else:
            hint = "you seem to be offline" if offline else "the mirrors may have moved or changed"
            last = reasons[-1] if reasons else "no mirrors given"
            raise DataError(
                f"could not download {name} from any MNIST mirror "
                f"(last error: {last}); {hint} — download the four files by hand "
                f"and pass --data-dir DIR (or put them in {root})"
            )
    return root


def ensure_mnist(data_dir: StrPath | None, cache_dir: StrPath, download: bool = True) -> Path:
    """Return a directory holding the four MNIST files, downloading them if needed.

    With ``data_dir`` given, it is checked with :func:`find_mnist_files` and returned; it
    is never downloaded into. Otherwise ``cache_dir`` is used: returned as is when it
    already holds the files, else filled by :func:`download_mnist` when ``download`` is
    true. Raises DataError when the files are absent and cannot or may not be downloaded.
    """
    if data_dir is not None:
        path = Path(data_dir).expanduser()
        find_mnist_files(path)
        return path

    cache = Path(cache_dir).expanduser()
    try:
        find_mnist_files(cache)
        return cache
    except DataError:
        if not download:
            raise DataError(
                f"MNIST is not in {cache} and downloading is off; pass "
                f"--data-dir DIR with the four MNIST files ({_EXPECTED})"
            ) from None
    download_mnist(cache)
    find_mnist_files(cache)  # a partial directory plus a custom table could still miss some
    return cache
