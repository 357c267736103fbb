"""The collectives sweep as a study directory: its plan, each measurement as it is made,
the examples and identities, and how it ended (torch-free).

``study.json`` (strict JSON, :mod:`trainscope.records.study_dir`'s layout, no runs):

- ``kind`` ``"collectives"``; ``options``: the plan (ops, sizes, world size, processes
  per node, nodes, backend, device, dtype, root, repeats, warm-up);
- ``results``: one :func:`trainscope.collectives.bandwidth.measure` dict per op and size,
  in the order they were measured; ``examples`` and ``identities``: what
  :mod:`trainscope.collectives.semantics` found; ``machine``: where the processes ran;
- ``status``: ``running``, ``completed``, ``interrupted``, ``stopped (terminated by ...)``
  or ``failed`` (with ``error``), and ``done`` of ``planned`` measurements.

Who writes: the launcher claims the directory (marker, lock held until the sweep ends)
and writes the plan and the end; rank 0 of its workers adds the examples and each result
as it comes (under the launcher's lock: the launcher writes nothing while they run).
Rerunning with the same plan continues from the results saved; another plan is refused
with its differences listed.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from trainscope.comm.cost_model import fit_sweep
from trainscope.errors import TrainscopeError
from trainscope.records.jsonio import atomic_write_json, read_json_object
from trainscope.records.ownership import OwnedDir, claim_dir
from trainscope.records.study_dir import STUDY_FILE, STUDY_SCHEMA_VERSION, is_study_dir
from trainscope.runtime.signals import signals_deferred
from trainscope.util.numfmt import size_text

KIND = "collectives"

# The order the plan's keys are compared and listed in (the differences a refusal names).
PLAN_KEYS = (
    "ops",
    "sizes",
    "world_size",
    "nproc",
    "nnodes",
    "backend",
    "device",
    "dtype",
    "root",
    "repeats",
    "warmup",
)


def now() -> str:
    """The time, as every record of trainscope writes it (UTC, seconds)."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def plan_options(
    *,
    ops: Sequence[str],
    sizes: Sequence[int],
    nproc: int,
    nnodes: int,
    backend: str,
    repeats: int,
    warmup: int,
    dtype: str = "float32",
    root: int = 0,
) -> dict[str, Any]:
    """The plan of a sweep: what study.json keeps as ``options`` and a resume compares."""
    return {
        "ops": list(ops),
        "sizes": sorted(sizes),
        "world_size": nproc * nnodes,
        "nproc": nproc,
        "nnodes": nnodes,
        "backend": backend,
        "device": "cuda" if backend == "nccl" else "cpu",
        "dtype": dtype,
        "root": root,
        "repeats": repeats,
        "warmup": warmup,
    }


def planned_keys(options: dict[str, Any]) -> list[tuple[str, int]]:
    """Every (op, size) of the plan in the order they are measured (op-major, sizes up)."""
    return [(op, int(size)) for op in options["ops"] for size in sorted(options["sizes"])]


def result_key(result: Any) -> tuple[str, int] | None:
    """A saved result's (op, size), None for an entry that is not one (a damaged file)."""
    if not isinstance(result, dict):
        return None
    op, size = result.get("op"), result.get("size")
    if not isinstance(op, str) or not isinstance(size, int) or isinstance(size, bool):
        return None
    return op, size


def results_by_key(data: dict[str, Any]) -> dict[tuple[str, int], dict[str, Any]]:
    """The saved results of study.json's ``data`` that belong to its plan, by (op, size)
    (a later entry for the same key wins)."""
    options = data.get("options")
    planned = set(planned_keys(options)) if _plan_like(options) else set()
    out = {}
    for r in data.get("results") or []:
        key = result_key(r)
        if key is not None and key in planned:
            out[key] = r
    return out


def _plan_like(options: Any) -> bool:
    return (
        isinstance(options, dict)
        and isinstance(options.get("ops"), list)
        and isinstance(options.get("sizes"), list)
        and all(isinstance(o, str) for o in options["ops"])
        and all(isinstance(s, int) and not isinstance(s, bool) for s in options["sizes"])
    )


def _show(key: str, value: Any) -> str:
    if key == "sizes" and isinstance(value, list):
        return ",".join(size_text(v) if isinstance(v, int) else str(v) for v in value)
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    return "(none)" if value is None else str(value)


def plan_differences(saved: Any, options: dict[str, Any]) -> list[str]:
    """How ``options`` differs from a saved plan: ``"repeats 2 here, 3 there"`` per key."""
    saved = saved if isinstance(saved, dict) else {}
    return [
        f"{key} {_show(key, options.get(key))} here, {_show(key, saved.get(key))} there"
        for key in PLAN_KEYS
        if saved.get(key) != options.get(key)
    ]


def read_record(study_dir: Path) -> dict[str, Any]:
    """study.json of a collectives sweep (one line for anything else)."""
    data = read_json_object(Path(study_dir) / STUDY_FILE)
    if data.get("kind") != KIND:
        raise TrainscopeError(
            f"{study_dir} holds a {data.get('kind')!r} study, not a collectives sweep"
        )
    return data


def write_record(study_dir: Path, data: dict[str, Any]) -> None:
    """Replace study.json atomically (a reader sees the old file or the new one)."""
    atomic_write_json(Path(study_dir) / STUDY_FILE, data)


