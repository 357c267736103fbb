"""Tests for trainscope.data.text: the corpus file, vocabulary, split, windows and loaders.

Downloads go to a local HTTP server on 127.0.0.1 serving a file the test writes; nothing
reaches the internet.
"""

from __future__ import annotations

import functools
import hashlib
import json
import socket
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from trainscope.config import DataConfig
from trainscope.data import text
from trainscope.data.loaders import make_loader
from trainscope.data.text import (
    CharVocab,
    CharWindows,
    WindowLoader,
    download_shakespeare,
    ensure_shakespeare,
    fixed_windows,
    read_text,
    split_train_val,
)
from trainscope.errors import DataError

CPU = torch.device("cpu")
SAMPLE = "First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n"


# --------------------------------------------------------------------------- vocabulary


def test_vocab_is_sorted_distinct_chars_and_round_trips() -> None:
    vocab = CharVocab.from_text("hello, world")
    assert vocab.chars == sorted(set("hello, world"))
    assert len(vocab) == 9
    ids = vocab.encode("hello")
    assert ids == [vocab.chars.index(c) for c in "hello"]
    assert vocab.decode(ids) == "hello"
    assert vocab.decode(torch.tensor(ids)) == "hello"  # tensors of ids decode too


def test_vocab_dict_is_json_and_inverts() -> None:
    vocab = CharVocab.from_text(SAMPLE)
    data = json.loads(json.dumps(vocab.to_dict()))
    assert data["kind"] == "char"
    assert CharVocab.from_dict(data) == vocab


def test_vocab_rejects_unknown_chars_and_bad_dicts() -> None:
    vocab = CharVocab.from_text("abc")
    with pytest.raises(ValueError, match="'xz'"):
        vocab.encode("axbz")
    for bad in (
        {},
        {"kind": "bpe", "chars": "ab"},
        {"kind": "char", "chars": ""},
        {"kind": "char", "chars": "aa"},
    ):
        with pytest.raises(ValueError):
            CharVocab.from_dict(bad)


def test_split_takes_first_ninety_percent() -> None:
    ids = torch.arange(1000)
    train, val = split_train_val(ids)
    assert len(train) == 900 and len(val) == 100
    assert train[-1] == 899 and val[0] == 900
    with pytest.raises(ValueError):
        split_train_val(ids, 1.0)


# --------------------------------------------------------------------------- windows


def test_windows_are_shifted_slices() -> None:
    data = torch.arange(20)
    ds = CharWindows(data, 5)
    assert len(ds) == 15
    x, y = ds[3]
    assert x.tolist() == [3, 4, 5, 6, 7] and y.tolist() == [4, 5, 6, 7, 8]
    x, y = ds[len(ds) - 1]
    assert y[-1] == 19  # the last window's target is the corpus's last id
    with pytest.raises(IndexError):
        ds[len(ds)]
    with pytest.raises(DataError, match="too short"):
        CharWindows(torch.arange(5), 5)


def test_shuffled_dataloader_gives_valid_windows() -> None:
    ds = CharWindows(torch.arange(100), 8)
    loader = DataLoader(ds, batch_size=4, shuffle=True, generator=torch.Generator().manual_seed(0))
    x, y = next(iter(loader))
    assert x.shape == y.shape == (4, 8) and x.dtype == torch.int64
    assert torch.equal(y, x + 1)  # the corpus is 0..99, so a window's targets are ids + 1
    assert torch.equal(x[:, 1:] - x[:, :-1], torch.ones(4, 7, dtype=torch.int64))


def test_fast_loader_batches_are_windows_of_the_corpus() -> None:
    ds = CharWindows(torch.arange(1000), 16)
    loader = ds.fast_loader(8, CPU, shuffle=True, seed=0)
    assert isinstance(loader, WindowLoader)
    assert len(loader) == (1000 - 16) // 8  # an epoch is sized like a DataLoader's
    batches = list(loader)
    assert len(batches) == len(loader)
    for x, y in batches:
        assert x.shape == y.shape == (8, 16) and x.dtype == y.dtype == torch.int64
        assert torch.equal(y, x + 1)
        starts = x[:, 0]
        assert torch.equal(x, starts[:, None] + torch.arange(16))
        assert int(starts.min()) >= 0 and int(starts.max()) <= 1000 - 16 - 1


def test_fast_loader_is_seeded_and_epochs_differ() -> None:
    ds = CharWindows(torch.arange(5000), 10)
    a = ds.fast_loader(4, CPU, shuffle=True, seed=7)
    b = ds.fast_loader(4, CPU, shuffle=True, seed=7)
    c = ds.fast_loader(4, CPU, shuffle=True, seed=8)
    first_a, first_b, first_c = next(iter(a))[0], next(iter(b))[0], next(iter(c))[0]
    assert torch.equal(first_a, first_b)
    assert not torch.equal(first_a, first_c)
    # The generator is seeded once: the next epoch draws new windows.
    assert not torch.equal(next(iter(a))[0], first_a)


