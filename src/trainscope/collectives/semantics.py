"""What each collective does, shown on small tensors with textbook examples, and checked.

Six collectives, each with an example that is the textbook one at n = 3 ranks and follows a
stated rule at any world size n >= 2 (``RULES``):

- ``all_reduce`` (sum): rank r holds 2r+3 (3, 5, 7); every rank ends with n(n+2) (15).
- ``broadcast``: rank r holds 2r+3; every rank ends with the root's 2·root+3 (3 from rank 0).
- ``reduce`` (max): rank r holds 2r+3; the root ends with the largest, 2n+1 (7). The other
  ranks' buffers are unspecified afterwards (gloo leaves partial results in them): their
  "after" is shown, not checked.
- ``all_gather``: rank r holds one letter (A, B, C, encoded 1, 2, 3); every rank ends with
  all n letters in rank order.
- ``reduce_scatter`` (sum): rank r holds n numbers, element j = 2r+j+1, so n = 3 gives
  [1,2,3], [3,4,5], [5,6,7]: the issue's [1,2], [3,4], [5,6] with the third column that
  3 ranks need (each rank receives one element of the summed vector; two elements cannot
  be split over three ranks). Rank j ends with column j's sum n(n+j): 9, 12, 15.
- ``all_to_all``: rank r holds n numbers rn+j, element j addressed to rank j; rank j ends
  with [j, n+j, 2n+j, ...]: the n x n matrix, transposed.

The expected values are closed forms of n, r and the root (``expected_values``), not a
re-run of the reduction, so a wrong collective cannot agree with itself.

Every function but the pure ones (``RULES``, ``example_values``, ``expected_values``,
``format_value``, ``format_table``) runs inside an initialised process group and must be
called by every rank; results come back on every rank (gathered with
:func:`trainscope.runtime.dist.gather_objects`) as plain JSON-able dicts.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

# One formatting of example values for the console and the torch-free report alike.
from trainscope.reports.collectives_tables import letter  # noqa: F401 (re-exported)
from trainscope.reports.collectives_tables import value_text as format_value
from trainscope.runtime.dist import DistInfo, gather_objects

OPS = ("all_reduce", "broadcast", "reduce", "all_gather", "reduce_scatter", "all_to_all")

RULES = {
    "all_reduce": "sum; rank r holds 2r+3, every rank ends with n(n+2)",
    "broadcast": "rank r holds 2r+3, every rank ends with the root's 2*root+3",
    "reduce": "max; rank r holds 2r+3, the root ends with 2n+1 (others: unspecified)",
    "all_gather": "rank r holds letter number r+1 (A, B, ...), every rank ends with all n",
    "reduce_scatter": "sum; rank r holds [2r+1, ..., 2r+n], rank j ends with n(n+j)",
    "all_to_all": "rank r holds [rn, ..., rn+n-1], rank j ends with [j, n+j, ..., (n-1)n+j]",
}
"""The example's rule per collective, in terms of the rank r, world size n and root."""

# The ops that use a root rank (broadcast's source, reduce's destination).
ROOTED = ("broadcast", "reduce")


def _check(op: str, world: int, rank: int = 0, root: int = 0) -> None:
    if op not in OPS:
        raise ValueError(f"unknown collective {op!r}; expected one of {', '.join(OPS)}")
    if world < 2:
        raise ValueError(f"the examples need a world of at least 2 ranks, not {world}")
    if not (0 <= rank < world and 0 <= root < world):
        raise ValueError(f"rank {rank} and root {root} must lie in 0..{world - 1}")


def example_values(op: str, rank: int, world: int, root: int = 0) -> list[int]:
    """What ``rank`` holds before ``op`` in the example for a world of ``world`` ranks."""
    _check(op, world, rank, root)
    if op in ("all_reduce", "broadcast", "reduce"):
        return [2 * rank + 3]
    if op == "all_gather":
        return [rank + 1]  # the letter A, B, C, ... (1-based so that 0 shows as empty)
    if op == "reduce_scatter":
        return [2 * rank + j + 1 for j in range(world)]
    return [rank * world + j for j in range(world)]  # all_to_all


