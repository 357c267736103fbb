"""Writing and reading run directories (torch-free)."""

from __future__ import annotations

import json
import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import yaml

from trainscope.errors import TrainscopeError
from trainscope.records.attempts import current_events
from trainscope.records.jsonio import (
    atomic_write_json,
    dumps,
    no_space,
    overwrite_json,
    read_json_object,
)
from trainscope.records.ownership import OwnedDir, claim_dir, refuse_linked_folder
from trainscope.records.record_specs import SUMMARY
from trainscope.records.schema import check
from trainscope.records.view import SummaryView
from trainscope.util.safe_yaml import load_yaml

SCHEMA_VERSION = 1

# The files every run writes (a run also records, as it writes them, its workload's
# artifacts and what tracking sinks and the ranks put in their folders).
RUN_FILES = (
    "config.yaml",
    "env.json",
    "metrics.jsonl",
    "system.jsonl",
    "summary.json",
    "model.safetensors",
)

OUT_ROOT_ENV = "TRAINSCOPE_RUNS"


def output_root() -> Path:
    """Where runs, studies and comparisons go when no --out is given: ``runs/`` in the
    current folder, or the folder ``$TRAINSCOPE_RUNS`` names."""
    return Path(os.environ.get(OUT_ROOT_ENV) or "runs")


# Stages of a run in the order they are shown. Their seconds add up to wall_time_s:
# "other" is computed as wall - sum(the rest) and is reported, never hidden.
STAGES = (
    "setup",
    "compile",
    "data_wait",
    "h2d",
    "forward",
    "backward",
    "comm",
    "pipeline_wait",
    "optimizer",
    "checkpoint",
    "evaluation",
    "other",
)
STAGE_LABELS = {
    "setup": "setup (data, model)",
    "compile": "compile (torch.compile)",
    "data_wait": "data wait",
    "h2d": "host-to-device copy",
    "forward": "forward",
    "backward": "loss + backward",
    "comm": "gradient sync (comm)",
    "pipeline_wait": "pipeline wait (bubble + transfers)",
    "optimizer": "optimizer step",
    "checkpoint": "checkpoint writes",
    "evaluation": "evaluation (val + test)",
    "other": "other",
}


def reopen_run_dir(path: str | os.PathLike, kind: str = "run") -> OwnedDir:
    """A run directory trainscope wrote, locked again to go on with it (``--resume``):
    nothing in it is removed. Refused when it is not a trainscope run directory, or while
    another process holds it."""
    p = Path(path)
    if not (p / "summary.json").is_file() and kind == "run":
        raise TrainscopeError(f"--resume {p}: not a run directory (no summary.json there)")
    owned = claim_dir(p, kind, existing="keep", what="--resume")
    try:
        # It goes on writing checkpoints: a linked folder is refused now, before training,
        # not when the first new checkpoint is due.
        refuse_linked_folder(owned.path, "checkpoints")
        owned.record(*RUN_FILES)
    except OSError as e:
        owned.release()
        raise TrainscopeError(f"--resume {owned.path} is not writable: {e.strerror or e}") from None
    except TrainscopeError:
        owned.release()
        raise
    return owned


def prepare_run_dir(
    path: str | os.PathLike, overwrite: bool = False, kind: str = "run"
) -> OwnedDir:
    """Create (or, with ``overwrite``, clear of what trainscope wrote) the run directory.

    Refuses an existing non-empty directory unless ``overwrite`` is set, refuses even then
    a directory trainscope did not mark as its own, and holds the directory's lock until
    the returned :class:`OwnedDir` is released (a second run into it is refused meanwhile).
    Checks that the directory is writable before any training starts.
    """
    owned = claim_dir(path, kind, existing="clear" if overwrite else "refuse")
    try:
        owned.record(*RUN_FILES)  # listed before written: a killed run stays removable
    except OSError as e:
        owned.release()
        raise TrainscopeError(f"--out {owned.path} is not writable: {e.strerror or e}") from None
    return owned


