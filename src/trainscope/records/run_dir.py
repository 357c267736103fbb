"""Writing and reading run directories (torch-free)."""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import yaml

from trainscope.errors import TrainscopeError

SCHEMA_VERSION = 1

# Every file a run may write; prepare_run_dir() refuses to reuse a directory holding any
# other file unless asked to overwrite.
RUN_FILES = (
    "config.yaml",
    "env.json",
    "metrics.jsonl",
    "system.jsonl",
    "summary.json",
    "model.safetensors",
)
RUN_FOLDERS = ("report", "tensorboard", "wandb", "ranks")

# Stages of a run in the order they are shown. Their seconds add up to wall_time_s:
# "other" is computed as wall - sum(the rest) and is reported, never hidden.
STAGES = (
    "setup",
    "data_wait",
    "h2d",
    "forward",
    "backward",
    "comm",
    "optimizer",
    "evaluation",
    "other",
)
STAGE_LABELS = {
    "setup": "setup (data, model)",
    "data_wait": "data wait",
    "h2d": "host-to-device copy",
    "forward": "forward",
    "backward": "loss + backward",
    "comm": "gradient sync (comm)",
    "optimizer": "optimizer step",
    "evaluation": "evaluation (val + test)",
    "other": "other",
}


def atomic_write_json(path: Path, obj: Any) -> None:
    """Write ``obj`` as JSON to ``path`` so a reader sees the old file or the new, never half."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(obj, f, indent=2, sort_keys=False, default=_json_default)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        # mkstemp makes the file private (0600); give it the mode a plain open() would.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _json_default(obj: Any) -> Any:
    # numpy scalars and Paths show up in summaries; everything else is a bug.
    if hasattr(obj, "item"):
        return obj.item()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def prepare_run_dir(path: str | os.PathLike, overwrite: bool = False) -> Path:
    """Create (or, with ``overwrite``, empty of run files) the run directory.

    Refuses an existing non-empty directory unless ``overwrite`` is set, and checks that
    the directory is writable before any training starts.
    """
    run_dir = Path(path)
    if run_dir.exists() and not run_dir.is_dir():
        raise TrainscopeError(f"--out {run_dir} exists and is not a directory")
    if run_dir.is_dir() and any(run_dir.iterdir()):
        if not overwrite:
            raise TrainscopeError(
                f"--out {run_dir} already exists and is not empty (pass --overwrite to replace it)"
            )
        # Only remove what a run writes; anything else the user put there is left alone.
        for name in RUN_FILES:
            (run_dir / name).unlink(missing_ok=True)
        # Folders a run (report, tracking sinks) writes: stale event files would otherwise
        # mix with the new run's in TensorBoard.
        for folder in RUN_FOLDERS:
            sub = run_dir / folder
            if sub.is_dir():
                for p in sorted(sub.rglob("*"), reverse=True):
                    p.rmdir() if p.is_dir() and not p.is_symlink() else p.unlink()
                sub.rmdir()
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        probe = run_dir / ".write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as e:
        raise TrainscopeError(f"--out {run_dir} is not writable: {e.strerror or e}") from None
    return run_dir


class RunWriter:
    """Append-only writer of one run directory.

    ``metrics.jsonl`` lines are flushed when :meth:`flush` is called (the loop does so at
    every resolution point), so a killed run leaves every line but possibly the last.
    """

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = Path(run_dir)
        self._metrics: TextIO = open(self.run_dir / "metrics.jsonl", "a", buffering=1 << 16)

    def write_config(self, config_dict: dict[str, Any]) -> None:
        """Save the resolved config as YAML (loadable by ``trainscope run --config``)."""
        text = yaml.safe_dump(config_dict, sort_keys=False)
        (self.run_dir / "config.yaml").write_text(text)

    def write_env(self, env: dict[str, Any]) -> None:
        """Save the environment description."""
        atomic_write_json(self.run_dir / "env.json", env)

    def log(self, event: str, **fields: Any) -> None:
        """Append one event line to metrics.jsonl (buffered until :meth:`flush`)."""
        rec = {"event": event, **fields}
        self._metrics.write(json.dumps(rec, default=_json_default) + "\n")

    def flush(self) -> None:
        """Push buffered metric lines to the file."""
        self._metrics.flush()

    def write_summary(self, summary: dict[str, Any]) -> None:
        """Write summary.json atomically."""
        summary = {"schema_version": SCHEMA_VERSION, **summary}
        atomic_write_json(self.run_dir / "summary.json", summary)

    def close(self) -> None:
        """Flush and close metrics.jsonl."""
        if not self._metrics.closed:
            self._metrics.flush()
            self._metrics.close()


@dataclass
class RunRecord:
    """Everything a report needs, read back from a run directory."""

    path: Path
    summary: dict[str, Any]
    config: dict[str, Any] = field(default_factory=dict)
    env: dict[str, Any] = field(default_factory=dict)
    metrics: list[dict[str, Any]] = field(default_factory=list)
    system: list[dict[str, Any]] = field(default_factory=list)

    def events(self, kind: str) -> list[dict[str, Any]]:
        """The metrics.jsonl events of one kind, in order."""
        return [m for m in self.metrics if m.get("event") == kind]


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            # A killed run may leave its last line half written; keep what is whole.
            continue
    return out


def load_run(path: str | os.PathLike) -> RunRecord:
    """Read a run directory; a missing or unreadable summary is a clear error."""
    run_dir = Path(path)
    summary_path = run_dir / "summary.json"
    if not run_dir.is_dir():
        raise TrainscopeError(f"{run_dir} is not a directory")
    if not summary_path.exists():
        raise TrainscopeError(f"{run_dir} is not a run directory (no summary.json)")
    try:
        summary = json.loads(summary_path.read_text())
    except json.JSONDecodeError as e:
        raise TrainscopeError(f"{summary_path} is not valid JSON: {e}") from None
    config: dict[str, Any] = {}
    if (run_dir / "config.yaml").exists():
        config = yaml.safe_load((run_dir / "config.yaml").read_text()) or {}
    env: dict[str, Any] = {}
    if (run_dir / "env.json").exists():
        env = json.loads((run_dir / "env.json").read_text())
    return RunRecord(
        path=run_dir,
        summary=summary,
        config=config,
        env=env,
        metrics=_read_jsonl(run_dir / "metrics.jsonl"),
        system=_read_jsonl(run_dir / "system.jsonl"),
    )
