"""INT8 post-training quantization of a finished run: ``trainscope quantize RUN_DIR``.

The run's model is rebuilt from ``config.yaml`` (data read offline: nothing downloads),
its trained weights loaded from ``model.safetensors``, and every ``nn.Linear`` layer of a
copy quantized by torchao's ``Int8DynamicActivationInt8WeightConfig``: weights stored as
int8 with one fp32 scale per output channel (symmetric), activations quantized to int8
per row (per token) at run time, the matrix product in int8. Both models are evaluated
on the run's test split (its validation split when it has no test split) and compared:
tensor bytes, loss / accuracy / perplexity, evaluation time. The result goes to
``RUN_DIR/quantize.json`` (recorded in the run's marker first) and into the run's report.

torchao is optional (``pip install 'trainscope[quant]'``) and imported only here, inside
functions; ``torch.ao.quantization`` is deprecated and not used. Convolutions, embeddings
and norms stay fp32: only Linear layers are quantized, as the method defines.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import os
import platform
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from trainscope.config import DEVICES_RE, from_dict, show
from trainscope.errors import ConfigError, DataError, TrainscopeError
from trainscope.records import atomic_write_json
from trainscope.records.ownership import claim_dir
from trainscope.records.run_dir import read_summary, try_summary
from trainscope.tools.quantize_console import format_quantize
from trainscope.util.safe_yaml import load_yaml
from trainscope.util.spread import spread
from trainscope.workloads import build_workload

RESULT_FILE = "quantize.json"
WEIGHTS_FILE = "model.safetensors"
SCHEMA_VERSION = 1
METHOD = "Int8DynamicActivationInt8WeightConfig"
TORCHAO_MISSING = "quantize needs torchao: pip install 'trainscope[quant]'"
TORCHAO_MIN = "0.13"
"""The oldest torchao whose int8 dynamic quantization was checked to run on CPU."""

MAX_REPEATS = 5
REPEAT_BUDGET_S = 30.0
"""Timed repeats (after one warm-up pass of each model) are as many as fit in this many
seconds of evaluation, from 1 to :data:`MAX_REPEATS`."""

BYTES_HOW = (
    "tensor bytes of every parameter and buffer (tied ones once); a torchao quantized "
    "weight counts every tensor it is made of (int8 data, fp32 scales, zero points)"
)


# ---------------------------------------------------------------------------------------
# torchao
# ---------------------------------------------------------------------------------------


def _import_torchao() -> tuple[Any, Any, Any]:
    """``(torchao, quantize_, Int8DynamicActivationInt8WeightConfig)``, or one ConfigError.

    torchao logs a warning for each of its CUDA-only kernels that a CPU build of torch
    cannot load, and torch one about an Enum it registers; none matters here, so both
    loggers are quiet while it is imported (and as they were afterwards).
    """
    loggers = [logging.getLogger(name) for name in ("torchao", "torch.utils._pytree")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        import torchao
        import torchao.quantization as tq
    except ImportError:
        raise ConfigError(TORCHAO_MISSING) from None
    except Exception as exc:  # a torchao built for another torch may fail in other ways
        import torch

        reason = " ".join(str(exc).split())[:200] or type(exc).__name__
        raise ConfigError(
            f"torchao cannot be imported beside torch {torch.__version__} ({reason}): "
            "pip install 'trainscope[quant]'"
        ) from None
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)
    version = getattr(torchao, "__version__", "unknown")
    config = getattr(tq, METHOD, None)
    if config is None or not hasattr(tq, "quantize_"):
        raise ConfigError(
            f"torchao {version} has no {METHOD} (needs torchao >= {TORCHAO_MIN}): "
            "pip install -U 'trainscope[quant]'"
        )
    return torchao, tq.quantize_, config


def _make_config(config_cls: Any) -> Any:
    """The config with its defaults, except that it leaves torch.compile's global
    settings alone (``set_inductor_config``): nothing is compiled here."""
    names = {f.name for f in dataclasses.fields(config_cls)}
    return config_cls(**({"set_inductor_config": False} if "set_inductor_config" in names else {}))


# ---------------------------------------------------------------------------------------
# Counting bytes
# ---------------------------------------------------------------------------------------


def tensor_bytes(t: Any) -> int:
    """Bytes a tensor holds, counted through tensor subclasses.

    A plain tensor is ``numel x element_size``. A torchao quantized weight is a tensor
    subclass that wraps other tensors (``Int8Tensor``: int8 ``qdata``, fp32 per-row
    ``scale`` and a ``zero_point``; older torchao nests an ``AffineQuantizedTensor``
    inside a ``LinearActivationQuantizedTensor``). Its own ``numel x element_size`` would
    report the fp32 size it poses as; instead every inner tensor its
    ``__tensor_flatten__`` names is counted, recursively, so the int8 data and its scales
    (and zero points, even where symmetric quantization keeps them all zero) all count.
    """
    from torch.utils._python_dispatch import is_traceable_wrapper_subclass

    if is_traceable_wrapper_subclass(t):
        names, _ = t.__tensor_flatten__()
        inner = (getattr(t, name) for name in names)
        return sum(tensor_bytes(x) for x in inner if x is not None)
    return t.numel() * t.element_size()


def model_bytes(model: Any) -> int:
    """Tensor bytes of a model's parameters and buffers; a tied tensor counts once."""
    seen: set[int] = set()
    total = 0
    for t in [*model.parameters(), *model.buffers()]:
        if id(t) not in seen:
            seen.add(id(t))
            total += tensor_bytes(t)
    return total


