"""The Tiny Shakespeare corpus as character windows: finding or downloading it, a character
vocabulary, the 90/10 split, and the training and validation sets a language model needs.

A training sample is a window of ``T`` characters and its targets, the same window shifted
by one. Two ways to get batches of them:

- :class:`CharWindows` is a plain ``Dataset`` (item ``i`` is the window starting at ``i``),
  so a shuffled ``DataLoader`` gives random windows one ``__getitem__`` at a time;
- its :meth:`CharWindows.fast_loader` keeps the whole corpus on the device and cuts a batch
  of random windows with one indexing operation, which is what a character model wants:
  the corpus is a few megabytes and a batch is thousands of tiny slices.

Validation is a fixed set of evenly spaced windows (:func:`fixed_windows`), so the
validation loss is the same estimate in every epoch and every run.
"""

from __future__ import annotations

import http.client
import urllib.error
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import Dataset, TensorDataset

from trainscope.data.fast import DeviceBatches

# Private helpers of the MNIST downloader: a verified, atomic fetch of one URL. Reused so
# that both downloads behave (and fail) the same way.
from trainscope.data.mnist_files import StrPath, _describe, _fetch, _MirrorError, _one_line
from trainscope.data.seeds import mix_seed
from trainscope.errors import DataError

__all__ = [
    "SHAKESPEARE_SHA256",
    "SHAKESPEARE_SIZE",
    "SHAKESPEARE_URL",
    "TRAIN_FRACTION",
    "CharVocab",
    "CharWindows",
    "WindowLoader",
    "download_shakespeare",
    "ensure_shakespeare",
    "fixed_windows",
    "read_text",
    "split_train_val",
]

SHAKESPEARE_URL = (
    "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"
)
SHAKESPEARE_SHA256 = "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"
SHAKESPEARE_SIZE = 1_115_394
SHAKESPEARE_FILE = "input.txt"
CACHE_SUBDIR = "tinyshakespeare"
TRAIN_FRACTION = 0.9
"""The first 90% of the characters train, the rest validate (1,003,854 / 111,540)."""


# --------------------------------------------------------------------------- the file


def download_shakespeare(
    dest: StrPath,
    *,
    url: str | None = None,
    sha256: str | None = None,
    size: int | None = None,
    timeout: float = 30.0,
) -> Path:
    """Download the corpus to the file ``dest`` (its folder is created) and return ``dest``.

    The bytes go to a temp file beside ``dest`` and are renamed into place only after the
    size and sha256 match, so an interrupted or corrupt download leaves nothing behind.
    ``url``/``sha256``/``size`` default to the module's constants (read at call time).
    Raises DataError with one line of advice when the download fails.
    """
    url = SHAKESPEARE_URL if url is None else url
    sha256 = SHAKESPEARE_SHA256 if sha256 is None else sha256
    size = SHAKESPEARE_SIZE if size is None else size
    dest = Path(dest).expanduser()
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DataError(f"cannot create {dest.parent}: {_one_line(exc)}") from None
    try:
        _fetch(url, dest, sha256, size, timeout)
    except (urllib.error.HTTPError, _MirrorError) as exc:
        # A server answered with the wrong thing: the network works, the source moved.
        raise DataError(
            f"could not download Tiny Shakespeare ({_describe(exc, url)}); the source may have "
            f"moved or changed — download input.txt by hand and pass --data-dir DIR "
            f"(or put it at {dest})"
        ) from None
    except (OSError, http.client.HTTPException, ValueError) as exc:
        raise DataError(
            f"could not download Tiny Shakespeare ({_describe(exc, url)}); you seem to be "
            f"offline — download input.txt from {url} by hand and pass --data-dir DIR "
            f"(or put it at {dest})"
        ) from None
    return dest


def ensure_shakespeare(data_dir: StrPath | None, cache_dir: StrPath, download: bool = True) -> Path:
    """Return the path of the corpus's ``input.txt``, downloading it if needed.

    With ``data_dir`` given, ``data_dir/input.txt`` (or ``data_dir`` itself when it is a
    file) must exist; nothing is downloaded into it, and it is not checksummed (any text
    file works). Otherwise ``cache_dir/tinyshakespeare/input.txt`` is used, downloaded
    first when absent and ``download`` is true. Raises DataError when the file is absent
    and cannot or may not be downloaded.
    """
    if data_dir is not None:
        root = Path(data_dir).expanduser()
        path = root if root.is_file() else root / SHAKESPEARE_FILE
        if not path.is_file():
            raise DataError(
                f"Tiny Shakespeare not found: {path} does not exist "
                f"(--data-dir must hold {SHAKESPEARE_FILE})"
            )
        return path
    path = Path(cache_dir).expanduser() / CACHE_SUBDIR / SHAKESPEARE_FILE
    if path.is_file():
        return path  # only ever written there after its checksum matched
    if not download:
        raise DataError(
            f"Tiny Shakespeare is not in {path.parent} and downloading is off; download "
            f"{SHAKESPEARE_URL} by hand and pass --data-dir DIR holding {SHAKESPEARE_FILE}"
        )
    return download_shakespeare(path)


