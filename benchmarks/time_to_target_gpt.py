"""Wall time to a validation-loss target on Tiny Shakespeare: nanoGPT's train.py vs trainscope.

Both sides train the same shape (4 layers, 4 heads, 128 wide, context 64, no dropout, no
biases; nanoGPT's README CPU command) and both sides' weights go through ONE shared
evaluator: mean next-token cross-entropy over the 640 evenly spaced fixed windows of 64
characters of the last 10% of the corpus (trainscope's ``fixed_windows``, the windows its
gpt-char workload validates on). Clone nanoGPT first (``git clone
https://github.com/karpathy/nanoGPT``), then:

    python benchmarks/time_to_target_gpt.py --nanogpt ../nanoGPT \\
        --data-dir ../shared/data/tinyshakespeare --seeds 0,1,2 --out /tmp/ttt

    # one side, one seed, short (what a smoke test runs):
    python benchmarks/time_to_target_gpt.py --one nanogpt --seed 0 --nanogpt ../nanoGPT \\
        --data-dir ../shared/data/tinyshakespeare --max-iters 100 --eval-every 25 --target 3.0
    python benchmarks/time_to_target_gpt.py --one trainscope --seed 0 \\
        --data-dir ../shared/data/tinyshakespeare --target 3.0 \\
        --ts-args "--epochs 1 --max-steps-per-epoch 100"

Times are seconds since the measured process started (``/proc/self/stat`` starttime
against CLOCK_BOOTTIME, as trainscope's ``process.startup_s`` does), so interpreter start-up
and ``import torch`` count on both sides. Without /proc the origin is the script's start and
interpreter start-up is excluded (the JSON says which: ``clock``).

nanoGPT (``--one nanogpt``): train.py runs in this process through ``runpy.run_path`` with
the README CPU flags plus ``--eval_interval=E --always_save_checkpoint=True --out_dir=D``.
A wrapper patches ``torch.save`` so that each checkpoint nanoGPT writes is also written as
``ckpt-<iter>.pt`` (weights only) stamped with its process time; the seconds those extra
copies take are subtracted from every later stamp. nanoGPT has no seed flag: the wrapper
patches ``torch.manual_seed`` to add the seed, so seed 0 is nanoGPT's own run (1337) and
seed S is 1337 + S. Afterwards each copy is loaded with ``torch.load(weights_only=True)``
into nanoGPT's own ``model.GPT`` and scored by the shared evaluator; the time to target is
the stamp of the first copy scoring <= target. nanoGPT's data files are made beforehand by
its prepare.py from a copy of ``--data-dir``'s input.txt (nothing downloads); that time is
not counted. nanoGPT never stops early: it runs all ``--max-iters`` (at most 100 also sets
``warmup_iters`` to a tenth of it: train.py divides by lr_decay_iters - warmup_iters).

trainscope (``--one trainscope``): ``trainscope run --workload gpt-char`` with the same
shape, ``--seed S --threads T`` and ``--ts-args``. Where ``trainscope run`` has the flags,
``--target 'val_loss<=T' --eval-every-steps E`` (and ``--time-limit``) are added unless
``--ts-args`` gives them; the time to target is then summary.json's ``target`` section,
else (no target flags) the first validation record in metrics.jsonl at or below it. The
final weights are scored by the shared evaluator beside trainscope's own last value.
trainscope's gpt-char recipe (AdamW 1e-3, betas 0.9/0.99, weight decay 0.1, clip 1, cosine
to 0.1x after 100 warm-up steps) is nanoGPT's config except the batch (64, not 12) and the
schedule's length (its epochs): ``--ts-args "--batch-size 12 --epochs 1
--max-steps-per-epoch 2000"`` matches nanoGPT's recipe; without it the recipes differ.

Default mode: the two sides alternate per seed, each in its own process; one JSON per run
and results.json go to ``--out``. Seeds that never reach the target are listed, never
extrapolated; a ratio of medians is printed only where the min-max ranges do not overlap.
A second summary takes out each side's evaluations before the one that met the target
(nanoGPT's timed between its ``model.eval()`` and ``model.train()`` plus the checkpoint it
then writes; trainscope's from its ``eval`` lines): the time each would have taken had it
evaluated only there. ``--summarize`` rebuilds results.json from the run JSON files in
``--out`` (after one side of one seed was run again with ``--one``).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import runpy
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.nn import functional as F

SHAPE = {"n_layer": 4, "n_head": 4, "n_embd": 128, "block_size": 64}
EVAL_WINDOWS = 640
EVAL_BATCH = 64
# nanoGPT README's CPU command (the eval cadence, max_iters and out_dir are added per run).
NANOGPT_FLAGS = [
    "config/train_shakespeare_char.py", "--device=cpu", "--compile=False", "--eval_iters=20",
    "--log_interval=1", "--block_size=64", "--batch_size=12", "--n_layer=4", "--n_head=4",
    "--n_embd=128", "--dropout=0.0",
]  # fmt: skip
TS_TARGET_FLAGS = ("--target", "--eval-every-steps", "--time-limit")


def _process_age() -> float | None:
    """Seconds since this process started (Linux: starttime vs CLOCK_BOOTTIME), or None."""
    try:
        with open("/proc/self/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        ticks = int(fields[19])  # starttime, field 22, counted after "pid (comm)"
        return time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        return None


_PC0, _AGE0 = time.perf_counter(), _process_age()
CLOCK = "since process start" if _AGE0 is not None else "since script start (no /proc)"


def clock() -> float:
    """Process time now: the process's age when this module loaded plus perf_counter since."""
    return (_AGE0 or 0.0) + time.perf_counter() - _PC0


