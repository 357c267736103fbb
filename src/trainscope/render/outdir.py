"""The folder a report or comparison is written to: claimed as trainscope's, cleared of
what an earlier build wrote there (and nothing else), and locked while it is written."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

from trainscope.errors import TrainscopeError
from trainscope.records.ownership import OwnedDir, claim_dir, refuse_linked_folder


class ReportFiles:
    """Where a report's two renderings are, in its ``out_dir`` (a mixin of the report
    dataclasses, which hold ``out_dir``)."""

    out_dir: Path

    @property
    def markdown_path(self) -> Path:
        """The report's Markdown file, report.md."""
        return self.out_dir / "report.md"

    @property
    def html_path(self) -> Path:
        """The report's self-contained HTML file, report.html (same content)."""
        return self.out_dir / "report.html"


@contextlib.contextmanager
def report_dir(
    out: str | os.PathLike[str],
    kind: str,
    files: Sequence[str],
    *,
    what: str = "--out",
    folders: Sequence[str] = (),
    register: bool = False,
) -> Iterator[OwnedDir]:
    """Claim ``out`` for a ``kind`` ("report" or "compare") build that writes ``files``.

    A folder holding files trainscope did not write is refused; one it wrote before keeps
    only what someone else added. What appears in each of ``folders`` (e.g. ``plots``)
    during the build is recorded when it ends, and nothing that was there before; one of
    them that is a symbolic link is refused before anything is cleared or written. A
    failed write becomes one line naming the folder. ``register``: the default report
    folder of a run or study, listed in that directory's marker.
    """
    for folder in folders:  # before anything is cleared: a refused build changes nothing
        refuse_linked_folder(Path(out), folder)
    owned = claim_dir(out, kind, existing="clear", what=what, register=register)
    before = {folder: owned.tree(folder) for folder in folders}
    try:
        owned.record(*files, dirs=folders)
        yield owned
    except OSError as e:
        raise TrainscopeError(f"cannot write to {owned.path}: {e.strerror or e}") from None
    finally:
        with contextlib.suppress(OSError):
            for folder in folders:
                owned.record_tree(folder, before[folder])
        owned.release()


def default_or(out_dir: str | os.PathLike[str] | None, default: Path) -> tuple[Path, str, bool]:
    """The folder to write, how messages name it, and whether it is the default one (the
    user's --out, or the run's or study's own report folder)."""
    if out_dir is None:
        return default, "report folder", True
    return Path(out_dir), "--out", False
