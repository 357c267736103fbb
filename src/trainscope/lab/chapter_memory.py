"""Chapter 11: why a 1.5B-parameter GPT-2 needs about 30 GB per device to train.

The estimator (``trainscope estimate-memory --json``) gives GPT-2 XL's bytes per device
under DDP and ZeRO-1/2/3 with mixed-precision Adam, with and without activation
checkpointing: figures labelled as estimates, since no device here holds the model. Beside
them, the same estimator against the memory meter on a small character GPT trained on
this machine (``--measure``): how far the estimate is from counted tensor bytes, where
``--data`` holds Tiny Shakespeare (the estimates need no data).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trainscope.errors import TrainscopeError
from trainscope.lab.steps import MakeContext, read_json
from trainscope.render.document import Document, escape_inline
from trainscope.render.table import Table
from trainscope.reports.section import Section

BIG = ["--arch", "gpt2-xl", "--precision", "amp", "--optimizer", "adam", "--batch-size", "1",
       "--seq-len", "1024", "--world-size", "64", "--device", "cuda"]  # fmt: skip
SMALL_DATA = "tinyshakespeare"
"""The data of the small GPT measured beside the estimates (optional)."""
SHARDINGS = (("ddp", "DDP"), ("zero1", "ZeRO-1"), ("zero2", "ZeRO-2"), ("zero3", "ZeRO-3"))
ROWS = (("weights", "weights"), ("gradients", "gradients"),
        ("master_weights", "fp32 master weights"), ("optimizer_states", "optimizer states"),
        ("activations", "saved activations"), ("communication", "allowance: communication"),
        ("temporaries", "allowance: temporaries"), ("model_states", "model states"),
        ("total", "total"))  # fmt: skip


def gb(n: Any) -> str:
    """Bytes in decimal units (the estimator's: GB = 1e9 bytes)."""
    if not isinstance(n, (int, float)):
        return "–"
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(n) >= size:
            return f"{n / size:.3g} {unit}"
    return f"{int(n)} B"


def make(ctx: MakeContext) -> None:
    """Two estimates of GPT-2 XL (checkpointing none and full), and one measured."""
    for policy in ("none", "full"):
        out = ctx.folder / f"gpt2-xl-{policy}.json"
        ctx.run(["estimate-memory", *BIG, "--checkpointing", policy, "--json"],
                skip=out.is_file(), capture=out)  # fmt: skip
    if not ctx.has(SMALL_DATA):  # the estimates need no data; the measured part does
        ctx.say(f"  the measured small GPT needs {SMALL_DATA}/ under --data: left out")
        return
    bigger = ["--n-layer", "4", "--n-head", "4", "--n-embd", "128", "--block-size", "64"]
    small = ["--preset", "tiny"] if ctx.quick else bigger
    out = ctx.folder / "gpt-char-measured.json"
    ctx.run(["estimate-memory", "--workload", "gpt-char", "--data-dir",
             ctx.data(SMALL_DATA), *small, "--measure", "--json"],
            skip=out.is_file(), capture=out)  # fmt: skip


def _load(folder: Path, name: str) -> dict[str, Any]:
    data = read_json(folder / name)
    if not isinstance(data, dict) or not isinstance(data.get("shardings"), dict):
        raise TrainscopeError(f"{folder / name}: not an estimate-memory --json answer")
    return data


def section(folder: Path, doc: Document, plots: Path) -> Section:
    """The estimate's table per sharding, the findings from its figures, then the meter
    against the estimate on this machine."""
    out = Section()
    none, full = _load(folder, "gpt2-xl-none.json"), _load(folder, "gpt2-xl-full.json")
    s0, s1 = none["shardings"], full["shardings"]
    rows = [[label, *(gb(s0.get(k, {}).get(key)) for k, _ in SHARDINGS)] for key, label in ROWS]
    rows.insert(5, ["saved activations, full checkpointing",
                    *(gb(s1.get(k, {}).get("activations")) for k, _ in SHARDINGS)])  # fmt: skip
    rows.append(["total, full checkpointing", *(gb(s1.get(k, {}).get("total"))
                                                for k, _ in SHARDINGS)])  # fmt: skip
    setup = none.get("setup") or {}
    out.add_table(doc, "gpt2-memory", Table(
        ["Per device (estimate)", *(name for _, name in SHARDINGS)], rows,
        f"GPT-2 XL, {none['model'].get('parameters', 0):,} parameters: bytes per device "
        f"estimated by trainscope estimate-memory (not measured: no device here holds it); "
        f"{setup.get('precision')} Adam, micro-batch {setup.get('batch_size')} x "
        f"{setup.get('seq_len')} tokens, {setup.get('world_size')} devices; GB = 1e9 bytes.",
        "tab:gpt2-memory", "lrrrr",
    ))  # fmt: skip
    out.findings += _big_findings(none, full)
    measured = folder / "gpt-char-measured.json"
    if measured.is_file():
        out.findings += _measured_part(read_json(measured), doc, out)
    for f in out.findings:
        doc.paragraph(escape_inline(f))
    if not measured.is_file():
        doc.note(f"The estimator against the meter on a small GPT trained here needs "
                 f"{SMALL_DATA}/ under --data: not measured in this lab (the estimates above "
                 "need no data).")  # fmt: skip
    return out


def _big_findings(none: dict[str, Any], full: dict[str, Any]) -> list[str]:
    ddp, ddp1 = none["shardings"]["ddp"], full["shardings"]["ddp"]
    p = none["model"].get("parameters", 0)
    allow = (ddp.get("communication") or 0) + (ddp.get("temporaries") or 0)
    z = [gb(none["shardings"].get(k, {}).get("total")) for k in ("zero1", "zero2", "zero3")]
    return [
        f"Estimate: GPT-2 XL's {p:,} parameters are {gb(ddp['weights'])} of 16-bit weights; "
        f"training them with Adam in mixed precision keeps {none.get('bytes_per_parameter')}: "
        f"{gb(ddp['model_states'])} of model states on every device under DDP, plus "
        f"{gb(ddp['activations'])} of saved activations for one 1024-token sequence and "
        f"{gb(allow)} of stated allowances: {gb(ddp['total'])} per device.",
        f"Estimate, sharded over {none['setup'].get('world_size')} devices: ZeRO-1 "
        f"{z[0]}, ZeRO-2 {z[1]}, ZeRO-3 {z[2]} per device (DDP {gb(ddp['total'])}).",
        f"Estimate, full activation checkpointing: saved activations {gb(ddp['activations'])}"
        f" → {gb(ddp1['activations'])}; the DDP total {gb(ddp['total'])} → "
        f"{gb(ddp1['total'])}.",
    ]


def _measured_part(data: Any, doc: Document, out: Section) -> list[str]:
    meas = data.get("measured") if isinstance(data, dict) else None
    if not isinstance(meas, dict) or not isinstance(meas.get("rows"), list):
        return ["The meter's measurement is missing from gpt-char-measured.json."]
    rows = [[str(r.get("component")), gb(r.get("estimated_bytes")),
             gb(r.get("measured_bytes")), f"{r.get('error_pct', 0):+.1f}%"]
            for r in meas["rows"] if isinstance(r, dict)]  # fmt: skip
    desc = str((data.get("model") or {}).get("description", "gpt-char"))
    doc.heading("The estimator against the meter, on this machine", 4)
    out.add_table(doc, "gpt-char-measured", Table(
        ["Component", "Estimated", "Measured", "Error"], rows,
        f"{desc}, trained {meas.get('steps')} steps on {meas.get('device')} "
        f"at batch {meas.get('batch_size')} x {meas.get('seq_len')} tokens: the memory "
        "meter's counted tensor bytes beside the estimate for that step.",
        "tab:gpt-char-measured", "lrrr",
    ))  # fmt: skip
    total = next((r for r in meas["rows"] if str(r.get("component", "")).startswith("total")),
                 None)  # fmt: skip
    if not isinstance(total, dict):
        return []
    return [f"Measured here ({desc}): the meter counted {gb(total.get('measured_bytes'))}, "
            f"the estimate said {gb(total.get('estimated_bytes'))} "
            f"({total.get('error_pct', 0):+.1f}%)."]  # fmt: skip


__all__ = ["gb", "make", "section"]
