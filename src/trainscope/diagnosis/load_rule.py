"""The doctor's first question: was the run measured under other load? (torch-free)

When other processes kept cores busy while the run ran (the rule:
:func:`trainscope.util.load.loaded`), its step times carry their contention: intra-op
threads spin-waiting on cores another process holds have run 10-40x slower on a busy
2-core machine. Every other finding then rests on inflated figures, so this one comes
first (:func:`~trainscope.diagnosis.findings.rank`) and the doctor never says "nothing
to fix" about such a run. The fix is concrete: threads that fit beside the load
(``--threads``), or freeing the cores and measuring again.
"""

from __future__ import annotations

import math
from typing import Any

from trainscope.diagnosis.facts import RunFacts
from trainscope.diagnosis.findings import Finding, ms
from trainscope.util.load import MARGIN_CORES, finite_number, loaded

RULE = "measured-under-load"


def measured_under_load(f: RunFacts) -> Finding | None:
    """Other processes kept cores busy while the run ran: its timings are not its own."""
    cpu = f.view.cpu
    if not cpu or not loaded(f.summary):
        return None
    other = finite_number(cpu.get("other_cores")) or 0.0
    threads = int(finite_number(cpu.get("threads")) or 1)
    procs = int(finite_number(cpu.get("processes_on_node")) or 1)
    cores = finite_number(cpu.get("cores")) or 1.0
    evidence = [
        f"other processes kept {other:.1f} of {cores:g} cores busy on average while it ran",
        f"its own threads: {threads} x {procs} process{'es' * (procs != 1)}",
    ]
    sampled = cpu.get("other_cores_sampled")
    if isinstance(sampled, dict) and finite_number(sampled.get("min")) is not None:
        evidence.append(
            f"other load per sample: {sampled['min']:.1f}–{sampled.get('max', 0):.1f} cores"
        )
    if f.step_s.ok:
        evidence.append(ms(f.step_s, "step"))
    # Threads that fit beside the load: threads x processes + other <= cores + margin.
    fits = max(1, math.floor((cores + MARGIN_CORES - other) / procs))
    fix: dict[str, Any] = {"--threads": fits} if fits < threads else {}
    how = (
        f"--threads {fits} fits beside that load; freeing the cores and measuring again is "
        "the other way"
        if fix
        else "free the cores (stop the other processes) and measure again"
    )
    return Finding(
        RULE,
        "major",
        f"Measured under other load: other processes kept {other:.1f} cores busy while "
        f"this run used {threads * procs} thread{'s' * (threads * procs != 1)} on {cores:g} "
        "cores, so its timings (and every finding below) carry their contention.",
        evidence,
        f"not estimated from this record: {how}; on a busy 2-core machine intra-op threads "
        "sharing cores with other work have run 10-40x slower (README, Threads)",
        fix,
    )
