"""``trainscope collectives --predict``: what each strategy's gradient communication would
cost on other hardware, from the α–β model (torch-free; no process is started).

The link comes from ``--latency``/``--bandwidth``, a named ``--interconnect``, or the fits
of a sweep already run (``--fit DIR``); the gradients from a named architecture
(``--model``, default bert-base) or a run's record (``--run DIR``).

The interconnects' bandwidths are the per-direction peak figures of their specifications
(NVLink 4 on an H100 SXM: 18 links, 900 GB/s *both directions together*, so 450 GB/s each
way; PCIe 4.0 x16: 16 GT/s x 16 lanes, 128b/130b coding, 31.5 GB/s each way; InfiniBand:
the signalling rate over 8). Their latencies are orders of magnitude, not measurements:
``trainscope collectives`` on the machine fits both.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

from trainscope import registry
from trainscope.comm.cost_model import MAX_WORLD, fit_sweep, fits_from_dict, given
from trainscope.config import MAX_BUCKET_MB
from trainscope.errors import ConfigError
from trainscope.estimate.archs import named
from trainscope.util.checks import need_number
from trainscope.util.numfmt import fmt_sig

# name -> (per-direction GB/s, latency s, what the figures are)
INTERCONNECTS: dict[str, tuple[float, float, str]] = {
    "nvlink4": (450.0, 2e-6, "NVLink 4 (H100 SXM): 900 GB/s both ways = 450 GB/s each way"),
    "pcie4-x16": (31.5, 5e-6, "PCIe 4.0 x16: 31.5 GB/s each way"),
    "ib-100g": (12.5, 5e-6, "100 Gb/s InfiniBand (EDR): 12.5 GB/s each way"),
    "ib-400g": (50.0, 5e-6, "400 Gb/s InfiniBand (NDR): 50 GB/s each way"),
}
ALIASES = {
    "nvlink": "nvlink4",
    "pcie4": "pcie4-x16",
    "pcie": "pcie4-x16",
    "100g-ib": "ib-100g",
    "400g-ib": "ib-400g",
    "edr": "ib-100g",
    "ndr": "ib-400g",
    "100gb-infiniband": "ib-100g",
    "400gb-infiniband": "ib-400g",
    "infiniband-100g": "ib-100g",
    "infiniband-400g": "ib-400g",
    "ib-100": "ib-100g",
    "ib-400": "ib-400g",
}
MIN_GBPS = 1e-6  # 1 kB/s: slower is a typo, and times past it overflow nothing useful
MAX_GRAD_BYTES = 1 << 50  # a gradient above a pebibyte in a record is damage
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}

_NUM = r"(\d+(?:\.\d*)?|\.\d+)(?:e([+-]?\d+))?"
_BW_UNITS = {"b/s": 1 / 8, "kb/s": 1e3 / 8, "mb/s": 1e6 / 8, "gb/s": 1e9 / 8, "tb/s": 1e12 / 8}
_BYTE_UNITS = {"b/s": 1.0, "kb/s": 1e3, "mb/s": 1e6, "gb/s": 1e9, "tb/s": 1e12}
_BYTE_UNITS.update({"kib/s": 1024.0, "mib/s": 1024.0**2, "gib/s": 1024.0**3})
_TIME_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}


def _number(m: re.Match[str]) -> float:
    # One float() of the whole literal: 1e400 becomes inf (refused by the range check),
    # never an OverflowError.
    return float(m.group(1) + (f"e{m.group(2)}" if m.group(2) else ""))


def parse_bandwidth(text: str) -> float:
    """``"900GB/s"`` -> 900.0 (GB/s, 10^9 bytes); ``"100Gb/s"`` (bits) -> 12.5; GiB/s,
    MB/s ... too. Raises ConfigError."""
    m = re.fullmatch(_NUM + r"\s*([KMGT]?i?[Bb]/s)", text.strip())
    if not m:
        raise ConfigError(
            f"bad bandwidth {text!r}: write a number and a unit, e.g. 900GB/s (bytes), "
            "100Gb/s (bits) or 25GiB/s"
        )
    unit = m.group(3)
    # Case carries the meaning here: B is bytes, b is bits.
    table = _BYTE_UNITS if unit.endswith("B/s") else _BW_UNITS
    scale = table.get(unit.lower())
    if scale is None:
        raise ConfigError(
            f"bandwidth {text!r}: unit {unit} is not one of "
            "B/s, kB/s, MB/s, GB/s, TB/s, KiB/s, MiB/s, GiB/s (bytes) or b/s, kb/s, Mb/s, "
            "Gb/s, Tb/s (bits)"
        )
    value = _number(m) * scale / 1e9
    if not MIN_GBPS <= value < 1e6:
        raise ConfigError(f"bandwidth {text!r} is out of range (1 kB/s to 1 PB/s)")
    return value


def parse_latency(text: str) -> float:
    """``"5us"`` -> 5e-6 seconds (s, ms, us/µs, ns). Raises ConfigError."""
    m = re.fullmatch(_NUM + r"\s*(s|ms|us|µs|ns)", text.strip())
    if not m:
        raise ConfigError(f"bad latency {text!r}: write a number and a unit, e.g. 5us or 0.1ms")
    value = _number(m) * _TIME_UNITS[m.group(3)]
    if not 0 <= value <= 10:
        raise ConfigError(f"latency {text!r} is out of range (0 to 10 s)")
    return value


def add_link_flags(g: Any) -> None:
    """--bandwidth, --latency, --interconnect and --fit: the link :func:`link_fits` reads
    (``trainscope collectives --predict`` and ``trainscope doctor``)."""
    g.add_argument("--bandwidth", metavar="BW", help="link bandwidth each way, e.g. 900GB/s")
    g.add_argument("--latency", metavar="T", help="latency per message, e.g. 5us")
    g.add_argument(
        "--interconnect",
        metavar="NAME",
        help="a link's figures: " + ", ".join(INTERCONNECTS) + " (--bandwidth/--latency override)",
    )
    g.add_argument("--fit", metavar="DIR", help="use the α, β fitted by a collectives study")


def add_flags(p: argparse.ArgumentParser) -> None:
    """The --predict flags of ``trainscope collectives``."""
    g = p.add_argument_group(
        "predict (no processes: the α–β model's cost of each strategy's gradient sync)"
    )
    g.add_argument("--predict", action="store_true", help="predict instead of measuring")
    g.add_argument("--world", type=int, metavar="N", help="ranks (default: the fit's, else 8)")
    add_link_flags(g)
    g.add_argument(
        "--model", default=None, metavar="NAME", help="gradients of an architecture (bert-base)"
    )
    g.add_argument("--run", metavar="DIR", help="gradients of a trainscope run's record")
    g.add_argument("--grad-dtype", choices=tuple(DTYPE_BYTES), help="gradients' dtype (float32)")
    g.add_argument(
        "--bucket-mb",
        type=float,
        metavar="MB",
        help="bucket cap of allreduce-bucketed and DDP (default 25; DDP's first bucket is "
        "1 MiB only at its default, as in torch)",
    )
    g.add_argument(
        "--backward-ms", type=float, metavar="MS", help="backward's time: DDP's exposed part"
    )
    g.add_argument("--json", action="store_true", help="print the prediction as JSON")


def interconnect_key(name: str) -> str:
    """``"PCIe4 x16"``, ``"pcie4_x16"``, ``"NVLink4"`` ... -> the key of :data:`INTERCONNECTS`
    (case, spaces and underscores do not matter); ConfigError for an unknown one."""
    text = re.sub(r"[\s_]+", "-", name.strip().lower())
    key = ALIASES.get(text, text)
    if key not in INTERCONNECTS:
        raise ConfigError(f"unknown interconnect {name!r}: choose {', '.join(INTERCONNECTS)}")
    return key


def link_fits(args: argparse.Namespace, world: int) -> tuple[dict[str, Any], str]:
    """The fits to predict with and one line saying where they come from."""
    if args.fit:
        if args.bandwidth or args.latency or args.interconnect:
            raise ConfigError(
                "--fit takes α, β from a sweep: drop --bandwidth/--latency/--interconnect"
            )
        fits, where = fits_of_study(Path(args.fit))
        return fits, where
    bw = lat = None
    where = "given"
    if args.interconnect:
        key = interconnect_key(args.interconnect)
        bw, lat, where = INTERCONNECTS[key]
        if args.bandwidth or args.latency:  # the named figures no longer all hold
            where = f"{key}'s figures with " + " and ".join(
                f"--{f} given" for f in ("bandwidth", "latency") if getattr(args, f)
            )
    if args.bandwidth:
        bw = parse_bandwidth(args.bandwidth)
    if args.latency:
        lat = parse_latency(args.latency)
    if bw is None or lat is None:
        raise ConfigError(
            "--predict needs a link: --bandwidth and --latency, an --interconnect, or --fit DIR"
        )
    link = f"α = {fmt_sig(lat * 1e6, trim=True)} µs, 1/β = {fmt_sig(bw, 4, trim=True)} GB/s"
    return given(lat, bw, world), f"{where}; {link}"


def fits_of_study(study_dir: Path) -> tuple[dict[str, Any], str]:
    """The fits of a collectives study (saved, else fitted now from its results)."""
    from trainscope.comm.record import KIND, read_record

    data = read_record(study_dir)
    if data.get("kind") != KIND:
        raise ConfigError(f"{study_dir} is not a collectives study (--fit needs one)")
    saved = (
        (data.get("cost_model") or {}).get("fits")
        if isinstance(data.get("cost_model"), dict)
        else None
    )
    fits = fits_from_dict(saved) or fit_sweep(data.get("results") or [])
    if not fits:
        raise ConfigError(f"{study_dir}: no op has two clean sizes to fit α and β to")
    backend = (
        (data.get("options") or {}).get("backend")
        if isinstance(data.get("options"), dict)
        else None
    )
    on = f"{backend}, " if isinstance(backend, str) else ""
    return fits, f"fitted on {study_dir} ({on}{', '.join(fits)})"


def gradients(args: argparse.Namespace) -> Any:
    """The gradient tensors to predict for: --run's record, else --model's shapes."""
    from trainscope.comm.predict import GradTensors
    from trainscope.estimate.tensors import tensor_numels

    dtype = args.grad_dtype or "float32"
    size = DTYPE_BYTES[dtype]
    if args.run:
        if args.model:
            raise ConfigError("give --model or --run, not both")
        return run_gradients(Path(args.run))

    arch = named(args.model or "bert-base")
    flat, units = tensor_numels(arch)
    return GradTensors(
        f"{arch.name} ({sum(flat) / 1e6:.1f}M parameters, {len(flat)} tensors, {dtype})",
        tuple(size * t for t in flat),
        tuple(size * sum(u) for u in units if u),
    )


def _byte_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_GRAD_BYTES


def run_gradients(run_dir: Path) -> Any:
    """A run's gradients as its summary recorded them (``gradients``)."""
    from trainscope.comm.predict import GradTensors
    from trainscope.records.jsonio import read_json_object

    summary = read_json_object(run_dir / "summary.json")
    g = summary.get("gradients") if isinstance(summary, dict) else None
    sizes = g.get("tensor_bytes") if isinstance(g, dict) else None
    if not isinstance(sizes, list) or not all(_byte_count(s) for s in sizes):
        raise ConfigError(
            f"{run_dir}: its summary records no usable gradient sizes (an older run, or damaged)"
        )
    units = g.get("unit_bytes")
    ok = isinstance(units, list) and all(_byte_count(u) for u in units)
    return GradTensors(
        f"{summary.get('model', 'the model')} of {run_dir.name} ({len(sizes)} tensors)",
        tuple(sizes),
        tuple(u for u in units if u) if ok else (),
    )