class RunWriter:
    """Append-only writer of one run directory.

    ``metrics.jsonl`` lines are flushed when :meth:`flush` is called (the loop does so at
    every resolution point), so a killed run leaves every line but possibly the last.
    Every line and file is strict JSON: a non-finite number is written as null.
    """

    def __init__(self, run_dir: OwnedDir | Path, attempt: int = 1) -> None:
        self.owned = run_dir if isinstance(run_dir, OwnedDir) else None
        # A resumed run's lines say which attempt wrote them (see records.attempts); the
        # first attempt's lines carry no such field, so a run never resumed reads as before.
        self.attempt = attempt
        self.run_dir = Path(run_dir)
        self._metrics: TextIO = open(
            self.run_dir / "metrics.jsonl", "a", buffering=1 << 16, encoding="utf-8"
        )
        self.lost: OSError | None = None
        """Why the last metrics lines could not be written when it closed (a full disk):
        the summary, written next, says so (:meth:`close` does not raise it)."""

    def record(self, *files: str, dirs: tuple[str, ...] = ()) -> None:
        """Note files (and folders) in the directory's marker before writing them."""
        if self.owned is not None:
            self.owned.record(*files, dirs=dirs)

    def write_config(self, config_dict: dict[str, Any]) -> None:
        """Save the resolved config as YAML (loadable by ``trainscope run --config``)."""
        text = yaml.safe_dump(config_dict, sort_keys=False)
        (self.run_dir / "config.yaml").write_text(text, encoding="utf-8")

    def write_env(self, env: dict[str, Any]) -> None:
        """Save the environment description."""
        atomic_write_json(self.run_dir / "env.json", env)

    def log(self, event: str, **fields: Any) -> None:
        """Append one event line to metrics.jsonl (buffered until :meth:`flush`)."""
        line = {"event": event, **fields}
        if self.attempt > 1:
            line["attempt"] = self.attempt
        self._metrics.write(dumps(line) + "\n")

    def flush(self) -> None:
        """Push buffered metric lines to the file."""
        self._metrics.flush()

    def write_summary(self, summary: dict[str, Any]) -> None:
        """Write summary.json atomically. The summary of a run that has ended (any status
        but ``running``), refused by a full disk, is written over the one already there,
        whole if it fits in the file's room, else its top-level fields: a record must not
        stay ``running`` after its process has exited."""
        summary = {"schema_version": SCHEMA_VERSION, **summary}
        path = self.run_dir / "summary.json"
        try:
            atomic_write_json(path, summary)
        except OSError as e:
            if not (no_space(e) and summary.get("status") != "running" and path.is_file()):
                raise
            _overwrite_summary(path, summary, e)

    def close(self) -> None:
        """Flush and close metrics.jsonl. Lines a full disk refuses are lost, and said
        so in :attr:`lost`, not raised: the run's summary must still be written after."""
        if self._metrics.closed:
            return
        try:
            self._metrics.flush()
        except OSError as e:
            self.lost = self.lost or e
        try:
            self._metrics.close()
        except OSError as e:  # the buffer's second try at the same lines
            self.lost = self.lost or e

    def release(self) -> None:
        """Close, then give up the directory's lock (the run is over)."""
        self.close()
        if self.owned is not None:
            self.owned.release()


def _overwrite_summary(path: Path, summary: dict[str, Any], refused: OSError) -> None:
    """The summary in place of the one at ``path`` (see :meth:`RunWriter.write_summary`):
    whole, else its top-level fields with a note; ``refused`` when neither fits."""
    small = {k: v for k, v in summary.items() if not isinstance(v, (dict, list))}
    small["notes"] = ["summary.json holds its top-level fields only: the disk was full"]
    for attempt in (summary, small):
        try:
            overwrite_json(path, attempt)
            return
        except OSError:
            continue
    raise refused


class RecordWarning(UserWarning):
    """Part of a record could not be read; the rest is reported (shown as one line)."""


