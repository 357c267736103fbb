"""The test process's heap kept out of a study's garbage collections (test helper).

A study calls ``gc.collect()`` after every run (``trainscope.studies.base``: a run's
DataLoader iterators can sit in reference cycles). In a test process that has imported
torch, matplotlib and the rest of the suite, one full collection walks some 300,000
objects: 0.3-0.6 s on a busy 2-core machine, per run, which made the collection, not the
run, most of a small study's time. ``gc.freeze()`` moves everything that exists now into
the permanent generation, which collections skip; what the study's runs create after it
is collected as before (so the cycles the study collects are still collected), and forked
children inherit the frozen heap too. ``gc.unfreeze()`` hands it back afterwards.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

import pytest


@contextlib.contextmanager
def frozen_heap() -> Iterator[None]:
    """Within this block, collections skip every object that existed when it began."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


@pytest.fixture
def frozen() -> Iterator[None]:
    """:func:`frozen_heap` around one test (``pytest.mark.usefixtures("frozen")``)."""
    with frozen_heap():
        yield
