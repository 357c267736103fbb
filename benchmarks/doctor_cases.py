"""Planted problems for ``trainscope doctor``: does it name them, and do its fixes hold?

Each case is a small ``trainscope run`` with one problem planted (or none: the healthy
runs). The script runs it, asks ``trainscope doctor RUN --json`` what to fix, and notes
where the planted problem's rule ranks; with ``--apply`` it then runs ``trainscope doctor
RUN --apply`` (the baseline and each fix re-run for the same steps, repeats alternated)
and reads whether the planted rule's fix is better beyond the noise (the studies' rule:
interquartile ranges, min–max below 5 runs, that do not overlap).

    python benchmarks/doctor_cases.py --out /tmp/doctor-cases            # diagnose only
    python benchmarks/doctor_cases.py --out /tmp/doctor-cases --apply    # and re-measure
    python benchmarks/doctor_cases.py --out /tmp/doctor-cases --only input-bound --apply
    python benchmarks/doctor_cases.py --out /tmp/doctor-gpu --gpu --apply   # on a CUDA GPU

Needs ``../shared/data`` (MNIST's test set, Tiny Shakespeare) or ``--data DIR`` with
``mnist/`` and ``tinyshakespeare/``. Runs use one intra-op thread per process (the
oversubscription case plants more) on a 2-core machine; run it with nothing else busy.
Writes ``results.json`` and ``results.md`` under ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
TS = [str(Path(sys.executable).with_name("trainscope"))]  # the installed command
STEPS = ["--epochs", "1", "--max-steps-per-epoch"]
GPT = ["--workload", "gpt-char", "--data-dir", "{data}/tinyshakespeare", "--preset", "tiny"]
MNIST = ["--workload", "mnist", "--data-dir", "{out}/mnist"]


@dataclass
class Case:
    """One planted problem (``rule``), or a healthy run (``rule`` None)."""

    name: str
    rule: str | None
    kind: str
    """speed | memory | numerics | healthy: what ``--apply`` is judged on."""
    args: list[str]
    doctor: list[str] = field(default_factory=list)
    """Extra ``trainscope doctor`` flags (a memory limit)."""
    cwd: Path | None = None
    threads: str = "1"


CASES = [
    Case("input-bound", "input-bound", "speed",
         [*MNIST, "--augment", "--batch-size", "64", *STEPS, "40"]),
    Case("evaluation-heavy", "evaluation-heavy", "speed",
         [*MNIST, "--epochs", "4", "--max-steps-per-epoch", "5", "--batch-size", "64"]),
    Case("checkpoint-heavy", "checkpoint-heavy", "speed",
         ["--checkpoint-every", "1", *STEPS, "40"]),
    Case("per-tensor-sync", "per-tensor-sync", "speed",
         [*GPT, "--nproc", "2", "--strategy", "allreduce", "--batch-size", "8",
          "--block-size", "32", *STEPS, "40"]),
    Case("overhead-bound", "overhead-bound", "speed",
         ["--batch-size", "1", "--optimizer-impl", "foreach", *STEPS, "1000"]),
    Case("optimizer-bound", "optimizer-bound", "speed",
         [*GPT, "--n-embd", "256", "--n-layer", "2", "--n-head", "4", "--optimizer", "adam",
          "--lr", "0.001", "--batch-size", "8", "--block-size", "8", *STEPS, "40"]),
    Case("precision-for-device", "precision-for-device", "speed",
         ["--precision", "bf16", *STEPS, "40"]),
    Case("oversubscribed", "oversubscribed", "speed", [*STEPS, "40"], threads="6"),
    Case("compile-unpaid", "compile-unpaid", "speed", ["--compile", *STEPS, "30"]),
    Case("straggler", "straggler", "speed",
         ["--workload", "doctor_workloads:slow_rank", "--nproc", "2", "--strategy", "ddp",
          "--batch-size", "8", *STEPS, "40"], cwd=HERE,
         doctor=["--trust-record-code"]),  # its workload is this folder's own module
    Case("activations-near-limit", "activations-near-limit", "memory",
         [*GPT, *STEPS, "10"], doctor=["--memory-limit", "40MiB"]),
    Case("optimizer-states-near-limit", "optimizer-states-near-limit", "memory",
         [*GPT, "--nproc", "2", "--strategy", "ddp", "--optimizer", "adam", "--lr", "0.001",
          "--n-embd", "256", "--n-layer", "4", "--n-head", "4", "--batch-size", "4",
          "--block-size", "16", *STEPS, "10"], doctor=["--memory-limit", "56MiB"]),
    Case("diverged", "diverged", "numerics", ["--lr", "50", *STEPS, "40"]),
    Case("loss-flat", "loss-flat", "numerics", ["--lr", "0.000001", "--epochs", "3"]),
    Case("healthy-digits", None, "healthy", ["--epochs", "3"]),
    Case("healthy-gpt-char", None, "healthy", [*GPT, *STEPS, "60"]),
    Case("healthy-mnist", None, "healthy", [*MNIST, "--batch-size", "128", *STEPS, "60"]),
]  # fmt: skip


GPU_CASES = [
    Case("gpu-fp32-on-tensor-cores", "precision-for-device", "speed",
         [*GPT, "--device", "cuda", "--precision", "fp32", "--batch-size", "64", *STEPS, "60"]),
    Case("gpu-h2d-unpinned", "h2d-unpinned", "speed",
         [*MNIST, "--device", "cuda", "--no-pin-memory", "--batch-size", "1024", *STEPS, "40"]),
    Case("gpu-underused", "gpu-underused", "speed",
         ["--device", "cuda", "--batch-size", "8", "--system-interval", "0.2", *STEPS, "400"]),
    Case("gpu-healthy-gpt-char", None, "healthy",
         [*GPT, "--device", "cuda", "--precision", "bf16", *STEPS, "60"]),
]  # fmt: skip
"""The GPU rules' planted cases (``--gpu``): not yet measured on a GPU."""


