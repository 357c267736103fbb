"""The run's first imports pause Python's collector and then freeze what they created,
once per process (only the command line asks for it: tests/launch/test_launcher.py)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

CHECK = textwrap.dedent(
    """
    import gc
    from trainscope.runtime.gc_imports import imports_without_gc

    before = gc.get_freeze_count()
    with imports_without_gc():
        assert not gc.isenabled()  # paused over the imports
        import email.mime.text  # noqa: F401  (any import that creates objects)
    assert gc.isenabled()  # resumed
    first = gc.get_freeze_count()
    assert first > before  # what the imports created is frozen

    garbage = [[i] for i in range(1000)]  # alive at the second use
    with imports_without_gc():
        pass
    assert gc.get_freeze_count() == first  # frozen once: a later run's objects stay free

    gc.disable()
    with imports_without_gc():
        pass
    assert not gc.isenabled()  # a collector the caller had off stays off
    print("ok")
    """
)


@pytest.mark.timeout(60)
def test_pause_then_freeze_once_per_process() -> None:
    done = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
