"""The "INT8 quantization" section of a run's report, from ``RUN_DIR/quantize.json``
(what ``trainscope quantize RUN_DIR`` wrote): fp32 against int8 in one small table.

Torch-free, like every report: it reads the record only. Everything from the file is
someone else's text: table cells are escaped by the table renderers, and the prose goes
through :func:`~trainscope.render.document.escape_inline` / ``inline_code``.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any

from trainscope.errors import TrainscopeError
from trainscope.records.jsonio import read_json_object
from trainscope.records.run_dir import RecordWarning
from trainscope.render.document import Document, escape_inline, inline_code
from trainscope.render.table import Table, fmt_bytes, fmt_float, fmt_int, fmt_pct, fmt_seconds
from trainscope.reports.section import Section
from trainscope.util.spread import Spread, differ, no_difference_text, spread

RESULT_FILE = "quantize.json"
"""The file ``trainscope.tools.quantize`` writes (the same name: reports never import it)."""

TABLE_KEY = "quantize"


def _obj(data: Any, key: str) -> dict[str, Any]:
    """``data[key]`` when both are JSON objects, else {} (a record is data, not trusted)."""
    value = data.get(key) if isinstance(data, dict) else None
    return value if isinstance(value, dict) else {}


def _num(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def _signed(x: Any, fmt: str) -> str:
    value = _num(x)
    return "–" if value is None else format(value, fmt)


def _ratio(before: Any, after: Any) -> str:
    a, b = _num(before), _num(after)
    return f"{b / a:.2f}x" if a and b is not None else "–"


def _times(figures: dict[str, Any]) -> Spread:
    """The timed repeats' spread, recomputed from the repeats themselves where listed."""
    timing = _obj(figures, "eval_s")
    repeats = timing.get("repeats")
    if isinstance(repeats, list) and repeats:
        return spread(repeats)
    return spread([timing.get("median")])


def _fmt_time(s: Spread) -> str:
    if s.median is None:
        return "–"
    if s.n < 2:
        return f"{fmt_seconds(s.median)} s"
    return f"{fmt_seconds(s.median)} s ({fmt_seconds(s.low)}–{fmt_seconds(s.high)})"


def quantize_table(data: dict[str, Any]) -> Table:
    """fp32 against int8: bytes, the split's figures, evaluation time; and the change."""
    size = _obj(data, "bytes")
    before, after = _obj(size, "fp32"), _obj(size, "int8")
    fp32, int8 = _obj(data, "fp32"), _obj(data, "int8")
    diff = _obj(data, "difference")
    rows: list[list[object]] = [
        ["model bytes", fmt_bytes(before.get("model")), fmt_bytes(after.get("model")),
         _ratio(before.get("model"), after.get("model"))],
        ["Linear weight bytes", fmt_bytes(before.get("linear_weights")),
         fmt_bytes(after.get("linear_weights")),
         _ratio(before.get("linear_weights"), after.get("linear_weights"))],
    ]  # fmt: skip
    if "accuracy" in fp32 or "accuracy" in int8:
        d = _num(diff.get("accuracy"))
        rows.append(
            ["accuracy", fmt_pct(fp32.get("accuracy"), 2), fmt_pct(int8.get("accuracy"), 2),
             "–" if d is None else f"{100 * d:+.2f} pt"]
        )  # fmt: skip
    rows.append(
        ["loss", fmt_float(fp32.get("loss")), fmt_float(int8.get("loss")),
         _signed(diff.get("loss"), "+.4f")]
    )  # fmt: skip
    if "perplexity" in fp32 or "perplexity" in int8:
        rows.append(
            ["perplexity", fmt_float(fp32.get("perplexity"), 3),
             fmt_float(int8.get("perplexity"), 3), _signed(diff.get("perplexity"), "+.3f")]
        )  # fmt: skip
    t32, t8 = _times(fp32), _times(int8)
    change = _ratio(t32.median, t8.median) if differ(t32, t8) else "within noise"
    rows.append(["evaluation time (median)", _fmt_time(t32), _fmt_time(t8), change])
    split = data.get("split")
    where = f" on the {split} split" if isinstance(split, str) and split else ""
    return Table(
        columns=["", "fp32", "int8", "int8 vs fp32"],
        rows=rows,
        caption=f"INT8 post-training quantization of the Linear layers{where}",
        label="tab:quantize",
        align="lrrr",
    )