def trainscope(args: list[str], cwd: Path | None = None, timeout: float = 900) -> str:
    """Run the CLI; its stdout (raises with its stderr's tail when it fails)."""
    done = subprocess.run(
        [*TS, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"trainscope {' '.join(args[:3])}...: {done.stderr.strip()[-400:]}")
    return done.stdout


def planted_run(case: Case, out: Path, data: Path) -> tuple[Path, float]:
    """The case's run (made once: an existing one is kept) and its wall seconds."""
    run = out / "runs" / case.name
    if (run / "summary.json").is_file():
        return run, json.loads((run / "summary.json").read_text()).get("wall_time_s", 0.0)
    args = [a.format(data=data, out=out) for a in case.args]
    t0 = time.perf_counter()
    try:
        trainscope(["run", *args, "--threads", case.threads, "--no-progress", "--overwrite",
                    "--no-save-weights", "--out", str(run)], cwd=case.cwd)  # fmt: skip
    except RuntimeError:
        if not (run / "summary.json").is_file():  # a diverged run fails, with its record
            raise
    return run, time.perf_counter() - t0


def diagnosis(case: Case, run: Path) -> dict:
    """Where the planted rule ranks among the doctor's findings."""
    findings = json.loads(trainscope(["doctor", str(run), "--json", *case.doctor]))
    rules = [f["rule"] for f in findings]
    serious = [f["rule"] for f in findings if f["severity"] != "minor"]
    rank = rules.index(case.rule) + 1 if case.rule in rules else None
    return {"rules": rules, "severities": [f["severity"] for f in findings],
            "rank": rank, "serious": serious}  # fmt: skip


def applied(case: Case, run: Path, out: Path, steps: int, repeats: int) -> dict:
    """Re-measure with ``doctor --apply``; the planted rule's fix against the baseline."""
    from trainscope.records.study_dir import load_study
    from trainscope.reports.section import each_config
    from trainscope.reports.study_doctor import baseline_key, doctor_rows, measured, verdict
    from trainscope.util.spread import differ

    study = out / "studies" / case.name
    trainscope(["doctor", str(run), "--apply", "--steps", str(steps), "--repeats",
                str(repeats), "--out", str(study), "-q", *case.doctor], cwd=case.cwd)  # fmt: skip
    record = load_study(study)
    rows, figures = doctor_rows(record)
    if case.kind == "numerics":  # judged on the loss at the same step, not on time
        loss = {r[0]: r[6] for r in rows}  # configuration -> median train loss ("–": none)
        base, fixed = loss.get("baseline", "–"), loss.get(case.rule, "–")
        return {"measure": "loss", "baseline": f"train loss {base}",
                "fixed": f"train loss {fixed}", "verdict": "the loss at the same step",
                "proven": None}  # fmt: skip
    config = next((c for c in each_config(record, "") if c.name == case.rule), None)
    if config is None:
        return {"proven": False, "verdict": "the planted rule's fix was not applied"}
    m = measured(config)
    fix, base = figures[case.rule], figures[baseline_key(m)]
    better = fix.ok and base.ok and differ(fix, base) and fix.median < base.median
    show = {"step": ("ms", 1.0), "wall": ("s", 1.0), "sample": ("ms", 1.0),
            "memory": ("MiB", 1 / 2**20)}[m]  # fmt: skip

    def fmt(sp: object) -> str:
        unit, k = show
        return (f"{sp.median * k:.3g} ({sp.low * k:.3g}–{sp.high * k:.3g}, {sp.kind}, "
                f"n={sp.n}) {unit}")  # fmt: skip

    return {"measure": m, "baseline": fmt(base), "fixed": fmt(fix),
            "verdict": verdict(fix, base, m), "proven": bool(better)}  # fmt: skip


def markdown(results: list[dict]) -> str:
    """The results as a Markdown table, and the tallies."""
    lines = ["| case | top finding | planted rule's rank | --apply: baseline → fix | verdict |",
             "|---|---|---|---|---|"]  # fmt: skip
    for r in results:
        d, a = r["diagnosis"], r.get("apply") or {}
        top = f"{d['rules'][0]} ({d['severities'][0]})" if d["rules"] else "nothing"
        before = f"{a['baseline']} → {a['fixed']}" if "baseline" in a else "–"
        lines.append(f"| {r['case']} | {top} | {d['rank'] or '–'} | {before} | "
                     f"{a.get('verdict', '–')} |")  # fmt: skip
    planted = [r for r in results if r["kind"] != "healthy"]
    healthy = [r for r in results if r["kind"] == "healthy"]
    judged = [r for r in planted if r["kind"] in ("speed", "memory") and r.get("apply")]
    lines += [
        "",
        f"- planted problem the top finding: {sum(r['diagnosis']['rank'] == 1 for r in planted)}"
        f" of {len(planted)}; among the top 3: "
        f"{sum((r['diagnosis']['rank'] or 99) <= 3 for r in planted)} of {len(planted)}",
        f"- healthy runs with nothing above minor: "
        f"{sum(not r['diagnosis']['serious'] for r in healthy)} of {len(healthy)}",
    ]
    if judged:
        lines.append(f"- speed and memory fixes proven by --apply: "
                     f"{sum(r['apply']['proven'] for r in judged)} of {len(judged)}")  # fmt: skip
    return "\n".join(lines) + "\n"


def main() -> int:
    """Run the cases (or ``--only`` some), diagnose each, optionally apply the fixes."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--data", type=Path, default=HERE.parent.parent / "shared" / "data")
    p.add_argument("--apply", action="store_true", help="also re-measure each fix")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--only", nargs="*", help="case names")
    p.add_argument("--gpu", action="store_true", help="the GPU rules' cases (needs CUDA)")
    args = p.parse_args()
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    if not (out / "mnist").is_dir():
        trainscope(["data", "mnist-split", str(args.data / "mnist"), str(out / "mnist")])
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    results, t_runs = [], 0.0
    cases = GPU_CASES if args.gpu else CASES
    for case in [c for c in cases if not args.only or c.name in args.only]:
        run, seconds = planted_run(case, out, args.data.resolve())
        t_runs += seconds
        row = {"case": case.name, "kind": case.kind, "rule": case.rule, "run_s": seconds,
               "diagnosis": diagnosis(case, run)}  # fmt: skip
        if args.apply and case.kind in ("speed", "memory", "numerics"):
            row["apply"] = applied(case, run, out, args.steps, args.repeats)
        results.append(row)
        print(json.dumps(row), flush=True)
    (out / "results.json").write_text(json.dumps(results, indent=1))
    text = markdown(results) + f"\nPlanted runs: {t_runs:.0f} s of wall time in all.\n"
    (out / "results.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
