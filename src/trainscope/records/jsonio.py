"""Strict JSON in and out of records (torch-free).

Every JSON file trainscope writes must be readable by every JSON parser, so no bare
``NaN``/``Infinity`` ever reaches a file: a non-finite float is written as ``null``
(the record says elsewhere why, e.g. the step that diverged). Files are replaced
atomically so a reader sees the old file or the new one, never half of one.
"""

from __future__ import annotations

import errno
import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any

from trainscope.errors import TrainscopeError

# Temporary files of an atomic write: a killed write leaves one behind, and the owner of
# the directory (records/ownership.py) removes leftovers with this prefix.
TMP_PREFIX = ".tmp-trainscope-"


def finite(obj: Any) -> Any:
    """``obj`` with every non-finite float (nested in dicts, lists, tuples) made None."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite(v) for v in obj]
    return obj


def _default(obj: Any) -> Any:
    # numpy scalars and Paths show up in summaries; everything else is a bug.
    if hasattr(obj, "item"):
        value = obj.item()
        return finite(value)
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def dumps(obj: Any, **kwargs: Any) -> str:
    """Strict JSON text of ``obj`` (non-finite floats become null)."""
    try:  # almost every record is finite: one pass, no copy (a step record each 10 steps)
        return json.dumps(obj, allow_nan=False, default=_default, **kwargs)
    except ValueError:  # a NaN or an infinity somewhere: written as null
        return json.dumps(finite(obj), allow_nan=False, default=_default, **kwargs)


def atomic_write_text(path: Path, text: str) -> None:
    """Replace ``path`` by ``text`` atomically (temporary file, fsync, rename)."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f"{TMP_PREFIX}{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
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


def atomic_write_json(path: Path, obj: Any) -> None:
    """Write ``obj`` as strict JSON to ``path`` so a reader sees the old file or the new."""
    atomic_write_text(path, dumps(obj, indent=2) + "\n")


def no_space(e: BaseException) -> bool:
    """Whether ``e`` says the disk (or the user's quota) is full."""
    return isinstance(e, OSError) and e.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", -1))


def overwrite_json(path: Path, obj: Any) -> None:
    """Write ``obj`` over what ``path`` holds, in place: the last resort on a full disk,
    where the temporary file of an atomic write cannot be written but the blocks the file
    already has can. Refused (ENOSPC, nothing written) when the text needs more room than
    the file has; not atomic, so only for a record's last word."""
    data = (dumps(obj, indent=2) + "\n").encode("utf-8")
    fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if len(data) > max(st.st_size, st.st_blocks * 512):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        done = 0
        while done < len(data):  # a regular file takes it whole; looped all the same
            done += os.pwrite(fd, data[done:], done)
        os.ftruncate(fd, len(data))
        os.fsync(fd)
    finally:
        os.close(fd)


# A record file is read whole: beyond this it is not a record trainscope wrote.
MAX_RECORD_JSON_BYTES = 256 << 20


def read_json_object(path: Path) -> dict[str, Any]:
    """The JSON object in ``path``, or a TrainscopeError of one line saying what is wrong
    (missing, unreadable, too large, not UTF-8, not JSON, not an object)."""
    path = Path(path)
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_RECORD_JSON_BYTES + 1)
    except OSError as e:
        raise TrainscopeError(f"{path} cannot be read ({e.strerror or e})") from None
    if len(raw) > MAX_RECORD_JSON_BYTES:
        raise TrainscopeError(f"{path} is larger than {MAX_RECORD_JSON_BYTES >> 20} MiB")
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise TrainscopeError(f"{path} is not UTF-8 text") from None
    except (ValueError, RecursionError) as e:
        raise TrainscopeError(f"{path} is not valid JSON ({str(e).splitlines()[0]})") from None
    if not isinstance(data, dict):
        kind = "null" if data is None else type(data).__name__
        raise TrainscopeError(f"{path} holds {kind}, not an object")
    return data


def try_json_object(path: Path) -> dict[str, Any] | None:
    """The JSON object in ``path``, or None for anything else (a quiet check)."""
    try:
        return read_json_object(path)
    except TrainscopeError:
        return None