@dataclass
class RunRecord:
    """Everything a report needs, read back from a run directory."""

    path: Path
    summary: dict[str, Any]
    config: dict[str, Any] = field(default_factory=dict)
    env: dict[str, Any] = field(default_factory=dict)
    metrics: list[dict[str, Any]] = field(default_factory=list)
    system: list[dict[str, Any]] = field(default_factory=list)
    left_out: list[str] = field(default_factory=list)
    """One line per summary field left out because it does not fit its schema
    (:data:`~trainscope.records.record_specs.SUMMARY`): reports show them as notes."""

    @property
    def view(self) -> SummaryView:
        """The summary's fields, typed (:class:`~trainscope.records.view.SummaryView`)."""
        return SummaryView(self.summary)

    def events(self, kind: str) -> list[dict[str, Any]]:
        """The metrics.jsonl events of one kind, in order."""
        return [m for m in self.metrics if m.get("event") == kind]


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The JSON objects of a .jsonl file, one per line; lines that are not are skipped."""
    if not path.is_file():
        return []
    out, bad = [], 0
    with open(path, "rb") as f:
        lines = f.read().splitlines()
    for i, raw in enumerate(lines):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            # A killed run may leave its last line half written: that one is expected.
            bad += i != len(lines) - 1
            continue
        if isinstance(obj, dict):
            out.append(obj)
        else:
            bad += 1
    if bad:
        warnings.warn(
            f"{path}: skipped {bad} line(s) that are not JSON objects; reporting the rest",
            RecordWarning,
            stacklevel=2,
        )
    return out


def _read_json_object(path: Path, *, required: bool) -> dict[str, Any]:
    """A JSON object from ``path``: one-line error if required, else a warning and {}."""
    try:
        return read_json_object(path)
    except TrainscopeError as e:
        if required:
            raise
        warnings.warn(f"{e}; left out", RecordWarning, stacklevel=2)
        return {}


def _read_config(path: Path) -> dict[str, Any]:
    """config.yaml as plain data, or {} with a warning (a report never needs it whole)."""
    try:
        return load_yaml(path)
    except TrainscopeError as e:
        warnings.warn(f"{e}; left out", RecordWarning, stacklevel=2)
        return {}


def read_summary(path: str | os.PathLike[str]) -> tuple[dict[str, Any], list[str]]:
    """A summary.json checked against its schema (:data:`~trainscope.records.
    record_specs.SUMMARY`): the summary without the optional fields that do not fit, and
    one line per field left out. One-line TrainscopeError when it cannot be read, is not
    an object, or a required field (``status``) is missing or wrong."""
    return check(read_json_object(Path(path)), SUMMARY, path)


def try_summary(path: str | os.PathLike[str]) -> dict[str, Any]:
    """:func:`read_summary`'s summary, or {} for one that cannot be read (a quiet check:
    what a resumed run goes on from, where a missing record is no error)."""
    try:
        return read_summary(path)[0]
    except TrainscopeError:
        return {}


def load_run(path: str | os.PathLike) -> RunRecord:
    """Read a run directory; a missing or unreadable summary is a clear error, and so is
    one whose required fields are missing or wrong (``status``).

    Anything else that cannot be read (env.json, config.yaml, single lines of the .jsonl
    files, a summary field that does not fit its schema) is left out with a
    :class:`RecordWarning`, and the rest is reported.
    """
    run_dir = Path(path)
    summary_path = run_dir / "summary.json"
    if not run_dir.is_dir():
        raise TrainscopeError(f"{run_dir} is not a directory")
    if not summary_path.is_file():
        raise TrainscopeError(f"{run_dir} is not a run directory (no summary.json)")
    summary, left_out = read_summary(summary_path)
    for line in left_out:
        warnings.warn(line, RecordWarning, stacklevel=2)
    config = _read_config(run_dir / "config.yaml") if (run_dir / "config.yaml").exists() else {}
    env_path = run_dir / "env.json"
    env = _read_json_object(env_path, required=False) if env_path.exists() else {}
    return RunRecord(
        path=run_dir,
        summary=summary,
        config=config,
        env=env,
        # Each step once, as the run that went on took it (see records.attempts).
        metrics=current_events(read_jsonl(run_dir / "metrics.jsonl")),
        system=read_jsonl(run_dir / "system.jsonl"),
        left_out=left_out,
    )