def _linear_layers(model: Any) -> dict[str, Any]:
    import torch

    return {name: m for name, m in model.named_modules() if isinstance(m, torch.nn.Linear)}


def _tied_linears(model: Any, linears: dict[str, Any]) -> list[str]:
    """Linear layers whose weight is also another parameter (a tied LM head): quantizing
    the layer gives it an int8 copy, and the other user (an embedding) keeps fp32."""
    names: dict[int, list[str]] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        names.setdefault(id(p), []).append(name)
    return [n for n, m in linears.items() if len(names.get(id(m.weight), ())) > 1]


def _is_quantized(weight: Any) -> bool:
    import torch

    return type(weight) not in (torch.Tensor, torch.nn.Parameter)


# ---------------------------------------------------------------------------------------
# The run directory
# ---------------------------------------------------------------------------------------


def _check_run_dir(run_dir: str | os.PathLike[str]) -> Path:
    """The run directory, or one line saying why ``run_dir`` is not one to quantize."""
    root = Path(run_dir).expanduser()
    if root.is_symlink():
        # As everywhere trainscope writes: never through a link.
        raise TrainscopeError(
            f"run directory {root} is a symbolic link; trainscope never writes through a "
            "link: give the directory it points to"
        )
    if not root.is_dir():
        raise TrainscopeError(f"run directory {root} does not exist or is not a directory")
    for name in ("summary.json", "config.yaml"):
        if not (root / name).is_file():
            raise TrainscopeError(f"{root} is not a run directory (no {name})")
    if not (root / WEIGHTS_FILE).is_file():
        raise TrainscopeError(
            f"{root} has no {WEIGHTS_FILE}; quantize needs a run saved with its weights "
            "(train.save_weights, not a data-only run)"
        )
    read_summary(root / "summary.json")  # not a summary (a list, no status): refused
    return root


def _read_config(root: Path) -> Any:
    """The run's RunConfig, its data to be read locally only (download off)."""

    try:
        cfg = from_dict(load_yaml(root / "config.yaml"))
        return dataclasses.replace(cfg, workload=dataclasses.replace(cfg.workload, download=False))
    except ConfigError as exc:
        raise ConfigError(f"{root / 'config.yaml'}: {exc}") from None


def _run_status(root: Path) -> str | None:
    return try_summary(root / "summary.json").get("status")


# ---------------------------------------------------------------------------------------
# Evaluation
# ---------------------------------------------------------------------------------------


def _split(workload: Any) -> tuple[str, Any]:
    """("test", the test set), else ("validation", the validation set): the first that
    holds samples."""
    for name, data in (("test", workload.test_set), ("validation", workload.val_set)):
        if data is None:
            continue
        try:
            if len(data) == 0:
                continue
        except TypeError:
            pass  # a split without len(): evaluate it
        return name, data
    raise DataError(
        f"workload {workload.name!r} has neither a test nor a validation split to evaluate on"
    )


