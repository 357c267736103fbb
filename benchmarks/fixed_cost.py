"""A run's fixed cost: the default `trainscope run` against a bare loop, whole processes.

The bare side (``fixed_cost.py bare``) is a hand-written PyTorch loop doing the default
job's work: scikit-learn's digits read from the CSV scikit-learn ships, the same stratified
70/15/15 split and standardisation, the same LeNet5, batch 32, 45 epochs, SGD lr 0.02
(momentum 0.9, weight decay 5e-4 on matrices only) with 100 linear warm-up steps then
cosine decay, validation after every epoch, a test pass at the end, a loss read every 10
steps and the weights saved. It has no stage timing, no sampler, no record and no console output.

The trainscope side is the installed ``trainscope run -q --no-progress`` on its embedded
default. A third side, ``bare-gc``, is the bare loop with its imports and setup under a
paused collector and then ``gc.freeze()``, as trainscope's command line does
(trainscope.runtime.gc_imports): trainscope against it is trainscope's own cost, against
``bare`` what a user's plain script pays more or less. All run on one thread
(``--threads 1``; ``torch.set_num_threads(1)`` and ``OMP_NUM_THREADS=1`` for the bare
loops), so the comparison is of equal core budgets and no OpenMP spinning. After one
uncounted warm-up of each (file cache, bytecode), each round runs the three one after
the other in rotated order, each process timed from outside with perf_counter. The
figures are medians with their min-max and n; a difference counts only where the spreads
do not overlap. For each side it prints where the process's time went: the bare loops'
own phases, trainscope's from its record (``process.startup_s``, ``wall_time_s``,
``after_wall_s``), and for both the rest after the last phase (the interpreter's exit).

    python benchmarks/fixed_cost.py --rounds 7
    python benchmarks/fixed_cost.py --rounds 7 --src /path/to/older/checkout/src
"""

from __future__ import annotations

import argparse
import gzip
import importlib.util
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

START = time.perf_counter()
HERE = Path(__file__).resolve()


def bare(freeze: bool) -> None:
    """The default job's work as a hand-written loop; prints its phases as one JSON line.
    ``freeze``: its imports and setup with the collector paused, then ``gc.freeze()``, as
    trainscope's command line does (trainscope.runtime.gc_imports)."""
    import gc

    if freeze:
        gc.disable()
    import numpy as np

    t0 = time.perf_counter()
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    t_torch = time.perf_counter()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    spec = importlib.util.find_spec("sklearn")
    assert spec is not None and spec.submodule_search_locations
    csv = Path(spec.submodule_search_locations[0]) / "datasets" / "data" / "digits.csv.gz"
    with gzip.open(csv) as f:
        table = np.loadtxt(f, delimiter=",", dtype=np.float32)
    images, labels = table[:, :-1].reshape(-1, 1, 8, 8), table[:, -1].astype(np.int64)
    parts = split(labels)
    x, y = torch.from_numpy(images), torch.from_numpy(labels)

    def subset(ix: np.ndarray) -> TensorDataset:
        return TensorDataset((x[ix] / 16.0 - 0.3056) / 0.3761, y[ix])

    train_set, val_set, test_set = (subset(p) for p in parts)
    model = lenet()
    params = list(model.parameters())  # weight decay on matrices only, as trainscope's
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": 5e-4},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]  # fmt: skip
    opt = torch.optim.SGD(groups, lr=0.02, momentum=0.9)
    train = DataLoader(
        train_set, batch_size=32, shuffle=True, generator=torch.Generator().manual_seed(0)
    )
    epochs, warmup = 45, 100
    total = epochs * len(train)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_factor(s, total, warmup))

    def evaluate(ds: TensorDataset) -> float:
        model.eval()
        correct, loss_sum = 0, 0.0
        with torch.no_grad():
            for xb, yb in DataLoader(ds, batch_size=32):
                logits = model(xb)
                loss_sum += torch.nn.functional.cross_entropy(logits, yb, reduction="sum").item()
                correct += (logits.argmax(1) == yb).sum().item()
        return correct / len(ds)  # (the loss, loss_sum / len(ds), is what a log would show)

    if freeze:
        gc.freeze()
        gc.enable()
    t_setup = time.perf_counter()
    for _ in range(epochs):
        model.train()
        losses = []
        for step, (xb, yb) in enumerate(train, 1):
            loss = torch.nn.functional.cross_entropy(model(xb), yb)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            sched.step()
            losses.append(loss.detach())
            if step % 10 == 0:
                torch.stack(losses).tolist()  # the loss read a real loop does for its log
                losses.clear()
        evaluate(val_set)
    acc = evaluate(test_set)
    t_train = time.perf_counter()
    out = Path(tempfile.mkdtemp(prefix="fixed-cost-bare-"))
    torch.save(model.state_dict(), out / "model.pt")
    shutil.rmtree(out)
    phases = {
        "numpy_s": t0 - START,
        "torch_import_s": t_torch - t0,
        "setup_s": t_setup - t_torch,
        "train_s": t_train - t_setup,
        "save_s": time.perf_counter() - t_train,
        "test_accuracy": acc,
        "age_s": process_age(),  # as trainscope's process.time_s: start to here
    }
    print(json.dumps(phases))


