"""A disk that fills while a run writes its record: the run ends in one line naming the
full disk, and its summary says so (``failed``), never ``running`` after the process
has exited.

The disk is a model of what a full file system refuses, patched into the record's
writers: once full, new bytes cannot be written (metrics lines, the temporary file of
an atomic write), while bytes a file already holds can be written over, which is all
a summary written in place needs. No real file system is filled."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path
from typing import Any

import pytest

from trainscope.cli import main
from trainscope.records import jsonio
from trainscope.records.run_dir import RunWriter
from trainscope.train.record import RunSummary

pytestmark = [pytest.mark.timeout(120), pytest.mark.usefixtures("isolated_cli")]

TINY = ["--epochs", "1", "--max-steps-per-epoch", "12", "--log-every", "2", "-q",
        "--no-progress", "--threads", "1"]  # fmt: skip


def _no_space(path: object = None) -> OSError:
    return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), None if path is None else str(path))


class Disk:
    """Fills after ``flushes`` flushes of metrics.jsonl (None: once training is over, as
    the record closes, with the test split's line still in the buffer)."""

    def __init__(self, flushes: int | None) -> None:
        self.flushes = flushes
        self.full = False
        self.run_dir: Path | None = None
        self.summary_room: int | None = None
        """What summary.json held on disk when the disk filled: room to write over."""

    def fill(self) -> None:
        if not self.full and self.run_dir is not None:
            self.full = True
            st = (self.run_dir / "summary.json").stat()
            self.summary_room = max(st.st_size, st.st_blocks * 512)


class Metrics:
    """metrics.jsonl on that disk: lines pile up in the buffer once it is full."""

    def __init__(self, real: Any, disk: Disk) -> None:
        self.real, self.disk = real, disk
        self.pending: list[str] = []
        self.count = 0

    @property
    def closed(self) -> bool:
        return self.real.closed

    def write(self, text: str) -> int:
        self.pending.append(text)
        return len(text)

    def flush(self) -> None:
        self.count += 1
        if self.disk.flushes is not None and self.count >= self.disk.flushes:
            self.disk.fill()
        if self.disk.full and self.pending:
            raise _no_space()
        self.real.write("".join(self.pending))
        self.pending.clear()
        self.real.flush()

    def close(self) -> None:
        try:
            self.flush()
        finally:
            self.real.close()


@pytest.fixture()
def disk(monkeypatch: pytest.MonkeyPatch) -> Disk:
    state = Disk(flushes=None)
    real_init, real_atomic, real_end = RunWriter.__init__, jsonio.atomic_write_text, RunSummary.end

    def init(self: RunWriter, *args: Any, **kwargs: Any) -> None:
        real_init(self, *args, **kwargs)
        if self.owned is not None and self.owned.kind == "run":
            state.run_dir = self.run_dir
            self._metrics = Metrics(self._metrics, state)  # type: ignore[assignment]

    def end(self: RunSummary) -> None:
        if state.flushes is None:
            state.fill()
        real_end(self)

    def atomic(path: Path, text: str) -> None:
        if state.full:
            raise _no_space(Path(path).parent / f"{jsonio.TMP_PREFIX}{Path(path).name}.x")
        real_atomic(path, text)

    monkeypatch.setattr(RunWriter, "__init__", init)
    monkeypatch.setattr(jsonio, "atomic_write_text", atomic)
    monkeypatch.setattr(RunSummary, "end", end)
    return state


def _run(capsys: pytest.CaptureFixture[str], out: Path) -> tuple[int, list[str]]:
    capsys.readouterr()
    code = main(["run", *TINY, "--out", str(out)])
    return code, capsys.readouterr().err.strip().splitlines()


@pytest.mark.parametrize("flushes", [3, None], ids=["mid-run", "at-the-last-flush"])
def test_a_full_disk_ends_the_record_truthfully(
    isolated_cli: Path, capsys: pytest.CaptureFixture[str], disk: Disk, flushes: int | None
) -> None:
    disk.flushes = flushes
    code, err = _run(capsys, isolated_cli / "r")
    assert code == 1 and len(err) == 1, err
    assert "disk is full" in err[0] and "No space left" in err[0], err
    assert disk.full
    summary = json.loads((isolated_cli / "r" / "summary.json").read_text())
    assert summary["status"] == "failed", summary.get("status")
    assert "disk is full" in summary["error"] and "No space left" in summary["error"]
    assert summary["workload"] == "digits" and summary.get("finished_at")
    # Written over what the file held: no byte more than the full disk had room for.
    assert disk.summary_room is not None
    assert (isolated_cli / "r" / "summary.json").stat().st_size <= disk.summary_room
