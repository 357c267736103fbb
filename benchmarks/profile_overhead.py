"""What ``trainscope profile`` costs a script, and whether it sees what ``trainscope run`` sees.

Two measurements, each run on purpose (never by the tests):

``overhead`` — the same training script alone (``python work.py``) and under
``trainscope profile --`` (both on one thread: ``OMP_NUM_THREADS=1``), alternated A B A B
after one uncounted warm-up of each, ``--rounds`` of each. The script times its own steps
with ``perf_counter`` (data fetch to optimizer step, the same code in both), so the per-step
figure includes every hook trainscope adds; the whole process is timed from outside, from
``Popen`` to exit. Two workloads: ``mlp`` (a 784-256-256-10 MLP, batch 64, a step of about
a millisecond: the hooks' worst case relative to the step) and ``cnn`` (a LeNet-sized CNN
on 28x28 images, batch 64). Figures: the median over rounds of each process's median
steady step (the first 20 steps left out), with min-max and n; the whole process's median
with min-max; a difference is claimed only where the ranges do not overlap.

``agreement`` — trainscope's default workload (LeNet5 on scikit-learn's digits, its
recipe) run natively (``trainscope run --threads 1``) and as a plain script doing the same
work (``benchmarks/fixed_cost.py bare``) under ``trainscope profile``: each stage's share
of the steady-state step, side by side. The native loop times the loss inside its
``backward`` stage and the batch's copy to the device as ``h2d``; a script's functional
loss and its own copies are its code between stages, ``other``: the comparison adds
native h2d to data wait and puts the script's ``other`` beside native backward's loss
part, as the table says.

``nanogpt`` — nanoGPT's own ``train.py`` (a clone given with ``--repo``, its Tiny
Shakespeare prepared: ``data/shakespeare_char/prepare.py``) at its README's CPU
configuration, alone and under ``trainscope profile``, alternated: the figure is the
iteration time nanoGPT prints itself (``iter N: ... time T ms``), its median over the
iterations after the first 20 and then over the rounds, with min-max; and the whole
process from outside.

    python benchmarks/profile_overhead.py overhead --rounds 7
    python benchmarks/profile_overhead.py agreement --rounds 5
    python benchmarks/profile_overhead.py nanogpt --repo ../nanoGPT --rounds 5 --steps 200

Each prints the machine (CPU model, cores, torch), the load average before and after,
and the figures; ``--json FILE`` also writes the raw numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

HERE = Path(__file__).resolve()
WARM_STEPS = 20

WORK = '''
"""A plain training loop that times its own steps (benchmarks/profile_overhead.py)."""
import json, sys, time
T0 = time.perf_counter()
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

kind, steps = sys.argv[1], int(sys.argv[2])
torch.manual_seed(0)
if kind == "mlp":
    x = torch.randn(steps * 64, 784)
    model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
                          nn.Linear(256, 10))
else:
    x = torch.randn(steps * 64, 1, 28, 28)
    model = nn.Sequential(nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                          nn.Linear(400, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU(),
                          nn.Linear(84, 10))
y = torch.randint(0, 10, (len(x),))
loader = DataLoader(TensorDataset(x, y), batch_size=64, shuffle=True)
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
durations = []
batches = iter(loader)
for _ in range(steps):
    t = time.perf_counter()
    xb, yb = next(batches)
    loss = nn.functional.cross_entropy(model(xb), yb)
    opt.zero_grad()
    loss.backward()
    opt.step()
    durations.append(time.perf_counter() - t)
print(json.dumps({"steps_s": durations, "script_s": time.perf_counter() - T0}))
'''


def machine() -> str:
    """CPU model, cores, torch: what every figure is quoted with."""
    model = platform.processor() or "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    torch = subprocess.run([sys.executable, "-c", "import torch; print(torch.__version__)"],
                           capture_output=True, text=True).stdout.strip()  # fmt: skip
    return f"{model}, {os.cpu_count()} cores, torch {torch}, Python {platform.python_version()}"


def trainscope_cmd() -> list[str]:
    """The installed trainscope, as its console script runs it (never ``python -m``)."""
    exe = shutil.which("trainscope", path=str(Path(sys.executable).parent)) or "trainscope"
    return [exe]


def timed(cmd: list[str], env: dict[str, str], cwd: Path) -> tuple[float, str]:
    """A whole process, timed from outside; its stdout."""
    t0 = time.perf_counter()
    done = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({done.returncode}): {done.stderr[-2000:]}")
    return wall, done.stdout


def span(xs: list[float]) -> str:
    return f"{statistics.median(xs):.4g} ({min(xs):.4g}-{max(xs):.4g}, n={len(xs)})"


def overlap(a: list[float], b: list[float]) -> bool:
    return max(min(a), min(b)) <= min(max(a), max(b))


def overhead(rounds: int, steps: int) -> dict:
    """Script alone against script under profile, per step and whole process."""
    tmp = Path(tempfile.mkdtemp(prefix="profile-overhead-"))
    (tmp / "work.py").write_text(textwrap.dedent(WORK))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    out: dict = {}
    for kind in ("mlp", "cnn"):
        args = ["work.py", kind, str(steps)]
        sides = {
            "alone": [sys.executable, *args],
            "profile": [*trainscope_cmd(), "profile", "-q", "--overwrite", "--out",
                        str(tmp / "run"), "--", *args],
        }  # fmt: skip
        for cmd in sides.values():
            timed(cmd, env, tmp)  # warm-up: file cache, bytecode
        step: dict[str, list[float]] = {s: [] for s in sides}
        whole: dict[str, list[float]] = {s: [] for s in sides}
        for i in range(rounds):
            order = list(sides) if i % 2 == 0 else list(reversed(sides))  # A B, then B A
            for side in order:
                wall, stdout = timed(sides[side], env, tmp)
                line = json.loads(stdout.strip().splitlines()[-1])
                step[side].append(statistics.median(line["steps_s"][WARM_STEPS:]))
                whole[side].append(wall)
        out[kind] = {"step_s": step, "process_s": whole, "steps": steps}
        a, b = step["alone"], step["profile"]
        ratio = statistics.median(b) / statistics.median(a) - 1
        said = "within noise" if overlap(a, b) else f"{100 * ratio:+.1f}%"
        fixed = statistics.median(whole["profile"]) - statistics.median(whole["alone"])
        fixed -= steps * (statistics.median(b) - statistics.median(a))
        print(
            f"{kind}: steady step alone {span([1e3 * v for v in a])} ms, under profile "
            f"{span([1e3 * v for v in b])} ms: {said} (median ratio {100 * ratio:+.2f}%)"
        )
        print(f"{kind}: whole process alone {span(whole['alone'])} s, under profile "
              f"{span(whole['profile'])} s; fixed part (difference less {steps} steps' "
              f"difference) {fixed:+.3f} s")  # fmt: skip
        out[kind]["fixed_s"] = fixed
    shutil.rmtree(tmp, ignore_errors=True)
    return out


SHARE_STAGES = ("data_wait", "forward", "backward", "optimizer", "other")


def _shares(summary: dict) -> dict[str, float]:
    """Each stage's share of the steady-state step (medians), on the script's stages:
    native h2d counted with data wait (both are getting the batch)."""
    med = dict((summary.get("steady_state") or {}).get("stage_s_median") or {})
    step = sum(v for v in med.values() if v is not None)
    med["data_wait"] = med.get("data_wait", 0.0) + med.pop("h2d", 0.0)
    return {k: (med.get(k) or 0.0) / step for k in SHARE_STAGES} if step else {}


def agreement(rounds: int) -> dict:
    """The default workload natively and as a plain script under profile: stage shares."""
    tmp = Path(tempfile.mkdtemp(prefix="profile-agreement-"))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    sides = {
        "native": [*trainscope_cmd(), "run", "-q", "--no-progress", "--threads", "1",
                   "--overwrite", "--out", str(tmp / "native")],
        "script": [*trainscope_cmd(), "profile", "-q", "--overwrite", "--out",
                   str(tmp / "script"), "--", str(HERE.parent / "fixed_cost.py"), "bare"],
    }  # fmt: skip
    shares: dict[str, list[dict[str, float]]] = {s: [] for s in sides}
    for i in range(rounds):
        for side in list(sides) if i % 2 == 0 else list(reversed(sides)):
            timed(sides[side], env, tmp)
            summary = json.loads((tmp / side / "summary.json").read_text())
            shares[side].append(_shares(summary))
    print("stage | native share | script share | difference (points); medians over "
          f"{rounds} runs of each")  # fmt: skip
    rows = {}
    for k in SHARE_STAGES:
        nat = statistics.median(s.get(k, 0.0) for s in shares["native"])
        scr = statistics.median(s.get(k, 0.0) for s in shares["script"])
        rows[k] = {"native": nat, "script": scr}
        print(f"{k} | {100 * nat:.1f}% | {100 * scr:.1f}% | {100 * (scr - nat):+.1f}")
    shutil.rmtree(tmp, ignore_errors=True)
    return {"shares": shares, "medians": rows}


# nanoGPT's README: "python train.py config/train_shakespeare_char.py --device=cpu ...",
# with --max_iters (and no evaluation inside the timed iterations) set by --steps.
NANOGPT_CPU = [
    "train.py", "config/train_shakespeare_char.py", "--device=cpu", "--compile=False",
    "--eval_iters=20", "--log_interval=1", "--block_size=64", "--batch_size=12",
    "--n_layer=4", "--n_head=4", "--n_embd=128", "--lr_decay_iters=2000", "--dropout=0.0",
]  # fmt: skip


def _iter_ms(stdout: str) -> list[float]:
    """The iteration times nanoGPT prints (``iter N: loss L, time T ms, mfu M%``)."""
    found = []
    for line in stdout.splitlines():
        if line.startswith("iter ") and ", time " in line:
            found.append(float(line.split(", time ")[1].split("ms")[0]))
    return found


def nanogpt(repo: Path, rounds: int, steps: int) -> dict:
    """nanoGPT's train.py alone against under profile: its own iteration times."""
    if (
        not (repo / "train.py").is_file()
        or not (repo / "data/shakespeare_char/train.bin").is_file()
    ):
        raise SystemExit(f"{repo}: no nanoGPT clone with data/shakespeare_char prepared")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    # One evaluation at iter 0 and none after: the timed iterations are training only.
    args = [*NANOGPT_CPU, f"--max_iters={steps}", f"--eval_interval={10 * steps}"]
    out_dir = Path(tempfile.mkdtemp(prefix="profile-nanogpt-"))
    sides = {
        "alone": [sys.executable, *args, f"--out_dir={out_dir / 'ckpt'}"],
        "profile": [*trainscope_cmd(), "profile", "-q", "--overwrite", "--out",
                    str(out_dir / "run"), "--", *args, f"--out_dir={out_dir / 'ckpt'}"],
    }  # fmt: skip
    step: dict[str, list[float]] = {s: [] for s in sides}
    whole: dict[str, list[float]] = {s: [] for s in sides}
    for i in range(rounds):
        for side in list(sides) if i % 2 == 0 else list(reversed(sides)):
            wall, stdout = timed(sides[side], env, repo)
            step[side].append(statistics.median(_iter_ms(stdout)[WARM_STEPS:]))
            whole[side].append(wall)
    a, b = step["alone"], step["profile"]
    ratio = statistics.median(b) / statistics.median(a) - 1
    said = "within noise" if overlap(a, b) else f"{100 * ratio:+.1f}%"
    print(f"nanoGPT iteration alone {span(a)} ms, under profile {span(b)} ms: {said} "
          f"(median ratio {100 * ratio:+.2f}%)")  # fmt: skip
    print(f"nanoGPT whole process alone {span(whole['alone'])} s, under profile "
          f"{span(whole['profile'])} s")  # fmt: skip
    shutil.rmtree(out_dir, ignore_errors=True)
    return {"iter_ms": step, "process_s": whole, "steps": steps}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=["overhead", "agreement", "nanogpt"])
    ap.add_argument("--repo", type=Path, help="nanogpt: a clone of karpathy/nanoGPT")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--steps", type=int, default=300, help="overhead: steps per process")
    ap.add_argument("--json", type=Path, help="also write the raw figures here")
    args = ap.parse_args()
    print(f"machine: {machine()}")
    print(f"load average before: {os.getloadavg()}")
    if args.what == "overhead":
        result = overhead(args.rounds, args.steps)
    elif args.what == "agreement":
        result = agreement(args.rounds)
    else:
        if args.repo is None:
            ap.error("nanogpt needs --repo (a clone of karpathy/nanoGPT)")
        result = nanogpt(args.repo.resolve(), args.rounds, args.steps)
    print(f"load average after: {os.getloadavg()}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