def main(args: argparse.Namespace) -> int:
    """Print the predicted communication of every strategy."""
    from trainscope.comm.predict import predict
    from trainscope.reports.collectives_tables import Printer
    from trainscope.reports.cost_model_tables import fit_table, prediction_table

    world = args.world
    if world is None and args.fit:
        world = next(iter(fits_of_study(Path(args.fit))[0].values())).world_size
    world = 8 if world is None else world
    if not 2 <= world <= MAX_WORLD:
        raise ConfigError(f"--world must be in 2..{MAX_WORLD}, got {world}")

    if args.bucket_mb is not None:
        need_number("--bucket-mb", args.bucket_mb, low=0.0, low_open=True, high=MAX_BUCKET_MB)
    if args.backward_ms is not None:
        need_number("--backward-ms", args.backward_ms, low=0.0, high=1e9)
    fits, where = link_fits(args, world)
    grads = gradients(args)
    backward = None if args.backward_ms is None else args.backward_ms / 1e3
    preds = predict(
        grads,
        world,
        fits,
        bucket_mb=25.0 if args.bucket_mb is None else args.bucket_mb,
        ddp_bucket_mb=args.bucket_mb,  # None: DDP's own default (1 MiB first, then 25)
        backward_s=backward,
    )
    missing = not_modelled()
    if args.json:  # for scripts: strict JSON on stdout, nothing else
        data = {
            "world_size": world,
            "gradients": grads.name,
            "gradient_bytes": grads.total,
            "link": where,
            "fits": {op: f.to_dict() for op, f in fits.items()},
            "predictions": [p.to_dict() for p in preds],
            "not_modelled": missing,
        }
        print(json.dumps(data, indent=1, allow_nan=False))
        return 0
    show = Printer(not args.quiet)
    if args.fit:
        show.table(fit_table(fits))
    title = (
        f"Predicted gradient communication per step: {grads.name} on {world} ranks; link: "
        f"{where}. Back to back, no contention; the busiest rank's bytes."
    )
    show.table(prediction_table(preds, title))
    if missing:
        show.say(
            "No communication model (their strategy's registry entry names no predictor): "
            + ", ".join(missing)
        )
    return 0


def not_modelled() -> list[str]:
    """Multi-process strategy configurations the α–β model has no prediction for."""
    return [
        name
        for name, (entry, variant) in registry.study_variants().items()
        if entry.multiprocess and not variant.one_process and variant.predict is None
    ]
