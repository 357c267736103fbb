"""The run's imports with Python's cyclic collector paused, then frozen once.

Importing torch (and ``torch._dynamo``, which torch.optim brings in on first use) creates
about 275,000 long-lived objects. While they are being created, the collector's full
passes walk all of them again and again: five passes, about 0.27 s of a default run's
1.9 s start-up on a 2-vCPU machine, and they free a few hundred objects in all. Pausing
the collector over those imports and then moving what they created to the permanent
generation (``gc.freeze()``, as servers such as vLLM do after start-up) saves that time,
makes every later full pass (and the one at interpreter exit) skip the frozen objects, and
keeps DataLoader workers started by fork from touching those objects' pages.

Freezing happens once per process: a study running several runs in one process must not
freeze what an earlier run left behind (it would never be freed).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

_frozen = False


@contextmanager
def imports_without_gc() -> Iterator[None]:
    """Pause the collector over the block (the run's first imports), then freeze what is
    alive and resume it. A later use in the same process only pauses and resumes."""
    global _frozen
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if not _frozen:
            gc.freeze()
            _frozen = True
        if was_enabled:
            gc.enable()
