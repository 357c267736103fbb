"""Do trainscope's Lightning and Hugging Face integrations see what ``trainscope profile``
sees? Each example in ``examples/profile/`` run both ways, alternated, ``--rounds`` times:

- A: ``trainscope profile --out DIR -- SCRIPT ARGS`` (global hooks, from outside);
- B: ``python SCRIPT ARGS --trainscope-out DIR`` (the integration, from inside).

Each record's stages as shares of its wall time after ``setup`` (the two start their
clocks at different points: ``profile`` before the script's imports, an integration when
training begins, so setup is left out of both), the median over the rounds with its
min-max, and the difference in points. Run on purpose, never by the tests::

    python benchmarks/integration_agreement.py lightning --rounds 5
    python benchmarks/integration_agreement.py hf --rounds 5 --data ../shared/data

Prints the machine (CPU model, cores, torch) and the load average before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples" / "profile"
STAGES = ("data_wait", "forward", "backward", "optimizer", "evaluation", "checkpoint", "other")
BOOT = "import sys; from trainscope.cli import main; sys.exit(main())"


def shares(run_dir: Path) -> dict[str, float]:
    """Each stage's percent of the record's wall time after setup."""
    s = json.loads((run_dir / "summary.json").read_text())
    assert s["status"] == "completed", s.get("error")
    stages = s["stages_s"]
    rest = s["wall_time_s"] - stages.get("setup", 0.0)
    return {k: 100 * stages.get(k, 0.0) / rest for k in STAGES}


def script_args(which: str, data: str | None) -> tuple[Path, list[str]]:
    if which == "lightning":
        return EXAMPLES / "lightning_fit.py", ["--epochs", "3"]
    if data is None:
        sys.exit("hf needs --data (a folder with minilm-l6/ and sst2/)")
    return EXAMPLES / "hf_trainer.py", ["--model", f"{data}/minilm-l6", "--data", f"{data}/sst2"]


def one_round(which: str, data: str | None, tmp: Path, k: int) -> tuple[dict, dict]:
    script, args = script_args(which, data)
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    a, b = tmp / f"profile-{k}", tmp / f"integration-{k}"
    subprocess.run([sys.executable, "-c", BOOT, "profile", "-q", "--out", str(a), "--",
                    str(script), *args], cwd=tmp, env=env, check=True,
                   capture_output=True)  # fmt: skip
    subprocess.run([sys.executable, str(script), *args, "--trainscope-out", str(b)], cwd=tmp,
                   env=env, check=True, capture_output=True)  # fmt: skip
    return shares(a), shares(b)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("which", choices=("lightning", "hf"))
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--data", default=None, help="hf: the folder holding minilm-l6/, sst2/")
    args = p.parse_args()
    import torch

    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text()
                .splitlines() if line.startswith("model name")), platform.processor())  # fmt: skip
    print(f"machine: {cpu}, {os.cpu_count()} cores, torch {torch.__version__}; "
          f"load before {os.getloadavg()[0]:.2f}")  # fmt: skip
    rows: list[tuple[dict, dict]] = []
    with tempfile.TemporaryDirectory(prefix="agreement-") as tmp:
        for k in range(args.rounds):
            rows.append(one_round(args.which, args.data, Path(tmp), k))
    print(f"load after {os.getloadavg()[0]:.2f}; n={args.rounds} rounds, A then B each")
    print(f"{'stage':<12}{'profile %':>22}{'integration %':>22}{'difference':>12}")
    for stage in STAGES:
        a = [r[0][stage] for r in rows]
        b = [r[1][stage] for r in rows]
        ma, mb = statistics.median(a), statistics.median(b)
        print(f"{stage:<12}{ma:>8.1f} ({min(a):.1f}-{max(a):.1f}){'':>4}"
              f"{mb:>8.1f} ({min(b):.1f}-{max(b):.1f}){'':>4}{mb - ma:>+8.1f}")  # fmt: skip


if __name__ == "__main__":
    main()