MAX_TEXT_BYTES = 256 << 20
"""The largest corpus read: it is held in memory as text and as int64 ids (about 17 bytes
per character while it is encoded); Tiny Shakespeare is 1.1 MB."""


def read_text(path: StrPath, max_bytes: int = MAX_TEXT_BYTES) -> str:
    """The file's text (UTF-8); DataError when it cannot be read, is not UTF-8, is empty or
    is larger than ``max_bytes`` (checked before reading)."""
    path = Path(path)
    try:
        with path.open("rb") as f:
            raw = f.read(max_bytes + 1)  # never more, whatever the file is
        if len(raw) > max_bytes:
            raise DataError(
                f"{path} is larger than {max_bytes / 2**20:.3g} MiB, the most a character "
                f"corpus may hold (it is kept in memory)"
            )
        text = raw.decode("utf-8")
    except OSError as exc:
        raise DataError(f"cannot read {path}: {_one_line(exc)}") from None
    except UnicodeDecodeError as exc:
        raise DataError(f"{path} is not UTF-8 text ({_one_line(exc)})") from None
    if not text:
        raise DataError(f"{path} is empty")
    return text


# --------------------------------------------------------------------------- vocabulary


class CharVocab:
    """The distinct characters of a text, sorted: character <-> id (its rank)."""

    def __init__(self, chars: Iterable[str]) -> None:
        self.chars: list[str] = sorted(set(chars))
        if not self.chars:
            raise ValueError("a vocabulary needs at least one character")
        if any(len(c) != 1 for c in self.chars):
            raise ValueError("a character vocabulary holds single characters only")
        self._ids = {c: i for i, c in enumerate(self.chars)}

    @classmethod
    def from_text(cls, text: str) -> CharVocab:
        """The vocabulary of every character in ``text``."""
        return cls(set(text))

    def __len__(self) -> int:
        return len(self.chars)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CharVocab) and self.chars == other.chars

    def encode(self, text: str) -> list[int]:
        """Ids of the characters of ``text``; ValueError naming any character not known."""
        try:
            return [self._ids[c] for c in text]
        except KeyError:
            unknown = sorted(set(text) - set(self._ids))
            raise ValueError(f"characters not in the vocabulary: {''.join(unknown)!r}") from None

    def decode(self, ids: Iterable[int]) -> str:
        """The text of a sequence of ids."""
        return "".join(self.chars[int(i)] for i in ids)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able description: ``{"kind": "char", "chars": "<every character>"}``."""
        return {"kind": "char", "chars": "".join(self.chars)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CharVocab:
        """Inverse of :meth:`to_dict`; ValueError for anything that is not one."""
        if not isinstance(data, Mapping) or data.get("kind") != "char":
            raise ValueError("not a character vocabulary (expected kind 'char')")
        chars = data.get("chars")
        if not isinstance(chars, str) or not chars:
            raise ValueError("a character vocabulary needs a non-empty 'chars' string")
        if len(set(chars)) != len(chars):
            raise ValueError("a character vocabulary lists each character once")
        return cls(chars)


def split_train_val(
    ids: torch.Tensor, train_fraction: float = TRAIN_FRACTION
) -> tuple[torch.Tensor, torch.Tensor]:
    """The first ``train_fraction`` of a 1-D id tensor, and the rest (views, no copies)."""
    if not 0.0 < train_fraction < 1.0:
        raise ValueError(f"train_fraction must be in (0, 1), got {train_fraction}")
    n_train = int(len(ids) * train_fraction)
    return ids[:n_train], ids[n_train:]


# --------------------------------------------------------------------------- datasets


class CharWindows(Dataset):
    """Every window of ``block_size`` ids of a 1-D corpus: item ``i`` is
    ``(data[i : i+T], data[i+1 : i+T+1])``, both int64, so there are ``len(data) - T``.
    """

    def __init__(self, data: torch.Tensor, block_size: int) -> None:
        if data.dim() != 1:
            raise ValueError(f"the corpus must be a 1-D tensor of ids, got {data.dim()}-D")
        if block_size < 1:
            raise ValueError(f"block_size must be positive, got {block_size}")
        if len(data) <= block_size:
            raise DataError(
                f"a corpus of {len(data)} characters is too short for windows of "
                f"{block_size} (it needs at least {block_size + 1})"
            )
        self.data = data.long()
        self.block_size = block_size

    def __len__(self) -> int:
        return len(self.data) - self.block_size

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        if not -len(self) <= i < len(self):
            raise IndexError(f"window {i} out of range for {len(self)} windows")
        i = i % len(self)
        t = self.block_size
        return self.data[i : i + t], self.data[i + 1 : i + t + 1]

    def fast_loader(self, batch_size: int, device: torch.device, **options: Any) -> WindowLoader:
        """Batches cut from the corpus held on ``device`` (see :class:`WindowLoader`; the
        ``options`` are its own: ``shuffle``, ``seed``, ``drop_last``, ``rank``,
        ``world_size``)."""
        return WindowLoader(self.data, self.block_size, batch_size, device, **options)


class WindowLoader(DeviceBatches):
    """(x, y) batches of windows of a corpus held whole on the device.

    Shuffled (training): each batch is window starts drawn uniformly (with replacement)
    from a device generator seeded from (``seed``, epoch, batch), so the sequence of
    batches is reproducible, no two epochs repeat, and ``set_epoch`` and ``skip`` give any
    epoch's batches from any point (a resumed run); without ``set_epoch`` each ``iter()``
    is the next epoch. An epoch is ``len(windows) // global batch``
    batches, the size of a DataLoader epoch; with random windows it is a unit of accounting
    rather than a pass over every window (cap it with ``max_steps_per_epoch``). Not
    shuffled: consecutive windows in order, batched like a DataLoader (a last short batch
    unless ``drop_last``).

    Data parallel, with the convention of :func:`trainscope.data.loaders.make_loader`:
    ``batch_size`` is this rank's share. Every rank draws the same global batch of
    ``batch_size * world_size`` windows (same seed, generators in step) and keeps its
    contiguous share, rank ``r`` taking windows ``[r * batch_size, (r+1) * batch_size)``.
    The ranks' batches of a step together are thus exactly the batch one process with
    ``batch_size * world_size`` and the same seed would draw.

    ``options`` are those of :class:`~trainscope.data.fast.DeviceBatches` (``shuffle``
    required).
    """

    def __init__(
        self,
        data: torch.Tensor,
        block_size: int,
        batch_size: int,
        device: torch.device,
        **options: Any,
    ) -> None:
        super().__init__(batch_size, torch.device(device), **options)
        rank, world_size = self.rank, self.world_size
        if batch_size < 1:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        if world_size < 1 or not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} is not in a world of size {world_size}")
        # One copy to the device at setup; every batch afterwards is an index into it.
        self.data = data.to(self.device, dtype=torch.int64)
        self.block_size = block_size
        self.n_windows = len(self.data) - block_size
        if self.n_windows < 1:
            raise ValueError(f"a corpus of {len(self.data)} ids holds no window of {block_size}")
        self.global_batch = batch_size * world_size
        if self.shuffle and self.global_batch > self.n_windows:
            # Windows are drawn with replacement, so any batch size would "work", but a
            # batch is allocated whole: beyond the windows there are, it is only memory.
            raise DataError(
                f"a batch of {self.global_batch} windows is more than the {self.n_windows} "
                f"windows of {block_size} characters the training text holds: lower the "
                f"batch size"
            )
        self._offsets = torch.arange(block_size, device=self.device)

    def __len__(self) -> int:
        if self.shuffle:
            return max(1, self.n_windows // self.global_batch)
        full, rest = divmod(self.n_windows, self.global_batch)
        return full + (1 if rest and not self.drop_last else 0)

    def _global_starts(self, epoch: int, b: int) -> torch.Tensor:
        if self.shuffle:
            self._gen.manual_seed(mix_seed(self.seed, epoch, b))
            return torch.randint(
                self.n_windows, (self.global_batch,), generator=self._gen, device=self.device
            )
        lo = b * self.global_batch
        return torch.arange(lo, min(lo + self.global_batch, self.n_windows), device=self.device)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        epoch, skip = self.epoch, self._skip
        self.epoch, self._skip = epoch + 1, 0  # the next iter(): the next epoch, from its start
        lo, hi = self.rank * self.batch_size, (self.rank + 1) * self.batch_size
        for b in range(skip, len(self)):
            # The whole global batch is drawn on every rank: rank r keeps its share of it.
            starts = self._global_starts(epoch, b)[lo:hi]
            idx = starts[:, None] + self._offsets  # (B, T) positions in the corpus
            yield self.data[idx], self.data[idx + 1]


def fixed_windows(data: torch.Tensor, block_size: int, n_windows: int) -> TensorDataset:
    """``n_windows`` evenly spaced windows of a 1-D corpus as a ``TensorDataset(x, y)``.

    Evenly spaced from the first window to the last, so they cover the whole split and are
    the same in every run; capped at the number of distinct windows there are.
    """
    if n_windows < 1:
        raise ValueError(f"n_windows must be positive, got {n_windows}")
    available = len(data) - block_size
    if available < 1:
        raise DataError(
            f"a split of {len(data)} characters is too short for windows of {block_size} "
            f"(it needs at least {block_size + 1})"
        )
    n = min(n_windows, available)
    starts = torch.linspace(0, available - 1, n, dtype=torch.float64).round().long()
    idx = starts[:, None] + torch.arange(block_size)
    data = data.long()
    return TensorDataset(data[idx], data[idx + 1])