# --------------------------------------------------------------------------- shared evaluator


class SharedEval:
    """Mean next-token cross-entropy over trainscope's gpt-char validation windows."""

    def __init__(self, data_dir: Path, block_size: int = 64, n_windows: int = EVAL_WINDOWS):
        # Imported here, not at the top: the nanoGPT child must not pay for it while timed.
        from trainscope.data.text import CharVocab, fixed_windows, read_text, split_train_val

        text = read_text(data_dir / "input.txt")
        self.vocab = CharVocab.from_text(text)
        ids = torch.tensor(self.vocab.encode(text), dtype=torch.int64)
        self.train_ids, self.val_ids = split_train_val(ids)
        self.x, self.y = fixed_windows(self.val_ids, block_size, n_windows).tensors

    @torch.no_grad()
    def loss(self, model: torch.nn.Module, logits_fn: Callable[[torch.Tensor], torch.Tensor]):
        """``logits_fn``: idx (B, T) int64 -> logits (B, T, V); fixed batches, eval mode."""
        model.eval()
        total = 0.0
        for i in range(0, len(self.x), EVAL_BATCH):
            logits = logits_fn(self.x[i : i + EVAL_BATCH]).float()
            y = self.y[i : i + EVAL_BATCH]
            total += F.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="sum").item()
        return total / self.y.numel()


def check_nanogpt_ids(data: Path, ev: SharedEval) -> None:
    """nanoGPT's ids must mean what trainscope's do: same characters, same train/val ids.

    meta.pkl is never unpickled: the vocabulary is recomputed as prepare.py builds it
    (``sorted(set(text))``, ids by rank) and train.bin/val.bin are compared id by id."""
    text = (data / "input.txt").read_text()  # read as prepare.py reads it
    if sorted(set(text)) != ev.vocab.chars:
        raise RuntimeError(f"{data}/input.txt has another vocabulary than --data-dir's")
    for name, ids in (("train", ev.train_ids), ("val", ev.val_ids)):
        got = torch.from_numpy(np.fromfile(data / f"{name}.bin", dtype=np.uint16).astype(np.int64))
        if not torch.equal(got, ids):
            raise RuntimeError(f"nanoGPT's {name}.bin differs from trainscope's {name} split")


# --------------------------------------------------------------------------- nanoGPT side


