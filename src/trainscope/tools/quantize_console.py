"""The console lines of ``trainscope quantize``: a result of
:func:`trainscope.tools.quantize.quantize_run` (what ``quantize.json`` holds), in a few
lines."""

from __future__ import annotations

from typing import Any

from trainscope.render.table import fmt_bytes, fmt_float, fmt_pct, fmt_seconds
from trainscope.util.textsafe import one_line


def _pct(x: Any) -> str:
    return fmt_pct(x, 2)


def format_quantize(result: dict[str, Any]) -> list[str]:
    """A few console lines: method, bytes, figures fp32 -> int8, evaluation time."""

    method = result.get("method") or {}
    layers = result.get("layers") or {}
    size = result.get("bytes") or {}
    before, after = size.get("fp32") or {}, size.get("int8") or {}
    fp32, int8 = result.get("fp32") or {}, result.get("int8") or {}
    diff = result.get("difference") or {}
    lines = [
        one_line(
            f"INT8 {method.get('config')} (torchao {method.get('version')}) on "
            f"{result.get('device')}: {layers.get('quantized')} of {layers.get('linear')} "
            "Linear layers quantized"
        ),
        f"model bytes: {fmt_bytes(before.get('model'))} fp32 -> {fmt_bytes(after.get('model'))}"
        f" int8 (Linear weights {fmt_bytes(before.get('linear_weights'))} -> "
        f"{fmt_bytes(after.get('linear_weights'))})",
    ]
    tied = layers.get("tied") or []
    if tied:
        lines.append(
            one_line(
                f"tied weights ({', '.join(map(str, tied))}): the Linear layer gets an int8 "
                "copy, the other user keeps fp32 (both counted in the int8 model bytes)"
            )
        )
    where = one_line(f"{result.get('split')} split, {result.get('samples')} samples")
    if "accuracy" in fp32:
        d = diff.get("accuracy")
        pts = f"{100 * d:+.2f} points" if isinstance(d, (int, float)) else "–"
        lines.append(
            f"{where}: accuracy {_pct(fp32.get('accuracy'))} fp32 -> "
            f"{_pct(int8.get('accuracy'))} int8 ({pts})"
        )
    d = diff.get("loss")
    lines.append(
        f"{where}: loss {fmt_float(fp32.get('loss'))} fp32 -> {fmt_float(int8.get('loss'))} "
        f"int8 ({f'{d:+.4f}' if isinstance(d, (int, float)) else '–'})"
    )
    if "perplexity" in fp32:
        lines.append(
            f"{where}: perplexity {fmt_float(fp32.get('perplexity'), 3)} fp32 -> "
            f"{fmt_float(int8.get('perplexity'), 3)} int8"
        )
    a, b = fp32.get("eval_s") or {}, int8.get("eval_s") or {}
    lines.append(
        f"evaluation: {_eval_time(a)} fp32, {_eval_time(b)} int8 (median of n={a.get('n')} "
        "alternated passes; warm-up excluded; eager mode)"
    )
    return lines


def _eval_time(timing: dict[str, Any]) -> str:
    """``"0.120 s (IQR 0.118–0.125)"``: the median with its spread's values, named."""
    text = f"{fmt_seconds(timing.get('median'))} s"
    low, high, n = timing.get("low"), timing.get("high"), timing.get("n")
    numbers = all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (low, high))
    if numbers and isinstance(n, int) and n >= 2:
        text += f" ({timing.get('spread')} {fmt_seconds(low)}–{fmt_seconds(high)})"
    return text
