"""Collective bandwidth per op and message size, as nccl-tests reports it: time, algbw,
busbw and a ``wrong`` count.

**Size.** As in nccl-tests, the *size* of an op is the bytes of its largest buffer on one
rank, which is the quantity algbw divides by:

- ``all_reduce``, ``broadcast``, ``reduce``: the buffer each rank holds (in place);
- ``all_gather``: the total *output* (n chunks; each rank contributes size/n);
- ``reduce_scatter``: the total *input* (n chunks; each rank receives size/n);
- ``all_to_all``: each rank's whole send buffer (= its receive buffer; n chunks of size/n).

A size becomes a count of ``dtype`` elements rounded down to a multiple of n for the three
chunked ops (nccl-tests does the same); ``bytes`` in a result is the size actually used.

**Time.** Per op and size: ``warmup`` untimed iterations, then ``repeats`` timed ones. Each
iteration first refills the buffers (untimed: in-place ops overwrite their input, and a
stale output would hide a collective that did nothing), then meets the other ranks at a
barrier, so every rank starts together, and times the one op. On CPU the clock is
``time.perf_counter`` around the call (gloo's collectives return when this rank's result is
complete). On CUDA the device is synchronised after the barrier and CUDA events are recorded
on the current stream before and after the call; a synchronous collective makes the current
stream wait for the communication stream, so the end event marks completion on this GPU
(that path is written for nccl and untested on a machine without GPUs). A repeat's time is
that of the *slowest* rank: the collective is done when every rank has its result
(nccl-tests averages over ranks by default; the maximum is the stricter figure). The
reported time is the median over repeats with its spread (:func:`trainscope.util.spread.spread`).

**Bandwidth.** ``algbw = bytes / time``; ``busbw = algbw x bus_factor(op, n)``, the factor
that makes busbw comparable with the link's peak whatever n is (nccl-tests, PERFORMANCE.md):
a ring all_reduce moves 2(n-1)/n of the buffer over each link, all_gather, reduce_scatter and
all_to_all (n-1)/n, broadcast and reduce the whole buffer once. GB/s are 10^9 bytes/s.

**Wrong.** Inputs are filled so that every output element is a known integer
(:func:`fill_input`, :func:`expected_output`; exact in float32 for any practical n). After
each timed repeat, the elements differing from the expected value are counted; ``wrong`` is
the sum over repeats and ranks, and 0 is the only right answer.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from trainscope.collectives.semantics import (
    OPS,
    all_gather_single,
    group_device,
    group_info,
    reduce_scatter_single,
)
from trainscope.errors import ConfigError
from trainscope.reports.collectives_tables import size_text as format_size
from trainscope.runtime.dist import gather_objects
from trainscope.util.numfmt import fmt_sig
from trainscope.util.spread import spread

MAX_SIZE = 1 << 30
"""The largest message size accepted (1 GiB): an all_to_all holds three buffers this big."""
MAX_SIZES = 30
"""The most sizes in one sweep: 2^0 B to 2^30 B by doubling is 31, more is a typo."""

CHUNKED = ("all_gather", "reduce_scatter", "all_to_all")

_UNITS = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
_SIZE = re.compile(r"(\d+)\s*([KMG]?)(?:I?B)?", re.IGNORECASE)


def bus_factor(op: str, n: int) -> float:
    """nccl-tests' bus bandwidth factor of ``op`` on ``n`` ranks (busbw = algbw x this).

    all_reduce 2(n-1)/n; reduce_scatter, all_gather, all_to_all (n-1)/n; broadcast,
    reduce 1.
    """
    if op not in OPS:
        raise ValueError(f"unknown collective {op!r}; expected one of {', '.join(OPS)}")
    if n < 1:
        raise ValueError(f"a world has at least 1 rank, not {n}")
    if op == "all_reduce":
        return 2 * (n - 1) / n
    if op in CHUNKED:
        return (n - 1) / n
    return 1.0


def parse_size(text: str) -> int:
    """``"1K"`` -> 1024, ``"64M"``/``"64MiB"`` -> 67108864, ``"512"`` -> 512 (binary units).

    Raises :class:`~trainscope.errors.ConfigError` for anything else, for 0, and above
    :data:`MAX_SIZE`.
    """
    m = _SIZE.fullmatch(text.strip())
    if not m:
        raise ConfigError(
            f"bad message size {text!r}: write a whole number of bytes with an optional "
            "unit K, M or G (binary: 1K = 1024), e.g. 1K or 64M"
        )
    size = int(m.group(1)) * _UNITS[m.group(2).upper()]
    if size <= 0:
        raise ConfigError(f"message size {text!r} is zero; the smallest is 1 byte")
    if size > MAX_SIZE:
        raise ConfigError(f"message size {text!r} is above the limit of 1G (1 GiB)")
    return size


def parse_sizes(text: str) -> list[int]:
    """Message sizes in bytes from ``"LO:HI"`` (LO, 2·LO, 4·LO, ... up to HI, like
    nccl-tests ``-b LO -e HI -f 2``), one size ``"1M"``, or a list ``"1K,64K,1M"``.

    ``"1K:64M"`` is the 17 powers of two from 1 KiB to 64 MiB. Raises
    :class:`~trainscope.errors.ConfigError` for a bad size, LO > HI, a repeated size, or
    more than :data:`MAX_SIZES` sizes.
    """
    text = text.strip()
    if ":" in text:
        parts = text.split(":")
        if len(parts) != 2:
            raise ConfigError(f"bad size range {text!r}: write LO:HI, e.g. 1K:64M")
        lo, hi = parse_size(parts[0]), parse_size(parts[1])
        if lo > hi:
            raise ConfigError(f"bad size range {text!r}: {parts[0]} is larger than {parts[1]}")
        sizes = []
        s = lo
        while s <= hi:
            sizes.append(s)
            if len(sizes) > MAX_SIZES:
                break
            s *= 2
    else:
        sizes = [parse_size(p) for p in text.split(",")]
        if len(set(sizes)) != len(sizes):
            raise ConfigError(f"message sizes {text!r} repeat a size")
    if len(sizes) > MAX_SIZES:
        raise ConfigError(f"{text!r} gives more than {MAX_SIZES} message sizes; narrow the range")
    return sizes


def op_count(op: str, size: int, n: int, element_size: int) -> int:
    """Elements of ``op``'s size buffer for ``size`` bytes on ``n`` ranks (see the module
    docstring): whole elements, a multiple of n for the chunked ops. Raises
    :class:`~trainscope.errors.ConfigError` when that leaves none."""
    count = size // element_size
    if op in CHUNKED:
        count -= count % n
    if count <= 0:
        raise ConfigError(
            f"{size} bytes is too small for {op} on {n} ranks: it needs at least "
            f"{(n if op in CHUNKED else 1) * element_size} bytes"
        )
    return count


# ---------------------------------------------------------- known inputs and outputs


def fill_input(
    op: str, rank: int, n: int, count: int, *, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """Rank ``rank``'s input of ``op`` for a size buffer of ``count`` elements (CPU).

    all_reduce, broadcast, reduce: rank+1 everywhere. all_gather: rank+1 (its count/n
    chunk). reduce_scatter: chunk j holds (rank+1)(j+1). all_to_all: chunk j (for rank j)
    holds rank·n + j + 1. Each output chunk is then a distinct known integer.
    """
    if op in ("all_reduce", "broadcast", "reduce"):
        return torch.full((count,), rank + 1, dtype=dtype)
    c = count // n
    if op == "all_gather":
        return torch.full((c,), rank + 1, dtype=dtype)
    j = torch.arange(n, dtype=dtype).repeat_interleave(c)
    if op == "reduce_scatter":
        return (rank + 1) * (j + 1)
    if op == "all_to_all":
        return rank * n + j + 1
    raise ValueError(f"unknown collective {op!r}")


def expected_output(
    op: str, rank: int, n: int, count: int, *, root: int = 0, dtype: torch.dtype = torch.float32
) -> torch.Tensor | None:
    """What rank ``rank``'s output of ``op`` must hold (CPU), None where unspecified
    (reduce on a rank other than the root). Closed forms of :func:`fill_input`'s values."""
    tri = n * (n + 1) // 2  # sum of rank+1 over the ranks
    if op == "all_reduce":
        return torch.full((count,), tri, dtype=dtype)
    if op == "broadcast":
        return torch.full((count,), root + 1, dtype=dtype)
    if op == "reduce":
        return torch.full((count,), tri, dtype=dtype) if rank == root else None
    c = count // n
    s = torch.arange(n, dtype=dtype).repeat_interleave(c)  # the rank each chunk came from
    if op == "all_gather":
        return s + 1
    if op == "reduce_scatter":
        return torch.full((c,), (rank + 1) * tri, dtype=dtype)
    if op == "all_to_all":
        return s * n + rank + 1
    raise ValueError(f"unknown collective {op!r}")