def test_fast_loader_ranks_split_the_one_process_batch() -> None:
    # batch_size is each rank's share (make_loader's convention): four ranks of 2 together
    # take exactly the batch of 8 that one process with the same seed takes.
    ds = CharWindows(torch.arange(3000), 12)
    whole = [x for x, _ in ds.fast_loader(8, CPU, shuffle=True, seed=3)]
    shares = [
        [x for x, _ in ds.fast_loader(2, CPU, shuffle=True, seed=3, rank=r, world_size=4)]
        for r in range(4)
    ]
    assert all(len(s) == len(whole) == (3000 - 12) // 8 for s in shares)
    for b, x in enumerate(whole):
        assert all(s[b].shape == (2, 12) for s in shares)
        assert torch.equal(torch.cat([s[b] for s in shares]), x)
    with pytest.raises(ValueError, match="rank"):
        ds.fast_loader(8, CPU, shuffle=True, rank=2, world_size=2)


def test_make_loader_passes_each_rank_its_share() -> None:
    ds = CharWindows(torch.arange(500), 8)
    cfg = DataConfig(batch_size=8, loader="fast")
    one = make_loader(ds, cfg, train=True, device=CPU)
    two = [
        make_loader(ds, cfg, train=True, device=CPU, batch_size=4, rank=r, world_size=2)
        for r in range(2)
    ]
    assert len(one) == len(two[0]) == len(two[1])
    x = next(iter(one))[0]
    assert torch.equal(torch.cat([next(iter(loader))[0] for loader in two]), x)


def test_fast_loader_unshuffled_walks_every_window_in_order() -> None:
    ds = CharWindows(torch.arange(30), 5)  # 25 windows
    loader = ds.fast_loader(10, CPU, shuffle=False)
    starts = [x[:, 0].tolist() for x, _ in loader]
    assert starts == [list(range(10)), list(range(10, 20)), list(range(20, 25))]
    assert len(ds.fast_loader(10, CPU, shuffle=False, drop_last=True)) == 2


def test_make_loader_uses_the_datasets_own_fast_path() -> None:
    ds = CharWindows(torch.arange(500), 8)
    loader = make_loader(ds, DataConfig(batch_size=4, loader="fast"), train=True, device=CPU)
    assert isinstance(loader, WindowLoader)
    x, y = next(iter(loader))
    assert x.shape == (4, 8) and torch.equal(y, x + 1)


def test_fixed_windows_are_evenly_spaced_and_deterministic() -> None:
    data = torch.arange(1000)
    val = fixed_windows(data, 10, 5)
    assert isinstance(val, TensorDataset) and len(val) == 5
    x, y = val.tensors
    assert x[:, 0].tolist() == [0, 247, 494, 742, 989]  # first to last window (start 989)
    assert torch.equal(y, x + 1)
    assert torch.equal(fixed_windows(data, 10, 5).tensors[0], x)
    assert len(fixed_windows(torch.arange(20), 10, 100)) == 10  # capped at distinct windows
    with pytest.raises(DataError):
        fixed_windows(torch.arange(10), 10, 3)


# --------------------------------------------------------------------------- the file


def test_read_text_rejects_empty_and_binary_files(tmp_path: Path) -> None:
    (tmp_path / "empty.txt").write_text("")
    (tmp_path / "bin.txt").write_bytes(b"\xff\xfe\x00bad")
    with pytest.raises(DataError, match="empty"):
        read_text(tmp_path / "empty.txt")
    with pytest.raises(DataError, match="UTF-8"):
        read_text(tmp_path / "bin.txt")
    with pytest.raises(DataError, match="cannot read"):
        read_text(tmp_path / "absent.txt")


def test_ensure_prefers_data_dir_and_never_downloads_into_it(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(text, "download_shakespeare", _no_download)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "input.txt").write_text(SAMPLE)
    assert ensure_shakespeare(mine, tmp_path / "cache") == mine / "input.txt"
    assert ensure_shakespeare(mine / "input.txt", tmp_path / "cache") == mine / "input.txt"
    with pytest.raises(DataError, match="does not exist") as exc:
        ensure_shakespeare(tmp_path / "absent", tmp_path / "cache")
    assert "\n" not in str(exc.value)


def test_ensure_uses_the_cache_and_respects_download_off(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(text, "download_shakespeare", _no_download)
    cache = tmp_path / "cache"
    with pytest.raises(DataError) as exc:
        ensure_shakespeare(None, cache, download=False)
    msg = str(exc.value)
    assert "--data-dir" in msg and "downloading is off" in msg and "\n" not in msg
    (cache / "tinyshakespeare").mkdir(parents=True)
    (cache / "tinyshakespeare" / "input.txt").write_text(SAMPLE)
    assert ensure_shakespeare(None, cache, download=False) == cache / "tinyshakespeare/input.txt"


class _Server:
    """A local HTTP server over a directory (requests logged quietly)."""

    def __init__(self, directory: Path) -> None:
        class Handler(SimpleHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:
                pass

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
def served(tmp_path: Path, monkeypatch) -> Iterator[bytes]:
    """A small corpus served locally, with the module's URL, sha256 and size pointing at it."""
    body = (SAMPLE * 20).encode()
    (tmp_path / "served").mkdir()
    (tmp_path / "served" / "input.txt").write_bytes(body)
    server = _Server(tmp_path / "served")
    monkeypatch.setattr(text, "SHAKESPEARE_URL", server.url + "input.txt")
    monkeypatch.setattr(text, "SHAKESPEARE_SHA256", hashlib.sha256(body).hexdigest())
    monkeypatch.setattr(text, "SHAKESPEARE_SIZE", len(body))
    yield body
    server.close()


def test_download_lands_in_the_cache_verified(tmp_path: Path, served: bytes) -> None:
    cache = tmp_path / "cache"
    path = ensure_shakespeare(None, cache)
    assert path == cache / "tinyshakespeare" / "input.txt"
    assert path.read_bytes() == served
    assert [p.name for p in path.parent.iterdir()] == ["input.txt"]  # no temp file left


@pytest.mark.parametrize("patch", ["sha", "size"])
def test_download_with_wrong_checksum_or_size_leaves_nothing(
    tmp_path: Path, served: bytes, monkeypatch, patch: str
) -> None:
    if patch == "sha":
        monkeypatch.setattr(text, "SHAKESPEARE_SHA256", "0" * 64)
    else:
        monkeypatch.setattr(text, "SHAKESPEARE_SIZE", len(served) + 1)
    cache = tmp_path / "cache"
    with pytest.raises(DataError) as exc:
        ensure_shakespeare(None, cache)
    msg = str(exc.value)
    assert ("sha256 mismatch" if patch == "sha" else "expected") in msg
    assert "--data-dir" in msg and "\n" not in msg
    assert list((cache / "tinyshakespeare").iterdir()) == []


def test_download_of_a_missing_file_names_the_http_error(tmp_path: Path, served: bytes) -> None:
    with pytest.raises(DataError, match="HTTP 404"):
        download_shakespeare(tmp_path / "x.txt", url=text.SHAKESPEARE_URL + ".gone")


def test_offline_download_is_one_line_of_advice(tmp_path: Path, monkeypatch) -> None:
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setattr(text, "SHAKESPEARE_URL", f"http://127.0.0.1:{port}/input.txt")
    with pytest.raises(DataError) as exc:
        ensure_shakespeare(None, tmp_path / "cache")
    msg = str(exc.value)
    assert "offline" in msg and "--data-dir" in msg and "by hand" in msg and "\n" not in msg
    assert not (tmp_path / "cache" / "tinyshakespeare" / "input.txt").exists()


def _no_download(*args: object, **kwargs: object) -> Path:
    raise AssertionError("download_shakespeare must not be called here")


# --------------------------------------------------------------------------- real data


def test_real_corpus_matches_the_published_file(shared_data: Path) -> None:
    path = ensure_shakespeare(shared_data / "tinyshakespeare", Path("/nonexistent-cache"))
    assert path.stat().st_size == text.SHAKESPEARE_SIZE
    assert hashlib.sha256(path.read_bytes()).hexdigest() == text.SHAKESPEARE_SHA256
    corpus = read_text(path)
    vocab = CharVocab.from_text(corpus)
    assert len(vocab) == 65
    ids = torch.tensor(vocab.encode(corpus))
    train, val = split_train_val(ids)
    assert len(train) == 1_003_854 and len(val) == 111_540
    assert vocab.decode(train[:14]) == "First Citizen:"


def test_read_text_refuses_a_file_beyond_its_limit_before_reading(tmp_path: Path) -> None:
    path = tmp_path / "big.txt"
    path.write_text("abcdefgh" * 1000)
    assert text.read_text(path, max_bytes=8000) == "abcdefgh" * 1000
    with pytest.raises(DataError, match=r"big\.txt is larger than 0\.00763 MiB") as exc:
        text.read_text(path, max_bytes=7999)
    assert "\n" not in str(exc.value)


def test_a_window_batch_beyond_the_windows_is_refused() -> None:
    data = torch.arange(20) % 5
    assert len(WindowLoader(data, 4, 16, torch.device("cpu"), shuffle=True)) == 1  # 16 of 16
    with pytest.raises(DataError, match=r"a batch of 1000000000 windows is more than the 16"):
        WindowLoader(data, 4, 10**9, torch.device("cpu"), shuffle=True)
    # Two ranks of 10: a global batch of 20 is more than the 16 windows there are.
    with pytest.raises(DataError, match=r"a batch of 20 windows is more than the 16"):
        WindowLoader(data, 4, 10, torch.device("cpu"), shuffle=True, rank=1, world_size=2)