def expected_values(op: str, rank: int, world: int, root: int = 0) -> list[int] | None:
    """What ``rank`` holds after ``op`` (closed forms), None where it is unspecified."""
    _check(op, world, rank, root)
    n = world
    if op == "all_reduce":
        return [n * (n + 2)]  # sum of 2r+3 over r = n(n-1) + 3n
    if op == "broadcast":
        return [2 * root + 3]
    if op == "reduce":
        return [2 * (n - 1) + 3] if rank == root else None
    if op == "all_gather":
        return [r + 1 for r in range(n)]
    if op == "reduce_scatter":
        return [n * (n + rank)]  # sum of 2r+rank+1 over r = n(n-1) + n(rank+1)
    return [r * n + rank for r in range(n)]  # all_to_all: column `rank` of the matrix


# -------------------------------------------------------------------- inside a group


def group_device() -> torch.device:
    """The device collectives of the current group run on: this rank's GPU under nccl."""
    import torch.distributed as dist

    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def group_info() -> DistInfo:
    """This process's :class:`~trainscope.runtime.dist.DistInfo` in the default group."""
    import torch.distributed as dist

    rank, world = dist.get_rank(), dist.get_world_size()
    return DistInfo(rank, rank, world, world, dist.get_backend())


def _tensor_api(name: str, old: str) -> Callable[..., Any]:
    """torch >= 2.13 renames all_gather_into_tensor/reduce_scatter_tensor to ``*_single``
    and deprecates the old names; the project still supports torch 2.6, which lacks them."""
    import torch.distributed as dist

    return getattr(dist, name, None) or getattr(dist, old)


def all_gather_single(out: torch.Tensor, inp: torch.Tensor) -> None:
    """Every rank's ``inp`` concatenated in rank order into ``out`` (n x ``inp``)."""
    _tensor_api("all_gather_single", "all_gather_into_tensor")(out, inp)


def reduce_scatter_single(out: torch.Tensor, inp: torch.Tensor, op: Any = None) -> None:
    """Chunk r of the elementwise reduction (sum by default) of every rank's ``inp``, to
    rank r's ``out`` (``inp`` is n x ``out``)."""
    import torch.distributed as dist

    fn = _tensor_api("reduce_scatter_single", "reduce_scatter_tensor")
    fn(out, inp, op=dist.ReduceOp.SUM if op is None else op)


def run_example(
    op: str, *, root: int = 0, device: torch.device | None = None, dtype: torch.dtype | None = None
) -> dict[str, Any]:
    """Run ``op`` on its example; every rank's before/after/expected row, on every rank.

    Returns ``{"op", "rule", "world_size", "root", "letters", "rows", "ok"}`` where each row
    is ``{"rank", "before", "after", "expected", "ok"}`` (lists of numbers; ``expected`` and
    ``ok`` are None for the non-root ranks of ``reduce``). float32 by default: the values
    are small integers, exact in it, and it is the dtype gradients are reduced in.
    """
    import torch.distributed as dist

    rank, n = dist.get_rank(), dist.get_world_size()
    _check(op, n, rank, root)
    device = device or group_device()
    dtype = dtype or torch.float32
    before = example_values(op, rank, n, root)
    x = torch.tensor(before, dtype=dtype, device=device)
    if op == "all_reduce":
        dist.all_reduce(x, op=dist.ReduceOp.SUM)
        out = x
    elif op == "broadcast":
        dist.broadcast(x, src=root)
        out = x
    elif op == "reduce":
        dist.reduce(x, dst=root, op=dist.ReduceOp.MAX)
        out = x
    elif op == "all_gather":
        out = torch.zeros(n * x.numel(), dtype=dtype, device=device)
        all_gather_single(out, x)
    elif op == "reduce_scatter":
        out = torch.zeros(1, dtype=dtype, device=device)
        reduce_scatter_single(out, x)
    else:
        out = torch.zeros_like(x)
        dist.all_to_all_single(out, x)
    after = [_plain(v) for v in out.cpu().tolist()]
    expected = expected_values(op, rank, n, root)
    row = {
        "rank": rank,
        "before": before,
        "after": after,
        "expected": expected,
        "ok": None if expected is None else after == expected,
    }
    rows = gather_objects(row, group_info())
    return {
        "op": op,
        "rule": RULES[op],
        "world_size": n,
        "root": root if op in ROOTED else None,
        "letters": op == "all_gather",
        "rows": rows,
        "ok": all(r["ok"] is not False for r in rows),
    }


def _plain(v: float) -> float | int:
    """An integral float as an int, so that JSON and equality with the expected ints agree."""
    return int(v) if float(v).is_integer() else float(v)