def process_age() -> float:
    """Seconds since this process started (/proc/self/stat against CLOCK_BOOTTIME, as
    trainscope's own record measures it)."""
    fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
    started = int(fields[19]) / os.sysconf("SC_CLK_TCK")
    return time.clock_gettime(time.CLOCK_BOOTTIME) - started


def split(labels: object) -> list:
    """The 70/15/15 stratified split trainscope uses for digits (seed 20240)."""
    import numpy as np

    rng = np.random.default_rng(20240)
    parts: list[list] = [[], [], []]
    for c in np.unique(labels):
        idx = rng.permutation(np.flatnonzero(labels == c))
        cuts = np.round(np.cumsum((0.70, 0.15, 0.15))[:-1] * len(idx)).astype(int)
        for part, chunk in zip(parts, np.split(idx, cuts)):
            part.append(chunk)
    return [np.sort(np.concatenate(p)) for p in parts]


def lenet() -> object:
    """LeNet5 for 8x8 inputs, as trainscope's (a copy, so the bare side imports no
    trainscope code)."""
    from torch import nn

    return nn.Sequential(
        nn.Conv2d(1, 6, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(6, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(16 * 2 * 2, 120), nn.ReLU(),
        nn.Linear(120, 84), nn.ReLU(), nn.Linear(84, 10),
    )  # fmt: skip


def lr_factor(step: int, total: int, warmup: int) -> float:
    """Linear warm-up that never starts at 0, then half a cosine down to 0."""
    import math

    if step < warmup:
        return (step + 1) / (warmup + 1)
    p = min(max((step - warmup) / max(total - 1 - warmup, 1), 0.0), 1.0)
    return 0.5 * (1.0 + math.cos(math.pi * p))


def bare_exit(phases: dict, wall: float) -> dict:
    """The bare side's phases plus what its process spent outside them."""
    age = phases.pop("age_s")
    return {**phases, "exit_and_rest_s": wall - age}


def timed(cmd: list[str], env: dict[str, str]) -> tuple[float, str]:
    """Wall seconds of one child process, timed from outside, and its stdout."""
    t0 = time.perf_counter()
    done = subprocess.run(cmd, check=True, env=env, stdout=subprocess.PIPE, text=True)
    return time.perf_counter() - t0, done.stdout


def trainscope_side(python: str, out: Path) -> list[str]:
    """The installed `trainscope` console script of ``python``'s environment."""
    script = Path(python).parent / "trainscope"
    if not script.is_file():
        sys.exit(f"no trainscope script beside {python}: install trainscope in that venv")
    return [
        python, str(script), "run", "-q", "--no-progress", "--threads", "1",
        "--out", str(out), "--overwrite",
    ]  # fmt: skip


def record_phases(out: Path, wall: float) -> dict[str, float]:
    """Where the trainscope process's wall time went, from its own record."""
    s = json.loads((out / "summary.json").read_text())
    proc = s.get("process") or {}
    after = sum((s.get("after_wall_s") or {}).values())
    return {
        "startup_s": proc["startup_s"],
        "setup_s": s["stages_s"]["setup"],
        "run_s": s["wall_time_s"],
        "after_wall_s": after,
        "exit_and_rest_s": wall - proc["time_s"],
        "test_accuracy": s.get("test_accuracy", float("nan")),
    }


def med(values: list[float]) -> str:
    """A median with its min-max and n."""
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f}, n={len(values)})"