def _evaluate_timed(state: Any, workload: Any, loader: Any) -> tuple[dict[str, Any], float]:
    """One evaluation pass: its figures and its seconds (device work included)."""
    from trainscope.profiling.timer import device_sync
    from trainscope.train.loop import evaluate

    device_sync(state.device)
    t0 = time.perf_counter()
    result = evaluate(state, workload, loader)
    device_sync(state.device)
    return result, time.perf_counter() - t0


def _figures(result: dict[str, Any]) -> dict[str, Any]:
    return {k: result.get(k) for k in ("loss", "accuracy", "perplexity") if k in result}


def _timing(seconds: list[float], first: float) -> dict[str, Any]:
    s = spread(seconds)
    return {
        "median": s.median,
        "low": s.low,
        "high": s.high,
        "spread": s.kind,
        "n": s.n,
        "repeats": seconds,
        "warmup": first,
    }


def _difference(a: Any, b: Any) -> float | None:
    ok = all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (a, b))
    return b - a if ok else None


# ---------------------------------------------------------------------------------------
# The command
# ---------------------------------------------------------------------------------------


def quantize_run(
    run_dir: str | os.PathLike[str],
    *,
    device: str = "cpu",
    batch_size: int | None = None,
    repeats: int | None = None,
) -> dict[str, Any]:
    """Quantize a finished run's Linear layers to INT8 and compare it with fp32.

    Rebuilds the run's workload from ``config.yaml`` (offline), loads
    ``model.safetensors``, quantizes a copy with torchao (int8 weights per output channel,
    dynamic int8 activations per row), evaluates both on the test split (validation when
    there is none) in fp32 precision, and writes the result to ``RUN_DIR/quantize.json``.

    Timing: model building, loading and quantizing are outside the clock. Each model is
    evaluated once as a warm-up (its figures are the ones reported; its seconds are kept
    apart as ``warmup``, out of the median), then ``repeats`` timed passes
    alternate fp32 and int8, so a slow spell of the machine hits both; the median, its
    spread (min-max below 5 repeats, IQR from 5) and n are reported. ``repeats`` None:
    as many as fit in :data:`REPEAT_BUDGET_S` seconds, 1 to :data:`MAX_REPEATS`. Loaders
    run in this process (no workers). torchao's int8 kernels are made to be fused by
    ``torch.compile``; nothing is compiled here, so the time is eager mode's.

    Bytes are :func:`model_bytes` (see :func:`tensor_bytes` for quantized weights): the
    whole model, and its Linear weights alone. ``device`` is cpu (default), cuda, cuda:N
    or auto; ``batch_size`` defaults to the run's. Returns the dict written to the file.
    Raises TrainscopeError (one line) for what the user can fix: not a run directory, no
    weights, the data missing (nothing downloads), torchao missing, a run in use.
    """
    root = _checked_request(run_dir, device, batch_size, repeats)
    cfg = _read_config(root)
    torchao, quantize_, config_cls = _import_torchao()

    from trainscope.runtime.device import resolve_device

    dev = resolve_device(device)
    # Locked from here on: a run still writing this directory, or a second quantize, is
    # refused before any work; the lock also guards the marker we add quantize.json to.
    owned = claim_dir(root, "run", existing="keep", what="run directory")
    try:
        if (root / RESULT_FILE).exists() and RESULT_FILE not in owned.files:
            raise TrainscopeError(
                f"{root / RESULT_FILE} exists and trainscope did not write it: move it away "
                "(quantize never replaces a file it does not own)"
            )
        run = _load_run(root, cfg, dev)
        int8 = _quantize(run, torchao.__version__, quantize_, config_cls)
        timed = _measure(run, int8.model, batch_size, repeats)
        result = _result(root, run, int8, timed, batch_size)
        _write_result(owned, root, result)
        return result
    finally:
        owned.release()


