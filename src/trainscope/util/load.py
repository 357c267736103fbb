"""When a measurement was taken under other load, and so is not evidence (torch-free).

A run records in its ``cpu`` section how many cores other processes kept busy while it
ran (``other_cores``: the machine's busy CPU time on this process's cores minus the
run's own processes', over the wall time; :mod:`trainscope.runtime.threads`). A repeat
is **loaded** when that other load could have changed its timings:

- other processes kept at least :data:`LOADED_OTHER_CORES` cores busy on average (on a
  2-vCPU VM the two vCPUs are often hyper-threads of one core, so even a run whose
  threads "fit" beside the load loses a large share of the core), or
- the run's threads and the other load together did not fit on the cores (by more than
  :data:`MARGIN_CORES`), with at least that margin of other load: intra-op threads then
  spin-wait on cores others hold and a step runs 10-40x slower.

A loaded repeat is not compared against anything: studies re-measure it, and where the
load never drops the finding says "not a finding" instead of a ratio. A record without
the section (older runs, other tools) counts as not loaded: nothing says it was.

``TRAINSCOPE_IGNORE_LOAD=1`` counts no repeat as loaded (the records still say what load
they ran under, and reports still warn of oversubscription). It exists for the test
suite, whose two workers share two cores on purpose and test the reports' structure, not
their timings; a measurement taken that way is no finding, so do not set it otherwise.
"""

from __future__ import annotations

import math
import os
import statistics
from collections.abc import Iterable
from typing import Any

MARGIN_CORES = 0.25
"""Slack before a run counts as oversubscribed: the sampler, the launcher and the
system's own daemons keep a little CPU busy on any machine."""

LOADED_OTHER_CORES = 0.5
"""Other load (cores kept busy on average) from which a repeat is not evidence;
``TRAINSCOPE_LOADED_CORES`` moves it (a machine with a known steady background)."""
LOADED_CORES_ENV = "TRAINSCOPE_LOADED_CORES"

IGNORE_LOAD_ENV = "TRAINSCOPE_IGNORE_LOAD"

LOAD_STEP_CORES = 0.75
"""A change of other load during one run (cores, between its samples, or between the
start and the run) from which the record says the load changed."""


def finite_number(x: Any) -> float | None:
    """``x`` as a float when it is a finite real number (not a bool), else None."""
    ok = isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
    return float(x) if ok else None


def other_cores(summary: dict[str, Any]) -> float | None:
    """Cores other processes kept busy while the run ran, or None where not recorded."""
    cpu = summary.get("cpu")
    return finite_number(cpu.get("other_cores")) if isinstance(cpu, dict) else None


def ignore_load() -> bool:
    """True where ``TRAINSCOPE_IGNORE_LOAD=1`` switches the rule off (the test suite)."""
    return os.environ.get(IGNORE_LOAD_ENV) == "1"


def loaded_limit() -> float:
    """:data:`LOADED_OTHER_CORES`, or the number in ``TRAINSCOPE_LOADED_CORES``."""
    try:
        limit = float(os.environ.get(LOADED_CORES_ENV, "") or LOADED_OTHER_CORES)
    except ValueError:
        return LOADED_OTHER_CORES
    return limit if math.isfinite(limit) and limit > 0 else LOADED_OTHER_CORES


def loaded(summary: dict[str, Any]) -> bool:
    """True when the run was measured under other load that makes it no evidence (the
    rule in the module docstring)."""
    cpu = summary.get("cpu")
    other = other_cores(summary)
    if other is None or not isinstance(cpu, dict) or ignore_load():
        return False
    if other >= loaded_limit():
        return True
    threads, procs, cores = (
        finite_number(cpu.get(k)) for k in ("threads", "processes_on_node", "cores")
    )
    if threads is None or procs is None or cores is None:
        return False
    return other >= MARGIN_CORES and threads * procs + other > cores + MARGIN_CORES


def load_of(summaries: Iterable[dict[str, Any]], count: bool = True) -> str:
    """How loaded the given repeats were, in words: ``"1.9 cores"`` (one repeat) or
    ``"1.2–1.9 cores (3 repeats)"`` (without the count where ``count`` is False)."""
    xs = sorted(x for s in summaries if (x := other_cores(s)) is not None)
    if not xs:
        return "an unrecorded number of cores"
    if len(xs) == 1 or f"{xs[0]:.1f}" == f"{xs[-1]:.1f}":
        text = f"{statistics.median(xs):.1f} cores"
    else:
        text = f"{xs[0]:.1f}–{xs[-1]:.1f} cores"
    return text + (f" ({len(xs)} repeats)" if count and len(xs) > 1 else "")


def not_a_finding(what: str, summaries: Iterable[dict[str, Any]]) -> str:
    """The sentence that replaces a ratio when ``what``'s repeats were all loaded."""
    return f"not a finding: other processes kept {load_of(summaries, False)} busy during {what}"
