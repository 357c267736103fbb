"""The main job's default must hold on every CPU: digits with every default but the seed
reaches >= 97% test accuracy on 5 seeds, under torch's AVX2 and no-vector ("default")
kernels as well as the machine's own (ATEN_CPU_CAPABILITY picks them at start-up, so each
setting runs in a process of its own). On an AVX-512 machine the old recipe (constant lr
0.05, inputs in [0, 1]) ended at 93.3% on seed 0.

The machine's own kernels are those of the test process, unless the suite itself runs
under ATEN_CPU_CAPABILITY: then they run here too, in a process without it; else their
five seeds run in the test process, beside the default run they share seed 0 with
(``tests/train/test_run.py::test_the_default_run_reaches_97_percent_on_every_seed``).
Where the machine's own kernels are AVX2, the avx2 setting is those same kernels and is
not run a second time (47 s of a test worker on a 2-vCPU AMD EPYC)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from tests.conftest import scaled

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

SEEDS = (0, 1, 2, 3, 4)
BAR = 0.97

# The kernel settings run here, one process each. Where this process's own kernels are
# AVX2 already (no ATEN_CPU_CAPABILITY, a CPU without AVX-512), the avx2 setting is the
# machine's own, whose five seeds test_run.py runs in the test process: not run twice.
_OWN = torch.backends.cpu.get_cpu_capability()
_AVX2_IS_OWN = _OWN == "AVX2" and not os.environ.get("ATEN_CPU_CAPABILITY")
KERNELS = [
    pytest.param("avx2", marks=pytest.mark.skipif(
        _AVX2_IS_OWN, reason="this CPU's own kernels are AVX2: its five seeds run in "
        "tests/train/test_run.py::test_the_default_run_reaches_97_percent_on_every_seed")),
    "default",
] + (["native"] if os.environ.get("ATEN_CPU_CAPABILITY") else [])  # fmt: skip

# One process per kernel setting: five default runs in a row (threads as the suite
# sets them: one), each printing its test accuracy.
DRIVER = """
import json, sys, tempfile
import trainscope
out = {}
with tempfile.TemporaryDirectory() as tmp:
    for seed in json.loads(sys.argv[1]):
        result = trainscope.run(seed=seed, out=f"{tmp}/s{seed}", quiet=True, save_weights=False)
        out[seed] = result.summary["test_accuracy"]
print(json.dumps(out))
"""


def low_seeds(accuracy: dict) -> dict:
    """The seeds whose test accuracy is below the bar."""
    return {seed: acc for seed, acc in accuracy.items() if acc < BAR}


@pytest.mark.parametrize("isa", KERNELS)
def test_the_default_run_reaches_97_percent_on_every_seed_and_cpu_kernel(isa: str) -> None:
    env = dict(os.environ)
    env.pop("ATEN_CPU_CAPABILITY", None)
    if isa != "native":
        env["ATEN_CPU_CAPABILITY"] = isa
    done = subprocess.run(
        [sys.executable, "-c", DRIVER, json.dumps(SEEDS)],
        env=env, capture_output=True, text=True, timeout=scaled(400),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    accuracy = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(accuracy) == len(SEEDS)
    low = low_seeds(accuracy)
    assert not low, f"{isa}: below {BAR:.0%} on seeds {low} (all: {accuracy})"
