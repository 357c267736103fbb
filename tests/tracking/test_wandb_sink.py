"""The W&B sink: mode resolution, and a whole offline run that never touches the network."""

from __future__ import annotations

import json
import socket
import struct
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.tracking import CONFIG, fake_epoch, fake_sample, fake_steps, fake_summary
from trainscope.tracking import make_sinks
from trainscope.tracking.wandb_sink import has_credentials, resolve_mode

pytestmark = pytest.mark.timeout(120)


# --- mode: pure functions of the environment and a netrc file ----------------------------


def netrc_file(tmp_path: Path, machine: str = "api.wandb.ai") -> str:
    path = tmp_path / "netrc"
    path.write_text(f"machine {machine}\n  login user\n  password {'k' * 40}\n")
    return str(path)


def test_mode_is_offline_without_credentials(tmp_path: Path) -> None:
    env = {"NETRC": str(tmp_path / "absent")}
    assert not has_credentials(env) and resolve_mode(env) == "offline"


def test_mode_is_online_with_a_key_or_a_netrc_login(tmp_path: Path) -> None:
    assert resolve_mode({"WANDB_API_KEY": "k" * 40, "NETRC": "/nonexistent"}) == "online"
    assert resolve_mode({"NETRC": netrc_file(tmp_path)}) == "online"


def test_netrc_login_must_be_for_the_configured_host(tmp_path: Path) -> None:
    env = {"NETRC": netrc_file(tmp_path, "wandb.example.com")}
    assert resolve_mode(env) == "offline"
    env["WANDB_BASE_URL"] = "https://wandb.example.com"
    assert resolve_mode(env) == "online"


def test_an_unreadable_netrc_means_no_credentials(tmp_path: Path) -> None:
    bad = tmp_path / "netrc"
    bad.write_text('machine "unterminated\n')
    assert resolve_mode({"NETRC": str(bad)}) == "offline"


def test_wandb_mode_is_honoured(tmp_path: Path) -> None:
    assert resolve_mode({"WANDB_MODE": "offline", "WANDB_API_KEY": "k" * 40}) == "offline"
    assert resolve_mode({"WANDB_MODE": "disabled"}) == "disabled"
    assert resolve_mode({"WANDB_MODE": "online", "NETRC": "/nonexistent"}) == "online"


# --- a whole run, offline, with the network watched --------------------------------------


class Tripwire:
    """A local TCP listener standing in for the W&B server and every HTTP(S) proxy.

    wandb's Python side and its wandb-core process both read these environment variables,
    so any HTTP request either of them made would land here and be counted.
    """

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.sock.settimeout(0.2)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.hits = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.hits += 1
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.sock.close()


