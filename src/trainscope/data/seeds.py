"""Seeds derived from positions, so that a resumed run draws exactly what it would have.

Every random draw of the input pipeline (the shuffle of an epoch, the augmentation of a
sample or a batch, the windows of a text batch) is seeded from where it happens — seed,
epoch, sample index or batch number — never from a generator whose state depends on what
was drawn before. A run that resumes in the middle of an epoch, or fetches its samples
in another number of worker processes, then sees the same data bit for bit.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import contextmanager

import torch


def mix_seed(*parts: int) -> int:
    """A 63-bit seed from integers: the same on every platform and process, and
    unrelated for different parts (a hash, not a sum: (1, 2) and (2, 1) differ)."""
    h = hashlib.blake2b(digest_size=8, person=b"trainscope-seed")
    for p in parts:
        h.update(int(p).to_bytes(16, "little", signed=True))
    return int.from_bytes(h.digest(), "little") >> 1


@contextmanager
def torch_seeded(seed: int) -> Iterator[None]:
    """Draws from torch's default CPU generator inside come from ``seed``; its state is
    put back afterwards (the caller's stream goes on as if nothing was drawn). About 4 µs.

    Only torch's generator: seeding Python's ``random`` and NumPy's as well costs ~150 µs
    a sample, so a data set's random transforms must draw from torch to resume exactly."""
    gen = torch.default_generator
    state = gen.get_state()
    gen.manual_seed(seed)
    try:
        yield
    finally:
        gen.set_state(state)