def _checked_request(
    run_dir: str | os.PathLike[str], device: Any, batch_size: Any, repeats: Any
) -> Path:
    """The run directory to quantize, after checking :func:`quantize_run`'s arguments
    (one line for the first that does not fit)."""
    if not isinstance(device, str) or not DEVICES_RE.match(device):
        raise ConfigError(f"device must be auto, cpu, cuda or cuda:N, got {show(device)}")
    root = _check_run_dir(run_dir)
    if batch_size is not None and (
        not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1
    ):
        raise ConfigError(f"batch size must be a positive integer, got {batch_size!r}")
    if repeats is not None and (
        not isinstance(repeats, int) or isinstance(repeats, bool) or not 1 <= repeats <= 100
    ):
        raise ConfigError(f"repeats must be an integer in 1..100, got {repeats!r}")
    return root


@dataclasses.dataclass
class _Run:
    """The run rebuilt: its workload, its trained fp32 model on the device, the split to
    evaluate on."""

    cfg: Any
    device: Any
    workload: Any
    split: str
    data: Any
    model: Any
    linears: dict[str, Any]


def _load_run(root: Path, cfg: Any, dev: Any) -> _Run:
    """Build the run's workload (data read offline), load its trained weights and move
    the model to ``dev``; refused (one line) when the model has no Linear layer."""
    from safetensors.torch import load_model

    from trainscope.train.setup import cache_dir

    workload = build_workload(cfg.workload, cache_dir())
    split, data = _split(workload)
    model = workload.model
    try:
        # load_model (no pickle) restores tied weights stored once (see train.ranks).
        load_model(model, root / WEIGHTS_FILE, strict=True)
    except Exception as exc:  # safetensors raises its own error types
        reason = " ".join(str(exc).split())[:300]
        raise TrainscopeError(f"cannot load {root / WEIGHTS_FILE}: {reason}") from None
    model.to(dev).eval()
    linears = _linear_layers(model)
    if not linears:
        raise TrainscopeError(
            f"the {cfg.workload.name} model ({type(model).__name__}) has no nn.Linear "
            "layers: nothing to quantize"
        )
    return _Run(cfg, dev, workload, split, data, model, linears)


@dataclasses.dataclass
class _Int8:
    """The quantized copy of a run's model, and what torchao made of its Linear layers."""

    model: Any
    config: Any
    """The torchao config it was quantized with."""
    version: str
    """torchao's."""
    linears: dict[str, Any]
    done: list[str]
    """The Linear layers quantized (their weight a torchao tensor)."""
    skipped: list[str]
    tied: list[str]
    """Linear layers whose weight another parameter shares (of all, quantized or not)."""


def _quantize(run: _Run, version: str, quantize_: Any, config_cls: Any) -> _Int8:
    """A copy of the run's model, its Linear layers quantized by torchao (``version``);
    refused (one line) when torchao quantized none of them."""
    tied = _tied_linears(run.model, run.linears)
    qmodel = copy.deepcopy(run.model)
    config = _make_config(config_cls)
    quantize_(qmodel, config)
    qlinears = _linear_layers(qmodel)
    done = [n for n, m in qlinears.items() if _is_quantized(m.weight)]
    skipped = [n for n in qlinears if n not in done]
    if not done:
        raise TrainscopeError(
            f"torchao {version} quantized none of the model's {len(run.linears)} Linear layers"
        )
    return _Int8(qmodel, config, version, qlinears, done, skipped, tied)


@dataclasses.dataclass
class _Timed:
    """Both models' evaluations, by "fp32" and "int8": the warm-up pass (its figures and
    seconds), then the seconds of each of ``n_timed`` timed passes."""

    results: dict[str, dict[str, Any]]
    first: dict[str, float]
    seconds: dict[str, list[float]]
    n_timed: int