def _read(path: Path) -> dict[str, Any] | None:
    """The result in ``path``, or None after one warning line saying why it is left out."""
    try:
        data = read_json_object(path)
    except TrainscopeError as e:
        warnings.warn(f"{e}; quantization left out of the report", RecordWarning, stacklevel=3)
        return None
    if not _obj(data, "fp32") or not _obj(data, "int8"):
        warnings.warn(
            f"{path} holds no fp32 and int8 results; quantization left out of the report",
            RecordWarning,
            stacklevel=3,
        )
        return None
    return data


def quantize_section(run_dir: str | os.PathLike[str], doc: Document) -> Section | None:
    """Add "INT8 quantization" to ``doc`` from ``run_dir/quantize.json``; return its table
    (key ``"quantize"``, for tables.tex) and findings.

    None, and nothing added, when the run has no such file, or when it cannot be read
    (then one :class:`~trainscope.records.run_dir.RecordWarning` line says why).
    """
    path = Path(run_dir) / RESULT_FILE
    if not path.is_file():
        return None
    data = _read(path)
    if data is None:
        return None
    table = quantize_table(data)
    method = _obj(data, "method")
    layers = _obj(data, "layers")
    doc.heading("INT8 quantization")
    config, version = method.get("config"), method.get("version")
    what = (
        f"{inline_code(str(config))} from torchao {escape_inline(str(version))}"
        if config
        else "torchao"
    )
    split = data.get("split")
    doc.paragraph(
        f"Post-training quantization with {what}: int8 weights with one scale per output "
        "channel, activations quantized to int8 at run time (dynamic), in "
        f"{fmt_int(layers.get('quantized'))} of the model's {fmt_int(layers.get('linear'))}"
        f" Linear layers; other layers stay fp32. Evaluated on the "
        f"{escape_inline(str(split or '–'))} split ({fmt_int(data.get('samples'))} samples)"
        f" on {inline_code(str(data.get('device') or '–'))}."
    )
    doc.table(table)
    t32, t8 = _times(_obj(data, "fp32")), _times(_obj(data, "int8"))
    if differ(t32, t8):
        timing = f"int8 takes {_ratio(t32.median, t8.median)} the fp32 evaluation time"
    else:
        timing = no_difference_text(t32, t8)
    compiled = method.get("compiled")
    doc.paragraph(
        f"Bytes: {escape_inline(str(_obj(data, 'bytes').get('how') or 'tensor bytes'))}. "
        f"Time: median of n={t32.n} timed passes per model ({t32.kind} in brackets), warm-up "
        f"excluded{'' if compiled else ', eager mode (no torch.compile)'}; {timing}. "
        f"Rebuild with {inline_code('trainscope quantize RUN_DIR')}."
    )
    findings = [_finding(data)]
    skipped = layers.get("skipped")
    if isinstance(skipped, list) and skipped:
        names = ", ".join(inline_code(str(n)) for n in skipped[:10])
        more = f" and {len(skipped) - 10} more" if len(skipped) > 10 else ""
        text = f"Linear layers torchao left in fp32: {names}{more}"
        doc.note(text)
        findings.append(text)
    tied = layers.get("tied")
    if isinstance(tied, list) and tied:
        names = ", ".join(inline_code(str(n)) for n in tied[:10])
        doc.note(
            f"Tied weights ({names}): the Linear layer gets an int8 copy while the other "
            "user of the weight (an embedding) keeps it in fp32; the int8 model bytes count both."
        )
    return Section(tables={TABLE_KEY: table}, findings=findings)


def _finding(data: dict[str, Any]) -> str:
    """The headline: how much smaller, and what it cost in accuracy (or loss)."""
    size = _obj(data, "bytes")
    fp32, int8 = _obj(data, "fp32"), _obj(data, "int8")
    ratio = _ratio(_obj(size, "fp32").get("model"), _obj(size, "int8").get("model"))
    if _num(fp32.get("accuracy")) is not None:
        d = _num(_obj(data, "difference").get("accuracy"))
        cost = (
            f"accuracy {fmt_pct(fp32.get('accuracy'), 2)} -> {fmt_pct(int8.get('accuracy'), 2)}"
            + ("" if d is None else f" ({100 * d:+.2f} pt)")
        )
    else:
        cost = f"loss {fmt_float(fp32.get('loss'))} -> {fmt_float(int8.get('loss'))}"
    return f"INT8 (Linear layers): model bytes {ratio} of fp32, {cost}"


__all__ = ["RESULT_FILE", "quantize_section", "quantize_table"]