def run_examples(
    ops: Sequence[str] = OPS, *, root: int = 0, device: torch.device | None = None
) -> list[dict[str, Any]]:
    """:func:`run_example` for each of ``ops``, in order."""
    return [run_example(op, root=root, device=device) for op in ops]


def format_table(result: dict[str, Any]) -> str:
    """The example as a text table: ``rank | before | after | expected | ok``."""
    letters = bool(result.get("letters"))
    head = f"{result['op']}"
    if result.get("root") is not None:
        head += f" (root {result['root']})"
    lines = [f"{head}: {result['rule']}"]
    cells = [("rank", "before", "after", "expected", "ok")]
    for row in result["rows"]:
        ok = {True: "yes", False: "NO", None: "—"}[row["ok"]]
        cells.append(
            (
                str(row["rank"]),
                format_value(row["before"], letters),
                format_value(row["after"], letters),
                format_value(row["expected"], letters),
                ok,
            )
        )
    widths = [max(len(c[i]) for c in cells) for i in range(5)]
    for c in cells:
        lines.append(" | ".join(s.ljust(w) for s, w in zip(c, widths)).rstrip())
    return "\n".join(lines)


# ------------------------------------------------------------------------- identities

IDENTITIES = (
    "reduce + broadcast == all_reduce",
    "reduce_scatter + all_gather == all_reduce",
)


def sum_tolerance(world: int, dtype: torch.dtype = torch.float32) -> float:
    """The absolute tolerance within which two sums of ``world`` values in [-1, 1] agree.

    Any order of summing n floats errs by at most gamma_{n-1} * sum|x_i| with
    gamma_k = k*u / (1 - k*u) and u the unit roundoff (Higham, *Accuracy and Stability of
    Numerical Algorithms*, 2nd ed., eq. 4.4). The collectives may add in different orders
    (a ring, a tree, a fixed rank order), so two correct results differ by at most twice
    that; with |x_i| <= 1, sum|x_i| <= n. A rigorous bound, not a guess: float32 and
    n = 3 give 7.2e-7, while a wrong result is off by about the size of a value.
    """
    u = torch.finfo(dtype).eps / 2
    k = world - 1
    gamma = k * u / (1 - k * u)
    return 2 * gamma * world


def check_identities(
    *,
    chunk: int = 256,
    seed: int = 0,
    root: int = 0,
    device: torch.device | None = None,
    dtype: torch.dtype = torch.float32,
) -> list[dict[str, Any]]:
    """Both identities on random vectors of ``chunk * n`` values in [-1, 1) per rank.

    Returns, per identity, ``{"identity", "world_size", "numel", "dtype", "max_abs_diff",
    "atol", "ok"}``: the largest difference over every rank and element, the tolerance of
    :func:`sum_tolerance`, and whether every rank agreed within it (``torch.allclose`` with
    ``rtol=0``).
    """
    import torch.distributed as dist

    rank, n = dist.get_rank(), dist.get_world_size()
    device = device or group_device()
    gen = torch.Generator().manual_seed(seed * 1_000_003 + rank)  # different on each rank
    x = (torch.rand(chunk * n, generator=gen, dtype=torch.float64) * 2 - 1).to(dtype)
    x = x.to(device)
    atol = sum_tolerance(n, dtype)

    reference = x.clone()
    dist.all_reduce(reference, op=dist.ReduceOp.SUM)

    via_root = x.clone()
    dist.reduce(via_root, dst=root, op=dist.ReduceOp.SUM)
    dist.broadcast(via_root, src=root)

    mine = torch.empty(chunk, dtype=dtype, device=device)
    reduce_scatter_single(mine, x)
    via_chunks = torch.empty_like(x)
    all_gather_single(via_chunks, mine)

    out = []
    for name, got in zip(IDENTITIES, (via_root, via_chunks)):
        diff = float((got - reference).abs().max())
        ok = torch.allclose(got, reference, rtol=0.0, atol=atol)
        per_rank = gather_objects((diff, ok), group_info())
        out.append(
            {
                "identity": name,
                "world_size": n,
                "numel": x.numel(),
                "dtype": str(dtype).removeprefix("torch."),
                "max_abs_diff": max(d for d, _ in per_rank),
                "atol": atol,
                "ok": all(k for _, k in per_rank),
            }
        )
    return out