def _measure(run: _Run, qmodel: Any, batch_size: int | None, repeats: int | None) -> _Timed:
    """Evaluate the fp32 model and ``qmodel`` on the run's split, in fp32 precision: one
    warm-up pass each, then the timed passes, alternating (see :func:`quantize_run`)."""
    from trainscope.data.loaders import make_loader
    from trainscope.techniques.precision import make_precision
    from trainscope.train.state import TrainState

    workload, dev = run.workload, run.device
    loader = make_loader(
        run.data,
        run.cfg.data,
        train=False,
        device=dev,
        num_workers=0,
        collate_fn=workload.collate_fn,
        batch_size=batch_size,
    )
    fp32 = make_precision("fp32", dev)

    def state(m: Any) -> TrainState:
        # Evaluation takes no optimizer step: there is no optimizer to give.
        return TrainState(m, None, fp32, workload.loss_fn, dev)  # type: ignore[arg-type]

    states = {"fp32": state(run.model), "int8": state(qmodel)}
    results, first = {}, {}
    for key, st in states.items():  # warm-up pass: the figures, and a first time
        results[key], first[key] = _evaluate_timed(st, workload, loader)
    per_round = max(sum(first.values()), 1e-9)
    n_timed = repeats or max(1, min(MAX_REPEATS, int(REPEAT_BUDGET_S // per_round)))
    seconds: dict[str, list[float]] = {"fp32": [], "int8": []}
    for _ in range(n_timed):
        for key, st in states.items():  # alternating: drift of the machine hits both
            seconds[key].append(_evaluate_timed(st, workload, loader)[1])
    return _Timed(results, first, seconds, n_timed)


def _result(
    root: Path, run: _Run, int8: _Int8, timed: _Timed, batch_size: int | None
) -> dict[str, Any]:
    """The dict quantize.json holds, its keys in the order written."""
    import torch

    figures = {k: _figures(timed.results[k]) for k in timed.results}
    eval_s = {k: _timing(timed.seconds[k], timed.first[k]) for k in timed.results}
    return {
        "schema_version": SCHEMA_VERSION,
        "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "method": _method(int8),
        "workload": run.cfg.workload.name,
        "model": type(run.model).__name__,
        "run_status": _run_status(root),
        "device": str(run.device),
        "torch": torch.__version__,
        "threads": torch.get_num_threads() if run.device.type == "cpu" else None,
        "host": platform.node(),
        "split": run.split,
        "samples": timed.results["fp32"].get("samples"),
        "batch_size": batch_size or run.cfg.data.batch_size,
        "layers": {
            "linear": len(run.linears),
            "quantized": len(int8.done),
            "names": int8.done,
            "skipped": int8.skipped,
            "tied": [n for n in int8.tied if n in int8.done],
        },
        "bytes": _bytes(run, int8),
        "fp32": {**figures["fp32"], "eval_s": eval_s["fp32"]},
        "int8": {**figures["int8"], "eval_s": eval_s["int8"]},
        "difference": {
            k: _difference(figures["fp32"].get(k), figures["int8"].get(k)) for k in figures["fp32"]
        },
        "timing": (
            f"median of {timed.n_timed} timed evaluation pass(es) per model, alternating "
            "fp32 and int8, after one warm-up pass each (kept apart as 'warmup'); building, "
            "loading and quantizing excluded; eager mode (no torch.compile)"
        ),
    }


def _method(int8: _Int8) -> dict[str, Any]:
    """How the model was quantized, as quantize.json's ``method`` says it."""
    return {
        "library": "torchao",
        "version": int8.version,
        "config": METHOD,
        "settings": repr(int8.config),
        "weight_tensor": type(int8.linears[int8.done[0]].weight).__name__,
        "weights": "int8, one scale per output channel (symmetric)",
        "activations": "int8, quantized per row at run time (dynamic)",
        "compiled": False,
    }


def _bytes(run: _Run, int8: _Int8) -> dict[str, Any]:
    """Tensor bytes before and after: the whole model, and the quantized Linear weights."""
    before = {
        "model": model_bytes(run.model),
        "linear_weights": sum(tensor_bytes(run.linears[n].weight) for n in int8.done),
    }
    after = {
        "model": model_bytes(int8.model),
        "linear_weights": sum(tensor_bytes(int8.linears[n].weight) for n in int8.done),
    }
    return {"fp32": before, "int8": after, "how": BYTES_HOW}


def _write_result(owned: Any, root: Path, result: dict[str, Any]) -> None:
    """Write quantize.json into the claimed run directory, listed in its marker first."""
    try:
        owned.record(RESULT_FILE)  # listed before written: what --overwrite may remove
        atomic_write_json(root / RESULT_FILE, result)
    except OSError as exc:
        raise TrainscopeError(f"cannot write {root / RESULT_FILE}: {exc.strerror or exc}") from None


__all__ = [
    "RESULT_FILE",
    "format_quantize",
    "model_bytes",
    "quantize_run",
    "tensor_bytes",
]