def prepare_nanogpt_data(ng: Path, data_dir: Path) -> float:
    """Copy input.txt into nanoGPT's data folder and run its prepare.py; seconds spent."""
    t0 = time.perf_counter()
    dst, src = ng / "data" / "shakespeare_char", data_dir / "input.txt"
    done = all((dst / f).is_file() for f in ("input.txt", "train.bin", "val.bin", "meta.pkl"))
    if done and (dst / "input.txt").read_bytes() == src.read_bytes():
        return 0.0
    shutil.copyfile(src, dst / "input.txt")  # present, so prepare.py does not download it
    # prepare.py imports requests at the top even when input.txt is there (and the venv may
    # lack it): a bare stub satisfies the import and would fail any download attempt.
    code = (
        "import runpy, sys, types; sys.modules['requests'] = types.ModuleType('requests'); "
        f"runpy.run_path({str(dst / 'prepare.py')!r}, run_name='__main__')"
    )
    subprocess.run([sys.executable, "-c", code], cwd=dst, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


class EvalSpans:
    """Seconds of each of nanoGPT's evaluations: its estimate_loss() starts with
    ``model.eval()`` and ends with ``model.train()``, so ``install`` times the span
    between the two (``Module.train`` recursing into the children adds nothing)."""

    def __init__(self) -> None:
        self.spans: list[float] = []
        self._began: list[float] = []
        self._real = (torch.nn.Module.eval, torch.nn.Module.train)

    def install(self) -> None:
        """Patch ``nn.Module.eval``/``train`` to time the spans."""
        real_eval, real_train = self._real

        def eval_(module: torch.nn.Module) -> Any:
            self._began.append(time.perf_counter())
            return real_eval(module)

        def train_(module: torch.nn.Module, mode: bool = True) -> Any:
            if mode and self._began:  # the top-level call; the children's come after
                self.spans.append(time.perf_counter() - self._began.pop())
            return real_train(module, mode)

        torch.nn.Module.eval, torch.nn.Module.train = eval_, train_

    def restore(self) -> None:
        """Put torch's own methods back."""
        torch.nn.Module.eval, torch.nn.Module.train = self._real

    def add_to_last(self, seconds: float) -> None:
        """Count ``seconds`` (a checkpoint written after an evaluation) into the last span."""
        if self.spans:
            self.spans[-1] += seconds

    def before_last(self) -> float:
        """Seconds of every span but the last (the evaluations before the latest one)."""
        return sum(self.spans[:-1])


def _import_file(name: str, path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def score_nanogpt(args: argparse.Namespace, ckdir: Path, saved: list[dict[str, Any]]) -> None:
    """The shared evaluator's ``shared_val_loss`` for every checkpoint copy in ``saved``."""
    ng = args.nanogpt.resolve()
    ev = SharedEval(args.data_dir.resolve())
    check_nanogpt_ids(ng / "data" / "shakespeare_char", ev)
    model_py = _import_file("nanogpt_model", ng / "model.py")
    for rec in saved:
        ck = torch.load(ckdir / rec["file"], map_location="cpu", weights_only=True)
        model = model_py.GPT(model_py.GPTConfig(**ck["model_args"]))
        state = {k.removeprefix("_orig_mod."): v for k, v in ck["model"].items()}
        model.load_state_dict(state)
        # With targets nanoGPT returns logits at every position (without: the last only).
        rec["shared_val_loss"] = ev.loss(model, lambda idx, m=model: m(idx, idx)[0])
        if not args.keep_checkpoints:
            (ckdir / rec["file"]).unlink()


def run_nanogpt(args: argparse.Namespace, seed: int) -> dict[str, Any]:
    """Train with nanoGPT's train.py in this process, then score each checkpoint."""
    ng, out = args.nanogpt.resolve(), args.out.resolve()
    excluded = prepare_nanogpt_data(ng, args.data_dir.resolve())  # not part of the run
    ckdir = out / f"nanogpt-s{seed}"
    if "=" in str(ckdir):  # nanoGPT's configurator splits each flag at its one "="
        raise SystemExit(f"--out must not contain '=': {ckdir}")
    ckdir.mkdir(parents=True, exist_ok=True)
    for old in ckdir.glob("ckpt*.pt"):
        old.unlink()
    torch.set_num_threads(args.threads)  # nanoGPT never sets it
    saved: list[dict[str, Any]] = []
    overhead = 0.0  # seconds our extra copies took: not nanoGPT's time
    real_save, real_seed = torch.save, torch.manual_seed
    spans = EvalSpans()

    def save(obj: Any, f: Any, *a: Any, **k: Any) -> None:
        nonlocal overhead
        s0 = time.perf_counter()
        real_save(obj, f, *a, **k)
        spans.add_to_last(time.perf_counter() - s0)  # the checkpoint of the evaluation
        t = clock() - excluded - overhead
        if isinstance(obj, dict) and {"model", "model_args", "iter_num"} <= obj.keys():
            c0 = time.perf_counter()
            it = int(obj["iter_num"])
            path = ckdir / f"ckpt-{it}.pt"
            keep = {"model": obj["model"], "model_args": obj["model_args"], "iter_num": it}
            real_save({**keep, "time_s": t}, path)
            # With always_save_checkpoint, train.py sets best_val_loss to this eval's value.
            own = float(obj.get("best_val_loss", float("nan")))
            saved.append(
                {
                    "iter": it,
                    "file": path.name,
                    "time_s": t,
                    "nanogpt_val_loss": own,
                    "earlier_evals_s": spans.before_last(),
                }
            )
            overhead += time.perf_counter() - c0

    def manual_seed(s: int) -> Any:
        return real_seed(int(s) + seed)

    m = args.max_iters
    argv = ["train.py", *NANOGPT_FLAGS, f"--max_iters={m}", f"--lr_decay_iters={m}"]
    argv += [f"--eval_interval={args.eval_every}", "--always_save_checkpoint=True"]
    argv.append(f"--out_dir={ckdir}")
    if m <= 100:  # get_lr divides by lr_decay_iters - warmup_iters (100 in the config)
        argv.append(f"--warmup_iters={m // 10}")
    old_argv, old_cwd = sys.argv, os.getcwd()
    # train.py reads configurator.py, config/ and data/ relative to the working directory
    # and does `from model import GPT`: run it from its folder, with the folder on the path.
    sys.argv, torch.save, torch.manual_seed = argv, save, manual_seed
    spans.install()
    sys.path.insert(0, str(ng))
    os.chdir(ng)
    t_start = clock() - excluded
    try:
        runpy.run_path(str(ng / "train.py"), run_name="__main__")
    finally:
        t_end = clock() - excluded - overhead
        sys.argv, torch.save, torch.manual_seed = old_argv, real_save, real_seed
        spans.restore()
        sys.path.remove(str(ng))
        os.chdir(old_cwd)

    score_nanogpt(args, ckdir, saved)  # untimed
    hit = next((r for r in saved if r["shared_val_loss"] <= args.target), None)
    res = dict(side="nanogpt", seed=seed, clock=CLOCK, reached=hit is not None, argv=argv[1:])
    res.update(time_to_target_s=hit["time_s"] if hit else None, iter_at_target=hit and hit["iter"])
    # Had it evaluated only where it met the target: its earlier evaluations taken out.
    res["one_eval_time_to_target_s"] = hit["time_s"] - hit["earlier_evals_s"] if hit else None
    res.update(train_start_s=t_start, run_end_s=t_end, prepare_s_excluded=excluded)
    return res | dict(copy_overhead_s_excluded=overhead, evals=saved)


# --------------------------------------------------------------------------- trainscope side


def _val_points(run_dir: Path) -> list[tuple[float, float]]:
    """(validation loss, run-clock time it was known) from metrics.jsonl, in order: "eval"
    events (``--eval-every-steps``) and epoch records (``val_t + val_s``)."""
    path, points = run_dir / "metrics.jsonl", []
    lines = path.read_text().splitlines() if path.is_file() else []
    for r in (json.loads(line) for line in lines if line.strip()):
        if r.get("event") == "eval" and r.get("split") == "val" and "t" in r:
            # (without "t": an epoch's own validation, timed by its epoch record below)
            points.append((r["loss"], r["t"] + r.get("seconds", 0.0)))
        elif r.get("event") == "epoch" and isinstance(r.get("val_loss"), (int, float)):
            points.append((r["val_loss"], r.get("val_t", r["t_end"]) + r.get("val_s", 0.0)))
    return points


def _earlier_evals_s(run_dir: Path, step: int) -> float:
    """Seconds of the validation evaluations (``eval`` lines) before ``step``: what a run
    that evaluated only where it met the target would not have spent."""
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    evals = [json.loads(line) for line in lines if line.strip()]
    val = [r for r in evals if r.get("event") == "eval" and r.get("split") == "val"]
    return sum(r.get("seconds", 0.0) for r in val if r["step"] < step)


def run_trainscope(args: argparse.Namespace, seed: int) -> dict[str, Any]:
    """``trainscope run`` as a subprocess, then the shared evaluator on its final weights."""
    exe = str(Path(sys.executable).parent / "trainscope")
    run_dir = args.out.resolve() / f"trainscope-s{seed}"
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "MKL_NUM_THREADS": str(args.threads)}
    helptext = subprocess.run([exe, "run", "--help"], capture_output=True, text=True).stdout
    has = {f: re.search(re.escape(f) + r"(?![\w-])", helptext) is not None for f in TS_TARGET_FLAGS}
    extra = shlex.split(args.ts_args)
    sets = [f"workload.options.{k}={v}" for k, v in {"preset": "tiny", **SHAPE}.items()]
    flags = f"--workload gpt-char --seed {seed} --threads {args.threads} --no-progress --quiet"
    cmd = [exe, "run", *flags.split(), "--overwrite", "--out", str(run_dir)]
    cmd += ["--data-dir", str(args.data_dir.resolve()), *(a for s in sets for a in ("--set", s))]
    wanted = {"--target": f"val_loss<={args.target}", "--eval-every-steps": str(args.eval_every)}
    if args.time_limit:
        wanted["--time-limit"] = str(args.time_limit)
    for flag, value in wanted.items():
        if has.get(flag) and flag not in extra:  # --ts-args wins
            cmd += [flag, value]
    cmd += extra
    log = args.out.resolve() / f"trainscope-s{seed}.run.log"
    t0 = time.perf_counter()
    with log.open("w") as f:
        rc = subprocess.run(cmd, env=env, stdout=f, stderr=subprocess.STDOUT).returncode
    wall = time.perf_counter() - t0
    res: dict[str, Any] = dict(side="trainscope", seed=seed, clock=CLOCK, rc=rc, argv=cmd[2:])
    res.update(subprocess_wall_s=wall, flags_available=has, reached=False, time_to_target_s=None)
    summary_path = run_dir / "summary.json"
    if rc != 0 or not summary_path.is_file():
        res["error"] = f"trainscope run exited {rc}; see {log}"
        return res
    summary = json.loads(summary_path.read_text())
    startup = (summary.get("process") or {}).get("startup_s") or 0.0
    points = _val_points(run_dir)
    res["in_run_final_val_loss"] = points[-1][0] if points else None
    target = summary.get("target")
    if isinstance(target, dict):
        res.update(source="summary target section", target_section=target)
        res["reached"] = bool(target.get("reached"))
        t = target.get("process_time_s")
        if t is None and target.get("run_time_s") is not None:
            t = startup + target["run_time_s"]  # run clock -> process clock
        res["time_to_target_s"] = t if res["reached"] else None
        if res["reached"] and t is not None:
            res["one_eval_time_to_target_s"] = t - _earlier_evals_s(run_dir, target["step"])
    else:
        res["source"] = "validation records (target flags unavailable)"
        hit = next((end for loss, end in points if loss <= args.target), None)
        if hit is not None:
            # The records are on the run's clock; startup_s is the process's age at its
            # origin. An evaluation counts once it has finished.
            res.update(reached=True, time_to_target_s=startup + hit)
    res["shared_final_val_loss"] = score_trainscope(args, run_dir)
    return res


def score_trainscope(args: argparse.Namespace, run_dir: Path) -> float | None:
    """The shared evaluator on a gpt-char run's model.safetensors (rebuilt as sample.py does)."""
    from safetensors.torch import load_model

    from trainscope.data.text import CharVocab
    from trainscope.workloads.gpt import GPT, GPTConfig

    if not (run_dir / "model.safetensors").is_file():
        return None
    ev = SharedEval(args.data_dir.resolve())
    vocab = CharVocab.from_dict(json.loads((run_dir / "vocab.json").read_text()))
    if vocab != ev.vocab:
        raise RuntimeError(f"{run_dir}/vocab.json differs from the shared evaluator's")
    model = GPT(GPTConfig(**json.loads((run_dir / "gpt_config.json").read_text())))
    load_model(model, run_dir / "model.safetensors", strict=True)  # no pickle; ties the head
    return ev.loss(model, model)


# --------------------------------------------------------------------------- driver


def _fmt(x: float) -> str:
    return f"{x:.1f} s"


def summarize(runs: list[dict[str, Any]], key: str = "time_to_target_s") -> dict[str, Any]:
    """Per side: median/min/max of ``key`` (time to target; ``one_eval_time_to_target_s``:
    with the evaluations before the one that met it taken out) over the seeds that
    reached it, and the ratio of the medians where the ranges do not overlap."""
    out: dict[str, Any] = {}
    for side in ("nanogpt", "trainscope"):
        mine = [r for r in runs if r["side"] == side]
        times = [r[key] for r in mine if r.get("reached") and r.get(key) is not None]
        never = [r["seed"] for r in mine if not r.get("reached")]
        out[side] = dict(n=len(times), runs=len(mine), never_reached=never)
        out[side].update(median_s=statistics.median(times) if times else None)
        out[side].update(min_s=min(times, default=None), max_s=max(times, default=None))
    a, b = out["nanogpt"], out["trainscope"]
    if a["n"] and b["n"] and (a["max_s"] < b["min_s"] or b["max_s"] < a["min_s"]):
        out["ratio_nanogpt_over_trainscope"] = a["median_s"] / b["median_s"]
    else:
        out["ratio_nanogpt_over_trainscope"] = None
    return out


def _print_summary(summary: dict[str, Any], sides: list[str], title: str) -> None:
    print(f"\n{title}:")
    for side in sides:
        s = summary[side]
        line = "no seed reached the target"
        if s["n"]:
            lo_hi = f"{s['min_s']:.1f}-{s['max_s']:.1f} s"
            line = f"median {_fmt(s['median_s'])} (min-max {lo_hi}, n={s['n']}/{s['runs']})"
        if s["never_reached"]:
            line += f"; never reached: seeds {', '.join(map(str, s['never_reached']))}"
        print(f"  {side:<10} {line}")
    ratio = summary["ratio_nanogpt_over_trainscope"]
    if len(sides) == 2 and ratio:
        print(f"  ratio of medians nanoGPT/trainscope: {ratio:.2f} (above 1: trainscope faster)")
    elif len(sides) == 2:
        print("  ratio: within the noise (ranges overlap, or a side never reached the target)")


def drive(args: argparse.Namespace) -> None:
    """Alternate the sides per seed, each in its own process, and print the summary."""
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    if "nanogpt" in args.sides:
        prepare_nanogpt_data(args.nanogpt.resolve(), args.data_dir.resolve())
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "MKL_NUM_THREADS": str(args.threads)}
    pairs = {"--data-dir": args.data_dir.resolve(), "--out": out, "--target": args.target}
    pairs.update({"--eval-every": args.eval_every, "--max-iters": args.max_iters})
    pairs.update({"--threads": args.threads, "--ts-args": args.ts_args})
    pairs.update({"--time-limit": args.time_limit or 0})
    common = [x for k, v in pairs.items() for x in (k, str(v))]
    if args.nanogpt:
        common += ["--nanogpt", str(args.nanogpt.resolve())]
    if args.keep_checkpoints:
        common.append("--keep-checkpoints")
    runs = []
    for seed in seeds:
        for side in args.sides:
            print(f"{side} seed {seed} ...", flush=True)
            with (out / f"{side}-s{seed}.log").open("w") as log:
                cmd = [sys.executable, __file__, "--one", side, "--seed", str(seed), *common]
                rc = subprocess.run(cmd, env=env, stdout=log, stderr=subprocess.STDOUT).returncode
            path = out / f"{side}-s{seed}.json"
            run = json.loads(path.read_text()) if rc == 0 and path.is_file() else None
            if run is None:
                err = f"exit {rc}; see {out / f'{side}-s{seed}.log'}"
                run = dict(side=side, seed=seed, reached=False, time_to_target_s=None, error=err)
            runs.append(run)
            t = run.get("time_to_target_s")
            said = f"reached in {_fmt(t)}" if t is not None else "target not reached"
            print(f"  {said}{'  ERROR ' + run['error'] if run.get('error') else ''}", flush=True)
    report_runs(args, out, runs)


