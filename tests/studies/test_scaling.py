"""study scaling: its configurations, its flags' refusals, the α–β projection, the
report's helpers, and one small study end to end (digits: offline).

The end-to-end study's processes (one per run, two ranks for n=2) are forked from the
test process (tests/forked_launch.py): the report's figures are tested, not how the
processes start (tests/launch/ starts real ones)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
import torch

from tests.forked_launch import forked_launches
from trainscope.cli import main
from trainscope.comm.cost_model import given
from trainscope.comm.scaling import project
from trainscope.config import from_dict
from trainscope.errors import ConfigError
from trainscope.reports.study_scaling import fixed_share, grad_bytes
from trainscope.studies import scaling

CPU = torch.device("cpu")


def test_strong_keeps_the_global_batch_and_weak_grows_it() -> None:
    base = from_dict({"data": {"batch_size": 32}, "dist": {"strategy": "ddp"}}).to_dict()
    plan = scaling.plan(base, CPU, repeats=1, nprocs=(1, 2, 4))
    runs = {r.config: r for r in plan.runs if not r.warmup}
    assert list(runs) == ["strong-n1", "strong-n2", "strong-n4", "weak-n1", "weak-n2", "weak-n4"]
    assert [runs[f"strong-n{n}"].overrides["data.batch_size"] for n in (1, 2, 4)] == [32] * 3
    assert [runs[f"weak-n{n}"].overrides["data.batch_size"] for n in (1, 2, 4)] == [32, 64, 128]
    assert runs["weak-n4"].overrides["dist.nproc"] == 4
    assert runs["weak-n4"].overrides["dist.strategy"] == "ddp"


def _args(**over: object) -> argparse.Namespace:
    args = {"config": None, "nproc": "1,2", "scaling": "strong,weak", "interconnects": "nvlink4"}
    return argparse.Namespace(**{**args, **over})


@pytest.mark.parametrize(
    ("args", "overrides", "message"),
    [
        ({}, {"dist.strategy": "pipeline"}, "pipeline is not one"),
        ({}, {"dist.strategy": "single"}, "single is not one"),
        ({"nproc": "1,x"}, {}, "a list of whole numbers"),
        ({"nproc": "0,2"}, {}, "each in 1..64"),
        ({"scaling": "sideways"}, {}, "strong and/or weak"),
        ({"interconnects": "carrier-pigeon"}, {}, "unknown interconnect"),
    ],
)
def test_flags_that_cannot_plan_are_refused(args, overrides, message) -> None:
    with pytest.raises(ConfigError, match=message):
        scaling.options_from_args(_args(**args), dict(overrides))


def test_options_default_to_ddp_on_the_digits_and_resolve_the_links() -> None:
    overrides: dict[str, object] = {}
    options, _ = scaling.options_from_args(_args(nproc="4,1,2,2"), overrides)
    assert overrides["dist.strategy"] == "ddp" and overrides["workload.name"] == "digits"
    assert options["nprocs"] == (1, 2, 4) and options["modes"] == ("strong", "weak")
    assert options["links"]["nvlink4"]["bandwidth_GBps"] == 450.0


def test_the_projection_is_the_ring_all_reduce_beside_the_compute() -> None:
    fit = given(1e-5, 1.0, 2)["all_reduce"]  # 10 µs, 1 GB/s
    strong = project(0.08, 1e9, fit, "strong", (8,))[0]
    assert strong.compute_s == pytest.approx(0.01)
    # 2 (n - 1) = 14 messages; 2 (n - 1) / n = 1.75 of the 1 GB through each link.
    assert strong.allreduce_s == pytest.approx(14e-5 + 1.75)
    assert strong.step_s_no_overlap == pytest.approx(0.01 + 14e-5 + 1.75)
    assert strong.step_s_overlap == pytest.approx(14e-5 + 1.75)
    weak = project(0.08, 0.0, fit, "weak", (8, 1024))
    assert [p.compute_s for p in weak] == [0.08, 0.08]
    assert weak[0].efficiency == pytest.approx((0.08 / (0.08 + 14e-5), 1.0))
    with pytest.raises(ValueError):
        project(0.08, 1.0, fit, "diagonal")


def test_the_report_reads_the_fixed_share_and_the_gradient_bytes() -> None:
    s = {"wall_time_s": 10.0, "stages_s": {"setup": 2.0, "evaluation": 1.0, "forward": 6.0,
                                           "other": 1.0}}  # fmt: skip
    assert fixed_share(s) == pytest.approx(0.4)
    assert fixed_share({"wall_time_s": 0}) is None
    assert grad_bytes({"gradients": {"tensor_bytes": [4, 8]}}) == 12
    assert grad_bytes({"gradients": {"tensor_bytes": ["4"]}}) is None
    assert grad_bytes({}) is None


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_small_study_end_to_end(tmp_path: Path) -> None:
    out = tmp_path / "scaling"
    # 12 steps, no warm-up run: the steady state starts after 5 (timing_warmup_steps).
    with forked_launches() as launched:
        code = main(["study", "scaling", "--nproc", "1,2", "--scaling", "strong", "--repeats",
                     "1", "--no-warmup", "--set", "train.epochs=1", "--max-steps-per-epoch",
                     "12", "--out", str(out), "-q"])  # fmt: skip
    assert code == 0
    assert [kind for kind, _ in launched] == ["process", "torchrun"]  # n1, then n2's ranks
    study = json.loads((out / "study.json").read_text())
    assert study["options"]["nprocs"] == [1, 2] and study["options"]["modes"] == ["strong"]
    report = (out / "report" / "report.md").read_text()
    assert "Strong scaling (ddp)" in report and "strong scaling on 2 processes" in report
    rows = [line.split("|")[1:3] for line in report.splitlines() if "| nvlink4 |" in line]
    assert [int(n) for _, n in rows] == [8, 16, 32, 64, 128, 256, 512, 1024]  # projected