def open_study(
    out: str | os.PathLike[str],
    options: dict[str, Any],
    *,
    overwrite: bool,
    argv: Sequence[str],
) -> OwnedDir:
    """Claim ``out`` (locked until the returned directory is released) and write the plan
    with status ``running``, keeping the results of an earlier invocation of the same plan.

    Refused in one line: a folder trainscope did not write, another kind of study, or the
    same kind with another plan (the differences listed), unless ``overwrite`` (which
    removes only what trainscope wrote there, and never someone else's folder).
    """
    owned = claim_dir(out, "study", existing="clear" if overwrite else "keep")
    try:
        study_dir = owned.path
        saved: dict[str, Any] = {}
        if is_study_dir(study_dir) and not overwrite:
            saved = read_json_object(study_dir / STUDY_FILE)
            if saved.get("kind") != KIND:
                raise TrainscopeError(
                    f"--out {study_dir} holds a study of another kind "
                    f"({saved.get('kind')!r}); pass --overwrite to replace it or choose "
                    "another --out"
                )
            diffs = plan_differences(saved.get("options"), options)
            if diffs:
                raise TrainscopeError(
                    f"--out {study_dir} holds a collectives sweep with another plan "
                    f"({'; '.join(diffs)}): rerun it with its own settings to resume it, "
                    "pass --overwrite to replace it, or choose another --out"
                )
        owned.record(STUDY_FILE)
        kept = results_by_key(saved) if saved else {}
        data = {
            "schema_version": STUDY_SCHEMA_VERSION,
            "status": "running",
            "started_at": saved.get("started_at") or now(),
            "argv": list(argv),
            "done": len(kept),
            "planned": len(planned_keys(options)),
            "kept": len(kept),
            "machine": saved.get("machine") or {},
            "examples": saved.get("examples") or [],
            "identities": saved.get("identities") or [],
            "results": [kept[k] for k in planned_keys(options) if k in kept],
            "kind": KIND,
            "options": options,
            "base_config": {},
            "runs": [],
        }
        write_record(study_dir, data)
    except BaseException:
        owned.release()
        raise
    return owned


def finish(study_dir: Path, status: str, error: str | None = None) -> dict[str, Any]:
    """Write how the sweep ended: ``completed`` when every planned result is saved (else
    the ``status`` given, e.g. interrupted), with ``done`` of ``planned``; returns it."""
    data = read_record(study_dir)
    done = results_by_key(data)
    data["done"], data["planned"] = len(done), len(planned_keys(data["options"]))
    if data["done"] == data["planned"]:
        status, error = "completed", None
    data["status"] = status
    data["finished_at"] = now()
    data["cost_model"] = cost_model(data.get("results") or [], data["options"].get("backend"))
    if error:
        data["error"] = error
    else:
        data.pop("error", None)
    write_record(study_dir, data)
    return data


def cost_model(results: Sequence[Any], backend: Any = None) -> dict[str, Any]:
    """The α–β fits of the results saved (:mod:`trainscope.comm.cost_model`), as
    study.json keeps them: what ``--predict --fit DIR`` and the report read. The fits
    hold for this backend (and its device) only: gloo's and NCCL's differ by orders."""
    return {
        "backend": backend,
        "formula": "t(m) = alpha * L(op, n) + beta * W(op, n) * m",
        "fitted_by": "least squares on the mean time per call, weighted by 1/t",
        "fits": {op: fit.to_dict() for op, fit in fit_sweep(results).items()},
    }


def wrong_results(data: dict[str, Any]) -> list[str]:
    """Every wrong result the record holds: an example a rank got wrong, an identity
    beyond its tolerance, a measurement with wrong elements. [] when all are right."""
    out = []
    for ex in data.get("examples") or []:
        if isinstance(ex, dict) and ex.get("ok") is False:
            ranks = [
                str(r.get("rank"))
                for r in ex.get("rows") or []
                if isinstance(r, dict) and r.get("ok") is False
            ]
            out.append(f"the {ex.get('op')} example on rank(s) {', '.join(ranks) or '?'}")
    for ident in data.get("identities") or []:
        if isinstance(ident, dict) and ident.get("ok") is False:
            out.append(
                f"{ident.get('identity')} (off by {ident.get('max_abs_diff')}, "
                f"tolerance {ident.get('atol')})"
            )
    for r in results_by_key(data).values():
        wrong = r.get("wrong")
        if isinstance(wrong, int) and wrong:
            out.append(f"{r['op']} at {size_text(r['size'])}: {wrong} wrong element(s)")
    return out


def verdict(wrong: list[str], limit: int = 4) -> str:
    """One line naming the wrong results (the first ``limit``, and how many more)."""
    shown = "; ".join(wrong[:limit])
    more = f"; and {len(wrong) - limit} more" if len(wrong) > limit else ""
    return f"wrong results: {shown}{more} (see the tables above and study.json)"


class Record:
    """study.json held by rank 0 while it measures: each change written at once."""

    def __init__(self, study_dir: Path) -> None:
        self.path = Path(study_dir)
        self.data = read_record(self.path)

    def done(self) -> list[tuple[str, int]]:
        """The planned (op, size) pairs already measured."""
        return sorted(results_by_key(self.data))

    def save_checks(
        self, examples: list[dict[str, Any]], identities: list[dict[str, Any]], machine: dict
    ) -> None:
        """The examples' and identities' results and the machine (replacing earlier ones)."""
        self.data.update(examples=examples, identities=identities, machine=machine)
        self._write()

    def add(self, result: dict[str, Any]) -> None:
        """One measurement, saved before the next one starts."""
        key = result_key(result)
        self.data["results"] = [
            r for r in self.data.get("results") or [] if result_key(r) != key
        ] + [result]
        self.data["done"] = len(results_by_key(self.data))
        self._write()

    def results(self) -> list[dict[str, Any]]:
        """The saved results in plan order."""
        by_key = results_by_key(self.data)
        return [by_key[k] for k in planned_keys(self.data["options"]) if k in by_key]

    def _write(self) -> None:
        with signals_deferred():  # a stop asked for now comes after the file is whole
            write_record(self.path, self.data)
