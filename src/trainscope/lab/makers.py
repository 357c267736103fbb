"""The registry of chapters made of several commands: a chapter names its maker by key
(:class:`trainscope.lab.steps.Maker`: how it is measured, how it is shown)."""

from __future__ import annotations

from trainscope.errors import TrainscopeError
from trainscope.lab import chapter_distribute, chapter_dp, chapter_memory, chapter_runs
from trainscope.lab.steps import Maker


def _registry() -> dict[str, Maker]:
    return {
        "distribute": Maker(chapter_distribute.make, chapter_distribute.section),
        "dp-ddp": Maker(chapter_dp.make, chapter_dp.section, chapter_dp.needs),
        "time": Maker(chapter_runs.make_time, chapter_runs.time_section),
        "gpt2-memory": Maker(chapter_memory.make, chapter_memory.section),
        "int8": Maker(chapter_runs.make_int8, chapter_runs.int8_section,
                      chapter_runs.int8_needs),
    }  # fmt: skip


def maker(key: str) -> Maker:
    """The maker registered under ``key``."""
    makers = _registry()
    if key not in makers:
        raise TrainscopeError(f"no lab maker {key!r}: known {', '.join(sorted(makers))}")
    return makers[key]


__all__ = ["maker"]