def _buffers(
    op: str, rank: int, n: int, count: int, dtype: torch.dtype, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(pristine input, working input, output); the output is the input for in-place ops."""
    pristine = fill_input(op, rank, n, count, dtype=dtype).to(device)
    inp = pristine.clone()
    if op in ("all_reduce", "broadcast", "reduce"):
        return pristine, inp, inp
    out_count = count // n if op == "reduce_scatter" else count
    return pristine, inp, torch.empty(out_count, dtype=dtype, device=device)


def _runner(op: str, inp: torch.Tensor, out: torch.Tensor, root: int) -> Callable[[], None]:
    import torch.distributed as dist

    if op == "all_reduce":
        return lambda: dist.all_reduce(inp, op=dist.ReduceOp.SUM)
    if op == "broadcast":
        return lambda: dist.broadcast(inp, src=root)
    if op == "reduce":
        return lambda: dist.reduce(inp, dst=root, op=dist.ReduceOp.SUM)
    if op == "all_gather":
        return lambda: all_gather_single(out, inp)
    if op == "reduce_scatter":
        return lambda: reduce_scatter_single(out, inp)
    return lambda: dist.all_to_all_single(out, inp)


# -------------------------------------------------------------------------- measuring


def measure(
    op: str,
    size: int,
    *,
    warmup: int = 5,
    repeats: int = 20,
    root: int = 0,
    dtype: torch.dtype = torch.float32,
    device: torch.device | None = None,
) -> dict[str, Any]:
    """Time ``op`` at ``size`` bytes (every rank calls it); the same result on every rank.

    Returns a JSON-able dict: ``op, size, bytes, count, dtype, world_size, backend,
    device, root, warmup, repeats, times_s`` (per repeat, the slowest rank's),
    ``time_s, time_low_s, time_high_s, spread`` (median and spread of times_s),
    ``rank_median_s`` (each rank's own median), ``algbw_GBps, busbw_GBps, bus_factor,
    wrong`` (see the module docstring).
    """
    import torch.distributed as dist

    if warmup < 0 or repeats < 1:
        raise ValueError(f"need warmup >= 0 and repeats >= 1, not {warmup} and {repeats}")
    rank, n = dist.get_rank(), dist.get_world_size()
    device = device or group_device()
    element = torch.empty((), dtype=dtype).element_size()
    count = op_count(op, size, n, element)
    pristine, inp, out = _buffers(op, rank, n, count, dtype, device)
    expected = expected_output(op, rank, n, count, root=root, dtype=dtype)
    if expected is not None:
        expected = expected.to(device)
    run = _runner(op, inp, out, root)
    cuda = device.type == "cuda"

    times: list[float] = []
    wrong = 0
    for i in range(warmup + repeats):
        inp.copy_(pristine)
        if out is not inp:
            out.fill_(-1)  # no fill value yields -1, so a collective that did nothing shows
        dist.barrier()
        if cuda:
            # The barrier may return before the device is idle: start from a quiet GPU.
            torch.cuda.synchronize(device)
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            run()
            end.record()
            end.synchronize()
            elapsed = start.elapsed_time(end) / 1e3  # ms -> s
        else:
            t0 = time.perf_counter()
            run()
            elapsed = time.perf_counter() - t0
        if i < warmup:
            continue
        times.append(elapsed)
        if expected is not None:
            wrong += int((out != expected).sum())

    per_rank = gather_objects((times, wrong), group_info())
    slowest = [max(ts[k] for ts, _ in per_rank) for k in range(repeats)]
    sp = spread(slowest)
    nbytes = count * element
    factor = bus_factor(op, n)
    algbw = nbytes / sp.median / 1e9 if sp.median else float("nan")
    return {
        "op": op,
        "size": size,
        "bytes": nbytes,
        "count": count,
        "dtype": str(dtype).removeprefix("torch."),
        "world_size": n,
        "backend": dist.get_backend(),
        "device": device.type,
        "root": root if op in ("broadcast", "reduce") else None,
        "warmup": warmup,
        "repeats": repeats,
        "times_s": slowest,
        "time_s": sp.median,
        "time_low_s": sp.low,
        "time_high_s": sp.high,
        "spread": sp.kind,
        "rank_median_s": [spread(ts).median for ts, _ in per_rank],
        "algbw_GBps": algbw,
        "busbw_GBps": algbw * factor,
        "bus_factor": factor,
        "wrong": sum(w for _, w in per_rank),
    }


def sweep(
    sizes: Sequence[int],
    ops: Sequence[str] = OPS,
    *,
    warmup: int = 5,
    repeats: int = 20,
    root: int = 0,
    dtype: torch.dtype = torch.float32,
    device: torch.device | None = None,
    on_result: Callable[[dict[str, Any]], None] | None = None,
) -> list[dict[str, Any]]:
    """:func:`measure` for every op and size (op-major, sizes ascending), every rank calling.

    ``on_result`` sees each result as it is made (a study can save it, the CLI print it).
    """
    import torch.distributed as dist

    n = dist.get_world_size()
    element = torch.empty((), dtype=dtype).element_size()
    for op in ops:  # an unknown op or too small a size fails before any collective runs
        bus_factor(op, n)
        for size in sizes:
            op_count(op, size, n, element)
    results = []
    for op in ops:
        for size in sorted(sizes):
            r = measure(
                op, size, warmup=warmup, repeats=repeats, root=root, dtype=dtype, device=device
            )
            if on_result is not None:
                on_result(r)
            results.append(r)
    return results


def format_sweep(results: Sequence[dict[str, Any]]) -> str:
    """The results as an nccl-tests-like text table (one row per op and size)."""
    head = ("op", "size", "count", "time(us)", "spread(us)", "algbw", "busbw", "#wrong")
    cells = [head]
    for r in results:
        lo, hi = r["time_low_s"], r["time_high_s"]
        cells.append(
            (
                r["op"],
                format_size(r["bytes"]),
                str(r["count"]),
                f"{r['time_s'] * 1e6:.1f}",
                f"{lo * 1e6:.1f}–{hi * 1e6:.1f}" if lo is not None else "—",
                fmt_sig(r["algbw_GBps"]),
                fmt_sig(r["busbw_GBps"]),
                str(r["wrong"]),
            )
        )
    widths = [max(len(c[i]) for c in cells) for i in range(len(head))]
    lines = [" | ".join(s.rjust(w) for s, w in zip(c, widths)) for c in cells]
    return "\n".join(lines) + "\n(algbw and busbw in GB/s = 1e9 bytes/s)"