@pytest.fixture
def offline_wandb(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    """wandb with every directory in tmp_path, no credentials, and the network watched."""
    wandb = pytest.importorskip("wandb")
    wandb.teardown()  # forget settings cached by any earlier wandb use in this process
    tripwire = Tripwire()
    home = tmp_path / "wandb-home"
    for var, sub in (
        ("WANDB_DIR", "dir"),
        ("WANDB_CACHE_DIR", "cache"),
        ("WANDB_CONFIG_DIR", "config"),
        ("WANDB_DATA_DIR", "data"),
    ):
        (home / sub).mkdir(parents=True)
        monkeypatch.setenv(var, str(home / sub))
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_ERROR_REPORTING", "false")
    monkeypatch.setenv("WANDB_BASE_URL", tripwire.url)
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.setenv(var, tripwire.url)
    for var in ("NO_PROXY", "no_proxy", "WANDB_API_KEY", "WANDB_IDENTITY_TOKEN_FILE"):
        monkeypatch.delenv(var, raising=False)

    # Python-side guard as well: refuse any connection or DNS lookup that is not local.
    attempts: list[Any] = []
    real_connect = socket.socket.connect
    real_getaddrinfo = socket.getaddrinfo
    local = {"127.0.0.1", "::1", "localhost"}

    def connect(self: socket.socket, address: Any) -> Any:
        if self.family in (socket.AF_INET, socket.AF_INET6) and address[0] not in local:
            attempts.append(address)
            raise OSError(f"network access in a test: {address}")
        return real_connect(self, address)

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        if host not in local and host is not None:
            attempts.append(host)
            raise OSError(f"DNS lookup in a test: {host}")
        return real_getaddrinfo(host, *args, **kwargs)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    state = {"wandb": wandb, "tripwire": tripwire, "attempts": attempts}
    try:
        yield state
    finally:
        wandb.teardown()  # stops wandb-core, so nothing of this test outlives it
        tripwire.close()
    assert tripwire.hits == 0, "something tried to reach a W&B server or a proxy"
    assert attempts == [], f"network access attempted: {attempts}"


# The .wandb file is wandb's transaction log: a 7-byte header (":W&B", magic, version),
# then LevelDB-log framed protobuf Records in 32 KiB blocks. Reading it back lets the test
# check values; if a wandb release changes the format, only the value checks skip.
BLOCK = 32 * 1024


def read_wandb_records(path: Path) -> list[Any]:
    pb = pytest.importorskip("wandb.proto.wandb_internal_pb2")
    data = path.read_bytes()
    if data[:4] != b":W&B":
        pytest.skip(f"unknown .wandb file format (header {data[:7]!r})")
    records, pos, pending = [], 7, b""
    while pos + 7 <= len(data):
        left = BLOCK - pos % BLOCK
        if left < 7:  # block trailer padding
            pos += left
            continue
        _crc, length, kind = struct.unpack_from("<IHB", data, pos)
        pos += 7
        if kind == 0 and length == 0:  # zero padding to the end of the block
            pos += left - 7
            continue
        chunk, pos = data[pos : pos + length], pos + length
        if kind in (1, 2):  # full, first
            pending = chunk
        else:  # middle, last
            pending += chunk
        if kind in (1, 4):
            record = pb.Record()
            record.ParseFromString(pending)
            records.append(record)
    return records


def items(rows: Any) -> dict[str, Any]:
    return {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in rows}


def run_sink(run_dir: Path, status: str) -> Any:
    sinks = make_sinks(["wandb"])
    sinks.start(run_dir, CONFIG, {"status": "running", "workload": "digits-mlp"})
    sinks.log_steps(fake_steps(1, 1, 3))
    # Two system samples between step batches: with step= logging, W&B would drop rows.
    sinks.log_system(fake_sample(1000.0))
    sinks.log_system(fake_sample(1001.5))
    sinks.log_epoch(fake_epoch(1, val=False))
    sinks.log_steps(fake_steps(2, 4, 3))
    sinks.log_epoch(fake_epoch(2, val=True))
    sinks.finish(fake_summary(status))
    assert sinks.warnings_list == []
    return sinks.sinks[0]


def offline_run_file(run_dir: Path, wandb: Any) -> Path:
    # finish() returns before wandb-core has necessarily written the file out (seen with
    # wandb 0.19.10 on a busy machine); shutting the service down waits for it.
    wandb.teardown()
    runs = list((run_dir / "wandb").glob("offline-run-*"))
    assert len(runs) == 1, runs
    files = list(runs[0].glob("*.wandb"))
    assert len(files) == 1 and files[0].stat().st_size > 0, files
    return files[0]


def test_offline_run_logs_everything_under_the_run_dir(
    tmp_path: Path, offline_wandb: dict[str, Any]
) -> None:
    run_dir = tmp_path / "digits-run"
    run_dir.mkdir()
    sink = run_sink(run_dir, "completed")
    assert sink.mode == "offline"
    path = offline_run_file(run_dir, offline_wandb["wandb"])
    assert not any((tmp_path / "wandb-home" / "dir").iterdir())  # dir= beats WANDB_DIR

    records = read_wandb_records(path)
    kinds = [r.WhichOneof("record_type") for r in records]
    run = next(r.run for r in records if r.WhichOneof("record_type") == "run")
    assert run.project == "trainscope" and run.display_name == "digits-run"
    config = items(run.config.update)  # later "config" records would only add to it
    for r in records:
        if r.WhichOneof("record_type") == "config":
            config.update(items(r.config.update))
    assert config["train"]["optimizer"] == "sgd" and config["out"] is None

    history = [items(r.history.item) for r in records if r.WhichOneof("record_type") == "history"]
    steps = [h for h in history if "train/loss" in h]
    expected = fake_steps(1, 1, 3) + fake_steps(2, 4, 3)
    assert [h["train/step"] for h in steps] == [r["step"] for r in expected]  # none dropped
    assert [h["train/loss"] for h in steps] == pytest.approx([r["loss"] for r in expected])
    assert steps[0]["stages/forward_s"] == pytest.approx(expected[0]["stages"]["forward"])
    epochs = [h for h in history if "epoch/epoch" in h]
    assert [h["epoch/epoch"] for h in epochs] == [1, 2]
    assert "epoch/val_accuracy" not in epochs[0] and epochs[1]["epoch/val_accuracy"] == 0.7
    system = [h for h in history if "system/elapsed_s" in h]
    assert [h["system/elapsed_s"] for h in system] == [0.0, 1.5]
    assert system[0]["system/gpu0_util_percent"] == 87 and system[0]["system/rss_mib"] == 512

    summary: dict[str, Any] = {}
    for r in records:
        if r.WhichOneof("record_type") == "summary":
            summary.update(items(r.summary.update))
    assert summary["test_accuracy"] == 0.9375 and summary["status"] == "completed"
    assert summary["stages_s/forward"] == 2.0
    assert "exit" in kinds
    assert next(r.exit for r in records if r.WhichOneof("record_type") == "exit").exit_code == 0


def test_without_credentials_it_falls_back_to_offline_and_says_so(
    tmp_path: Path,
    offline_wandb: dict[str, Any],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.delenv("WANDB_MODE")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    sink = run_sink(run_dir, "failed")
    assert sink.mode == "offline"
    path = offline_run_file(run_dir, offline_wandb["wandb"])
    assert "logging offline; upload later with: wandb sync" in capsys.readouterr().err
    records = read_wandb_records(path)
    exit_record = next(r.exit for r in records if r.WhichOneof("record_type") == "exit")
    assert exit_record.exit_code == 1  # a failed run is marked failed in W&B too


def test_quiet_run_silences_wandb_too(
    offline_wandb: dict[str, Any],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    """`-q` prints nothing but errors: W&B's banner, history and summary included (they go
    to the process's own stderr, hence capfd), and trainscope's offline note."""
    from trainscope.cli import main

    monkeypatch.delenv("WANDB_SILENT")
    monkeypatch.delenv("WANDB_MODE")  # offline because there are no credentials
    argv = ["run", "--epochs", "1", "--max-steps-per-epoch", "2", "--track", "wandb"]
    assert main([*argv, "--out", str(tmp_path / "quiet"), "-q"]) == 0
    out, err = capfd.readouterr()
    assert out == "" and err == "", (out, err)
    # Not quiet: the same run says where its offline W&B files are.
    assert main([*argv, "--out", str(tmp_path / "loud"), "--no-progress"]) == 0
    assert "logging offline" in capfd.readouterr().err