def main() -> None:
    """Run the rounds and print the table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", nargs="?", choices=["bare", "bare-gc"], help="run one bare loop")
    ap.add_argument("--rounds", type=int, default=7, help="counted rounds after one warm-up")
    ap.add_argument("--python", default=sys.executable, help="the venv whose trainscope runs")
    ap.add_argument("--src", type=Path, help="trainscope's source from here (PYTHONPATH): "
                    "another checkout, e.g. the commit before a change")  # fmt: skip
    ap.add_argument("--json", type=Path, help="also write the raw figures here")
    args = ap.parse_args()
    if args.what:
        bare(freeze=args.what == "bare-gc")
        return
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    out = Path(tempfile.mkdtemp(prefix="fixed-cost-")) / "run"
    cmds = {
        "bare": [sys.executable, str(HERE), "bare"],
        "bare-gc": [sys.executable, str(HERE), "bare-gc"],
        "trainscope": trainscope_side(args.python, out),
    }
    envs = {side: env for side in cmds}
    if args.src:
        envs["trainscope"] = {**env, "PYTHONPATH": str(args.src.resolve())}
    for side, cmd in cmds.items():
        timed(cmd, envs[side])  # warm-up: file cache, bytecode
    walls: dict[str, list[float]] = {side: [] for side in cmds}
    phases: dict[str, list[dict]] = {side: [] for side in cmds}
    sides = list(cmds)
    for i in range(args.rounds):
        for side in sides[i % 3 :] + sides[: i % 3]:  # rotated: no side always first
            wall, stdout = timed(cmds[side], envs[side])
            walls[side].append(wall)
            phases[side].append(
                record_phases(out, wall) if side == "trainscope"
                else bare_exit(json.loads(stdout.strip().splitlines()[-1]), wall)
            )  # fmt: skip
        print(f"round {i + 1}: " + ", ".join(f"{k} {v[-1]:.2f} s" for k, v in walls.items()),
              file=sys.stderr)  # fmt: skip
    shutil.rmtree(out.parent, ignore_errors=True)
    report(walls, phases, args.src)
    if args.json:
        args.json.write_text(json.dumps({"walls": walls, "phases": phases}, indent=1))


def cpu_name() -> str:
    """The CPU's model name and number, and whether it has AVX-512 (from /proc/cpuinfo)."""
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.machine()
    fields = dict(line.split(":", 1) for line in info.split("\n\n")[0].splitlines() if ":" in line)
    name = {k.strip(): v.strip() for k, v in fields.items()}
    avx = "AVX-512" if "avx512f" in name.get("flags", "").split() else "no AVX-512"
    return f"{name.get('model name', '?')} (model {name.get('model', '?')}, {avx})"


def report(walls: dict[str, list[float]], phases: dict[str, list[dict]], src: Path | None) -> None:
    """The table: whole-process walls, the difference, and each side's phases."""
    cpu = cpu_name()
    print(f"# {platform.node()} {cpu}, {os.cpu_count()} CPUs, one thread each, "
          f"python {platform.python_version()}; trainscope from {src or 'the venv'}")  # fmt: skip
    for side, w in walls.items():
        print(f"whole process, {side}: {med(w)} s")
    t = walls["trainscope"]
    for base in ("bare", "bare-gc"):
        b = walls[base]
        diffs = [x - y for x, y in zip(t, b)]
        apart = max(t) < min(b) or max(b) < min(t)
        verdict = "apart" if apart else "overlap: no difference beyond the noise"
        print(f"trainscope - {base}, same round: {med(diffs)} s; spreads {verdict}")
    for side in walls:
        for key in phases[side][0]:
            print(f"  {side} {key}: {med([p[key] for p in phases[side]])}")


if __name__ == "__main__":
    main()