def resummarize(args: argparse.Namespace) -> None:
    """``--summarize``: results.json and the summary again from the per-run JSON files in
    ``--out`` (after one side of one seed was rerun with ``--one``)."""
    out, runs = args.out.resolve(), []
    for seed in (int(s) for s in args.seeds.split(",") if s.strip()):
        for side in args.sides:
            path = out / f"{side}-s{seed}.json"
            if not path.is_file():
                raise SystemExit(f"{path}: no such run record")
            runs.append(json.loads(path.read_text()))
    report_runs(args, out, runs)


def report_runs(args: argparse.Namespace, out: Path, runs: list[dict[str, Any]]) -> None:
    """Write results.json and print both summaries."""
    summary = summarize(runs)
    one_eval = summarize(runs, "one_eval_time_to_target_s")
    settings = vars(args) | {"out": str(out), "data_dir": str(args.data_dir)}
    results = dict(target_val_loss=args.target, clock=CLOCK, args=settings, summary=summary)
    results.update(summary_one_evaluation=one_eval, runs=runs)
    (out / "results.json").write_text(json.dumps(results, indent=2, default=str))
    _print_summary(summary, args.sides, f"time to val loss <= {args.target} (shared "
                   f"evaluator; {CLOCK})")  # fmt: skip
    _print_summary(one_eval, args.sides, "the same, the evaluations before the one that met "
                   "it taken out (as if each side had evaluated only there)")  # fmt: skip
    print(f"results: {out / 'results.json'}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nanogpt", type=Path, help="a nanoGPT checkout (git clone)")
    p.add_argument("--data-dir", type=Path, required=True, help="folder holding input.txt")
    p.add_argument("--out", type=Path, default=Path("time-to-target"))
    p.add_argument("--target", type=float, default=1.88, help="validation loss to reach")
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--sides", default="nanogpt,trainscope", type=lambda s: s.split(","))
    p.add_argument("--eval-every", type=int, default=50, help="steps between evaluations")
    p.add_argument("--max-iters", type=int, default=2000, help="nanoGPT's max_iters")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--ts-args", default="", help="extra `trainscope run` flags (one string)")
    p.add_argument("--time-limit", type=float, default=0, help="trainscope --time-limit (0 off)")
    p.add_argument("--keep-checkpoints", action="store_true", help="keep nanoGPT's ckpt-*.pt")
    p.add_argument("--one", choices=("nanogpt", "trainscope"), help="run one side (a child)")
    p.add_argument("--summarize", action="store_true",
                   help="only rebuild results.json from the run JSON files in --out")  # fmt: skip
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    if args.summarize:
        return resummarize(args)
    if "nanogpt" in ([args.one] if args.one else args.sides) and args.nanogpt is None:
        p.error("--nanogpt DIR (a nanoGPT checkout) is needed for the nanogpt side")
    if not args.one:
        return drive(args)
    os.environ.update(OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads))
    args.out.mkdir(parents=True, exist_ok=True)
    run = run_nanogpt if args.one == "nanogpt" else run_trainscope
    res = {"target_val_loss": args.target, "threads": args.threads, **run(args, args.seed)}
    (args.out / f"{args.one}-s{args.seed}.json").write_text(json.dumps(res, indent=2))
    print(json.dumps({k: v for k, v in res.items() if k not in ("evals", "argv")}, indent=2))


if __name__ == "__main__":
    main()
