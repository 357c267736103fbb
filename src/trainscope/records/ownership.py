"""Which files are trainscope's: the marker of every directory it writes, a lock while it
writes there, and the only code that deletes anything (torch-free).

Every directory trainscope creates for its output (a run, a rank's folder, a study, a
report, a comparison) holds a marker file, ``.trainscope``: a JSON object naming the kind
of directory and every file and sub-folder trainscope wrote there, each added to the
marker *before* the file is created. Deleting follows three rules:

- a directory without a valid marker is never emptied (``--overwrite`` is refused);
- inside a marked directory only what the marker lists is removed (and marked
  sub-directories, by their own markers, and ``.tmp-trainscope-*`` leftovers of a killed
  write); a user's file beside them stays;
- symbolic links are never followed: every path is walked with directory file
  descriptors and ``O_NOFOLLOW``, so a link (to anywhere) is at most unlinked itself when
  the marker lists its name, and nothing behind it is touched.

While a process writes a directory it holds an exclusive ``flock`` on
``.trainscope.lock`` in it. The OS releases that lock when the process dies however it
dies, so a second writer is refused while the first lives and never by a stale file.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
from collections.abc import Iterable, Iterator
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from trainscope.errors import TrainscopeError
from trainscope.records.jsonio import TMP_PREFIX, atomic_write_json
from trainscope.records.legacy_dirs import REPORT_FIGURES as REPORT_FIGURES  # re-exported
from trainscope.records.legacy_dirs import legacy_files
from trainscope.version import __version__

try:  # flock is POSIX; on other systems the directory is simply not locked.
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

MARKER = ".trainscope"
LOCK = ".trainscope.lock"
KINDS = ("run", "rank", "study", "report", "compare")
# The marker must stay small: it is read whole before anything is deleted.
MAX_MARKER_BYTES = 4 << 20
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC

Existing = Literal["refuse", "clear", "keep"]


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _safe_rel(rel: str) -> PurePosixPath:
    """A marker entry as a path strictly inside its directory, or a ValueError."""
    p = PurePosixPath(rel)
    if not rel or p.is_absolute() or any(part in ("", ".", "..") for part in p.parts):
        raise ValueError(rel)
    if "\x00" in rel or rel != str(p):
        raise ValueError(rel)
    return p


def read_marker(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The marker of directory ``path`` if it holds a valid one (never through a link)."""
    try:
        dir_fd = os.open(path, _DIR_FLAGS)
    except OSError:
        return None
    try:
        return _read_marker_at(dir_fd)
    finally:
        os.close(dir_fd)


def _read_marker_at(dir_fd: int) -> dict[str, Any] | None:
    try:
        fd = os.open(MARKER, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        with os.fdopen(os.dup(fd), "rb") as f:
            raw = f.read(MAX_MARKER_BYTES + 1)
    finally:
        os.close(fd)
    if len(raw) > MAX_MARKER_BYTES:
        return None
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("kind") not in KINDS:
        return None
    for key in ("files", "dirs"):
        entries = data.get(key, [])
        if not isinstance(entries, list) or not all(isinstance(e, str) for e in entries):
            return None
    return data


def _real_dir(path: Path) -> bool:
    """``path`` is a directory, and not a symbolic link to one."""
    return not path.is_symlink() and path.is_dir()


def refuse_linked_folder(root: Path, rel: str | PurePosixPath) -> None:
    """Refuse, in one line, when ``root/rel`` or a folder between ``root`` and it is a
    symbolic link: trainscope is about to write there, and it writes only into folders it
    made. Deleting never follows a link either, so what a write through one left behind
    could never be cleared. The link and what it points to stay as they are (the user made
    it; removing it is theirs to decide). ``root`` itself is not checked: it is the
    ``--out`` the user chose."""
    path = Path(root)
    for part in PurePosixPath(rel).parts:
        path = path / part
        if path.is_symlink():
            raise TrainscopeError(
                f"{path} is a symbolic link; trainscope writes only into folders it made, "
                "never through a link: remove the link (what it points to is not touched) "
                "and run again"
            )
        if not path.exists():
            return  # nothing below a missing folder exists yet


class OwnedDir:
    """A directory trainscope writes, locked for as long as this object holds it.

    :meth:`record` adds names to the marker before the caller creates them, so whatever a
    killed process left behind is still listed (and removable) afterwards.
    """

    def __init__(self, path: Path, kind: str, marker: dict[str, Any], lock_fd: int | None):
        self.path = path
        self.kind = kind
        self._marker = marker
        self._lock_fd = lock_fd
        self._pid = os.getpid()  # a forked child has closed its copy of the lock already

    def __fspath__(self) -> str:
        return os.fspath(self.path)

    def __truediv__(self, other: str) -> Path:
        return self.path / other

    @property
    def files(self) -> list[str]:
        """Every file recorded as written here (relative paths)."""
        return list(self._marker["files"])

    def record(self, *files: str, dirs: Iterable[str] = ()) -> None:
        """Add files (and sub-folders) to the marker, before they are written.

        A folder on the way to any of them that is a symbolic link is refused (one line):
        the caller is about to write there, and trainscope never writes through a link."""
        changed = False
        for key, names in (("files", files), ("dirs", dirs)):
            for name in names:
                safe = _safe_rel(str(PurePosixPath(name)))
                refuse_linked_folder(self.path, safe if key == "dirs" else safe.parent)
                rel = str(safe)
                if rel not in self._marker[key]:
                    self._marker[key].append(rel)
                    changed = True
        if changed:
            atomic_write_json(self.path / MARKER, self._marker)

    def tree(self, folder: str) -> set[str]:
        """Every regular file now under ``folder`` (relative paths; links not followed)."""
        root = self.path / folder
        if not _real_dir(root):
            return set()
        found = set()
        for base, _, names in os.walk(root, followlinks=False):
            rel_base = Path(base).relative_to(self.path).as_posix()
            found |= {f"{rel_base}/{n}" for n in names if not n.startswith(TMP_PREFIX)}
        return found

    def record_tree(self, folder: str, before: set[str]) -> None:
        """Record the files that appeared under ``folder`` since ``before`` (its
        :meth:`tree` when writing began): what a build or a tracking sink wrote there,
        which only it knows, and never a file someone else had put there."""
        if not _real_dir(self.path / folder):
            return  # never made, or now a link: nothing was written there
        new = sorted(self.tree(folder) - before)
        parents = {str(PurePosixPath(f).parent) for f in new}
        self.record(*new, dirs=sorted(parents | {folder}))

    def release(self) -> None:
        """Give up the lock (idempotent). The marker stays: the directory is still ours."""
        if self._lock_fd is not None and self._pid == os.getpid():
            _HELD.discard(self._lock_fd)
            os.close(self._lock_fd)  # closing the only descriptor releases the flock
        self._lock_fd = None

    def __del__(self) -> None:
        # An object dropped without release() must not keep its directory locked.
        self.release()

    def __enter__(self) -> OwnedDir:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


# Lock descriptors this process holds. A flock belongs to the open file, which a forked
# child (a DataLoader worker) shares: the child closes its copies at once, so that a
# killed run's lock goes with the run itself, not with workers that outlive it a while.
_HELD: set[int] = set()


def _drop_inherited_locks() -> None:
    for fd in list(_HELD):
        with contextlib.suppress(OSError):
            os.close(fd)
    _HELD.clear()


os.register_at_fork(after_in_child=_drop_inherited_locks)


def _lock(path: Path, what: str) -> int | None:
    """Take the directory's exclusive lock, or refuse naming the process that holds it."""
    if fcntl is None:  # pragma: no cover
        return None
    try:
        fd = os.open(path / LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as e:  # read-only, a link in place of the lock file, ...
        raise TrainscopeError(f"{what} {path} is not writable: {e.strerror or e}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
        os.close(fd)
        who = f" (pid {holder})" if holder.isdigit() else ""
        raise TrainscopeError(
            f"{what} {path} is in use by another trainscope process{who}; wait for it to end "
            "or choose another directory"
        ) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, str(os.getpid()).encode(), 0)
    _HELD.add(fd)
    return fd


def _foreign_entries(path: Path) -> list[str]:
    """Names in ``path`` other than trainscope's own bookkeeping files."""
    return sorted(n for n in os.listdir(path) if n not in (MARKER, LOCK))


def claim_dir(
    path: str | os.PathLike[str],
    kind: str,
    *,
    existing: Existing = "refuse",
    what: str = "--out",
    register: bool = False,
) -> OwnedDir:
    """Create or reuse ``path`` as trainscope's ``kind`` directory, locked and marked.

    ``existing`` says what to do with a non-empty directory that trainscope marked as its
    own ``kind``: ``refuse`` it, ``clear`` what trainscope wrote there (``--overwrite``;
    reports), or ``keep`` it as it is (resuming a study). A non-empty directory without a
    marker is always refused: it holds someone else's files, unless everything in it is a
    name an earlier trainscope wrote there (see :mod:`~trainscope.records.legacy_dirs`).
    ``what`` names the option in messages. ``register`` lists the directory in its
    parent's marker (a run's or study's own ``report/`` folder, built later by another
    command); such a folder that is a symbolic link is refused, like every sub-folder
    trainscope writes into.
    """
    if kind not in KINDS:
        raise ValueError(f"unknown directory kind {kind!r}")
    p = Path(path)
    existed = _make_dir(p, existing, what, register)
    # The lock first, the checks after: checked before it, the folder could be filled by
    # another run between the check and the lock, and both would then write one record.
    lock_fd = _lock(p, what)
    try:
        marker = _mark(p, kind, existing, what)
    except BaseException as e:
        _unlock_refused(p, lock_fd, existed)
        if isinstance(e, OSError):
            raise TrainscopeError(f"{what} {p} is not writable: {e.strerror or e}") from None
        raise
    if register:
        _register_in_parent(p)
    return OwnedDir(p, kind, marker, lock_fd)


def _make_dir(p: Path, existing: Existing, what: str, register: bool) -> bool:
    """Create ``p`` (and its parents) after the checks that need no lock; whether it held
    a lock file already."""
    if register:  # a folder inside a run or study: a link there is not the user's --out
        refuse_linked_folder(p.parent, p.name)
    if p.is_symlink() and existing == "clear" and p.is_dir() and _foreign_entries(p):
        raise TrainscopeError(
            f"{what} {p} is a symbolic link; trainscope never deletes through a link: "
            "give the directory it points to"
        )
    if p.exists() and not p.is_dir():
        raise TrainscopeError(f"{what} {p} exists and is not a directory")
    try:
        p.mkdir(parents=True, exist_ok=True)
        return (p / LOCK).exists()
    except OSError as e:
        raise TrainscopeError(f"{what} {p} is not writable: {e.strerror or e}") from None


def _mark(p: Path, kind: str, existing: Existing, what: str) -> dict[str, Any]:
    """Check the locked ``p`` and write its marker, as ``existing`` asks; the marker."""
    marker = _checked_marker(p, kind, existing, what)
    if marker is not None:  # (a legacy one is written first, so clearing can read it)
        atomic_write_json(p / MARKER, marker)
    if marker is not None and existing == "clear":
        clear_owned(p, keep_lock=True)
        marker = None
    if marker is None or existing != "keep":
        marker = {"kind": kind, "created_at": _now(), "files": [], "dirs": []}
    marker.update(kind=kind, writer="trainscope", version=__version__)
    atomic_write_json(p / MARKER, marker)
    return marker


def _unlock_refused(p: Path, lock_fd: int | None, existed: bool) -> None:
    """Give up the lock of a directory not claimed after all; a folder refused is left as
    it was (no lock file of ours in it)."""
    if lock_fd is not None:
        _HELD.discard(lock_fd)
        os.close(lock_fd)
    if not existed and read_marker(p) is None:
        with contextlib.suppress(OSError):
            (p / LOCK).unlink()


def _checked_marker(p: Path, kind: str, existing: Existing, what: str) -> dict[str, Any] | None:
    """The marker of ``p`` (locked by the caller) if it may be used as asked, else one
    clear refusal: someone else's files, another kind of directory, or a non-empty one
    that is not to be replaced."""
    try:
        foreign = _foreign_entries(p)
    except OSError as e:
        raise TrainscopeError(f"{what} {p} is not writable: {e.strerror or e}") from None
    marker = read_marker(p)
    if foreign and marker is None:
        marker = _legacy_marker(p, kind)  # written by trainscope before markers existed
    if foreign and marker is None:
        hint = "" if existing == "keep" else "; trainscope only replaces directories it wrote"
        raise TrainscopeError(
            f"{what} {p} already exists, is not empty and holds no trainscope marker "
            f"({MARKER}){hint}: choose a new or empty directory"
        )
    if foreign and marker["kind"] != kind:
        raise TrainscopeError(
            f"{what} {p} is a trainscope {marker['kind']} directory, not a {kind} directory: "
            "choose another directory"
        )
    if foreign and existing == "refuse":
        raise TrainscopeError(
            f"{what} {p} already exists and is not empty (pass --overwrite to replace what "
            "trainscope wrote there)"
        )
    return marker


def _register_in_parent(p: Path) -> None:
    """List ``p`` in its parent's marker when the parent is trainscope's and idle (a
    report folder built after its run): an ``--overwrite`` of the parent then clears it.
    A parent in use (a run still writing) is left alone; its report is then left too."""
    parent = p.parent
    marker = read_marker(parent)
    if marker is None or p.name in marker["dirs"] or fcntl is None:
        return
    try:
        fd = os.open(parent / LOCK, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        marker = read_marker(parent)  # again, now that nobody else writes it
        if marker is not None and p.name not in marker["dirs"]:
            marker["dirs"].append(p.name)
            atomic_write_json(parent / MARKER, marker)
    except OSError:
        pass  # busy or read-only: the folder is simply not listed there
    finally:
        os.close(fd)


def _legacy_marker(p: Path, kind: str) -> dict[str, Any] | None:
    """A marker for a directory an earlier trainscope wrote, listing what it wrote; None
    if anything in it is not a name trainscope writes (or is a link)."""
    files = legacy_files(p, kind, (MARKER, LOCK))
    if files is None:
        return None
    return {"kind": kind, "created_at": _now(), "files": files, "dirs": [], "legacy": True}


# ---------------------------------------------------------------------------------------
# Deleting: only what a marker lists, never through a link
# ---------------------------------------------------------------------------------------


@contextlib.contextmanager
def _dir_at(parent_fd: int | None, name: str | os.PathLike[str]) -> Iterator[int | None]:
    """An fd of the real directory ``name`` (None if it is missing, a link, or no dir)."""
    try:
        fd = os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
    except OSError:
        yield None
        return
    try:
        yield fd
    finally:
        os.close(fd)


@contextlib.contextmanager
def _walk_to(root_fd: int, parts: tuple[str, ...]) -> Iterator[int | None]:
    """An fd of root/parts..., every component a real directory, or None."""
    with contextlib.ExitStack() as stack:
        fd: int | None = root_fd
        for part in parts:
            fd = stack.enter_context(_dir_at(fd, part))
            if fd is None:
                break
        yield fd


def _lstat_at(dir_fd: int, name: str) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return None


def _unlink_file_at(dir_fd: int, name: str) -> None:
    st = _lstat_at(dir_fd, name)
    # A regular file or a link (removing a link removes only the link); never a folder.
    if st is not None and (stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode)):
        os.unlink(name, dir_fd=dir_fd)


def _clear_temp_folder_at(dir_fd: int, name: str) -> None:
    """Remove a temporary folder trainscope made (its name has TMP_PREFIX) with the files
    directly inside it; never through a link, never deeper."""
    with _dir_at(dir_fd, name) as fd:
        for entry in os.listdir(fd) if fd is not None else []:
            _unlink_file_at(fd, entry)
    _rmdir_if_empty_at(dir_fd, name)


def _rmdir_if_empty_at(dir_fd: int, name: str) -> None:
    with contextlib.suppress(OSError):  # not empty, gone, or a link: leave it
        st = _lstat_at(dir_fd, name)
        if st is not None and stat.S_ISDIR(st.st_mode):
            os.rmdir(name, dir_fd=dir_fd)


def _check_unlocked(dir_fd: int, path: Path) -> int | None:
    """Lock a marked directory about to be cleared; refuse if a live process holds it."""
    if fcntl is None:  # pragma: no cover
        return None
    try:
        fd = os.open(LOCK, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError:
        return None  # never locked (or not writable: the unlinks below will say so)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise TrainscopeError(
            f"{path} is in use by another trainscope process; wait for it to end"
        ) from None
    return fd


def clear_owned(path: str | os.PathLike[str], *, keep_lock: bool = False) -> None:
    """Remove what trainscope wrote in the marked directory ``path``; refuse otherwise.

    The directory itself stays, marked, with an empty list (its caller reuses it); marked
    sub-directories are cleared by their own markers and removed when nothing else is
    left in them (else they stay marked, holding only what someone else put there).
    """
    p = Path(path)
    try:
        root_fd = os.open(p, _DIR_FLAGS)
    except OSError as e:
        raise TrainscopeError(
            f"{p} cannot be cleared: it is not a directory (or is a symbolic link): "
            f"{e.strerror or e}"
        ) from None
    try:
        marker = _read_marker_at(root_fd)
        if marker is None:
            raise TrainscopeError(f"{p} holds no trainscope marker: refusing to delete in it")
        lock_fd = None if keep_lock else _check_unlocked(root_fd, p)
        try:
            _clear_at(root_fd, marker, p)
            _write_marker_at(root_fd, {**marker, "files": [], "dirs": []})
        finally:
            if lock_fd is not None:
                os.close(lock_fd)
    except OSError as e:
        raise TrainscopeError(f"{p} cannot be cleared: {e.strerror or e}") from None
    finally:
        os.close(root_fd)


def _write_marker_at(dir_fd: int, marker: dict[str, Any]) -> None:
    """Replace the marker of the directory open as ``dir_fd`` (atomically, no links)."""
    tmp = f"{TMP_PREFIX}{MARKER}.{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644, dir_fd=dir_fd)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(marker, f, indent=2)
        f.write("\n")
    os.replace(tmp, MARKER, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)


def _clear_at(root_fd: int, marker: dict[str, Any], path: Path) -> None:
    def entries(key: str) -> list[PurePosixPath]:
        out = []
        for rel in marker.get(key, []):
            with contextlib.suppress(ValueError):  # a marker is data: bad entries are skipped
                out.append(_safe_rel(rel))
        return out

    dirs, files = entries("dirs"), entries("files")
    # Folders it lists that carry a marker of their own (a report, a rank's folder, a
    # study's runs) are cleared by that marker, deepest first. A marked folder it does
    # not list (a run someone saved inside this one) is not trainscope's to remove here.
    for rel in sorted(dirs, key=lambda d: len(d.parts), reverse=True):
        with _walk_to(root_fd, rel.parts) as fd:
            sub_marker = _read_marker_at(fd) if fd is not None else None
            if fd is None or sub_marker is None:
                continue
            sub_path = path.joinpath(*rel.parts)
            lock_fd = _check_unlocked(fd, sub_path)
            try:
                _clear_at(fd, sub_marker, sub_path)
                if set(os.listdir(fd)) <= {MARKER, LOCK}:
                    os.unlink(MARKER, dir_fd=fd)
                    with contextlib.suppress(OSError):
                        os.unlink(LOCK, dir_fd=fd)
                else:  # the user's files stay, in a folder that stays ours
                    _write_marker_at(fd, {**sub_marker, "files": [], "dirs": []})
            finally:
                if lock_fd is not None:
                    os.close(lock_fd)
    for rel in files:
        with _walk_to(root_fd, rel.parts[:-1]) as fd:
            if fd is not None:
                _unlink_file_at(fd, rel.name)
    # Leftovers of a killed atomic write, here and in the folders it lists: temporary
    # files, and temporary folders with the files a library wrote inside them (the
    # weights: safetensors writes its own temporary file next to the target).
    for rel in [PurePosixPath("."), *dirs]:
        with _walk_to(root_fd, () if str(rel) == "." else rel.parts) as fd:
            for name in os.listdir(fd) if fd is not None else []:
                if name.startswith(TMP_PREFIX):
                    _unlink_file_at(fd, name)
                    _clear_temp_folder_at(fd, name)
    # Folders last, deepest first: those listed and those that held listed files.
    folders = set(dirs) | {f.parent for f in files if f.parent != PurePosixPath(".")}
    for rel in sorted(folders, key=lambda d: len(d.parts), reverse=True):
        with _walk_to(root_fd, rel.parts[:-1]) as fd:
            if fd is not None:
                _rmdir_if_empty_at(fd, rel.name)
