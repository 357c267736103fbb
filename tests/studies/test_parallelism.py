"""study parallelism: its layouts, its flags' refusals, its report's rows (from records
built here), and one small study end to end on the shared Tiny Shakespeare.

The end-to-end study's launches (the collectives sweep's torchrun, the study's process
per run with 2 ranks each) are forked from the test process (tests/forked_launch.py):
what is tested is what the ranks measure and the report says, not how they start; the
real launches are tested in tests/launch/."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
import torch

from tests.forked_launch import forked_launches
from trainscope.cli import main
from trainscope.config import from_dict
from trainscope.errors import ConfigError
from trainscope.reports.study_parallelism import (
    bubble_of,
    comm_text,
    memory_per_rank,
    theory_bubble,
)
from trainscope.studies import parallelism

CPU = torch.device("cpu")
BASE = from_dict({"train": {"epochs": 1, "max_steps_per_epoch": 5}}).to_dict()
DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "tinyshakespeare"


def test_the_layouts_of_two_processes() -> None:
    plan = parallelism.plan(BASE, CPU, repeats=1)
    names = list(dict.fromkeys(r.config for r in plan.runs if not r.warmup))
    assert names == [
        "single", "ddp", "fsdp",
        "pp-gpipe-m2", "pp-gpipe-m4", "pp-gpipe-m8",
        "pp-1f1b-m2", "pp-1f1b-m4", "pp-1f1b-m8",
        "pp-interleaved-1f1b-m2", "pp-interleaved-1f1b-m4", "pp-interleaved-1f1b-m8",
        "tp", "tp-sp", "dp2-pp", "dp2-tp",
    ]  # fmt: skip
    runs = {r.config: r for r in plan.runs if not r.warmup}
    assert runs["pp-1f1b-m4"].overrides["dist.pp_schedule"] == "1f1b"
    assert runs["dp2-tp"].overrides == {
        "dist.strategy": "tp", "dist.nproc": 4, "dist.dp_size": 2,
        **{k: v for k, v in runs["dp2-tp"].overrides.items() if k == "runtime.threads"},
    }  # fmt: skip
    assert runs["dp2-pp"].labels["dp_size"] == 2 and runs["single"].labels["processes"] == 1


def test_1f1b_with_fewer_microbatches_than_stages_is_not_planned() -> None:
    every = parallelism.configurations(4, (2, 4), two_d=False)
    assert "pp-1f1b-m2" not in every and "pp-1f1b-m4" in every and "dp2-pp" not in every
    assert every["pp-gpipe-m2"]["dist.nproc"] == 4


def _args(**over: object) -> argparse.Namespace:
    args = {"config": None, "layouts": None, "microbatch_counts": "2,4", "no_2d": False}
    return argparse.Namespace(**{**args, **over})


@pytest.mark.parametrize(
    ("args", "overrides", "message"),
    [
        ({}, {"dist.nproc": 1}, "--nproc must be at least 2"),
        ({"microbatch_counts": "2,x"}, {}, "a list of whole numbers"),
        ({"microbatch_counts": "0"}, {}, "each in 1..4096"),
        ({"layouts": "single,pp-zigzag-m2"}, {}, "pp-zigzag-m2"),
    ],
)
def test_flags_that_cannot_plan_are_refused(args, overrides, message) -> None:
    with pytest.raises(ConfigError, match=message):
        parallelism.options_from_args(_args(**args), dict(overrides))


def test_without_a_workload_it_studies_a_small_gpt() -> None:
    overrides: dict[str, object] = {"dist.nproc": 2}
    options, _ = parallelism.options_from_args(_args(), overrides)
    assert overrides["workload.name"] == "gpt-char" and overrides["data.batch_size"] == 32
    assert "dist.nproc" not in overrides and options["nproc"] == 2
    assert options["microbatches"] == (2, 4) and "dp2-tp" in options["layouts"]


def _rank(rank: int, bubble: float | None, states: int, flight: int) -> dict:
    return {
        "rank": rank,
        "comm": {"measured_bubble": bubble},
        "memory": {"parameters_bytes": 1, "model_states_bytes": states,
                   "activations": {"peak_in_flight_bytes": flight}},
    }  # fmt: skip


def test_the_rows_come_from_every_rank() -> None:
    summary = {"ranks": [_rank(0, 0.2, 100, 30), _rank(1, 0.4, 80, 50)], "steps": 10,
               "stages_s": {"pipeline_wait": 0.05, "comm": 0.01},
               "comm": {"collectives": {"ops": {"send": {"calls": 4, "bytes": 2048,
                                                         "seconds": 0.002}}}}}  # fmt: skip
    assert bubble_of(summary) == pytest.approx(0.3)
    assert memory_per_rank(summary) == (100, 50)
    text = comm_text(summary)
    assert "send x4 (2.0 KiB, 2.00 ms)" in text and "pipeline wait 5.00 ms/step" in text
    split = {**summary, "comm": {"pipeline_p2p_wait_s": 0.03, "pipeline_schedule_s": 0.01,
                                 "pipeline_steps": 10}}  # fmt: skip
    assert "blocked on sends/receives 3.00 ms/step, the schedule's own 1.00 ms/step" in (
        comm_text(split))  # fmt: skip
    assert comm_text({"steps": 3}) == "none"
    assert bubble_of({"comm": {}}) is None
    assert theory_bubble("gpipe", 2, 4) == pytest.approx(0.2)
    assert theory_bubble("interleaved-1f1b", 2, 4) == pytest.approx(1 / 9)
    assert theory_bubble(None, 2, 4) is None


def test_a_run_flag_the_study_sets_is_refused(tmp_path: Path, capsys) -> None:
    code = main(["study", "parallelism", "--microbatches", "4", "--out", str(tmp_path / "s")])
    assert code != 0
    err = capsys.readouterr().err
    assert "--microbatches" in err and "--microbatch-counts" in err


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_small_study_end_to_end(tmp_path: Path) -> None:
    if not (DATA / "input.txt").is_file():
        pytest.skip("shared Tiny Shakespeare not present")
    sweep = tmp_path / "sweep"  # a small collectives sweep: the fit that predicts tp
    ops = "all_reduce,all_gather,reduce_scatter"
    out = tmp_path / "par"
    # No warm-up run, and 32 validation windows instead of 640: the assertions read the
    # training steps' collectives and the report's rows, which neither changes.
    with forked_launches() as launched:
        assert main(["collectives", "--nproc", "2", "--sizes", "4K:64K", "--ops", ops,
                     "--repeats", "5", "--warmup", "1", "--no-report", "--out", str(sweep),
                     "-q"]) == 0  # fmt: skip
        code = main(["study", "parallelism", "--data-dir", str(DATA), "--layouts",
                     "single,pp-gpipe-m2,tp,tp-sp", "--repeats", "1", "--no-warmup",
                     "--cost-model", str(sweep), "--set", "train.max_steps_per_epoch=4",
                     "--set", "workload.options.eval_windows=32", "--out", str(out),
                     "-q"])  # fmt: skip
    assert code == 0
    # Every run was forked here: the sweep's ranks and each run's process of its own.
    assert launched and all(kind != "popen" for kind, _ in launched)
    report = (out / "report" / "report.md").read_text()
    rows: dict[str, str] = {}
    for line in report.splitlines():  # the first table's rows (the tp table's come after)
        if line.startswith("| ") and "|" in line[2:]:
            rows.setdefault(line.split("|")[1].strip(), line)
    assert {"single", "pp-gpipe-m2", "tp"} <= set(rows)
    assert "0.333" in rows["pp-gpipe-m2"]  # the theory beside the measured bubble
    assert "all_reduce x16" in rows["tp"]  # 4 per block, 4 blocks
    cells = [[c.strip() for c in line.split("|")[1:-1]] for line in report.splitlines()
             if line.startswith("| ")]  # fmt: skip
    comm = {(c[0], c[1]): c for c in cells if len(c) == 6}  # the collectives table
    # Predicted beside measured: 16 all-reduces of 512 KiB, their time from the sweep's fit.
    assert comm["tp", "all_reduce"][2:4] == ["16 / 16", "8.0 MiB / 8.0 MiB"]
    assert float(comm["tp", "all_reduce"][4]) > 0
    # Sequence parallelism, per step of 4 blocks: 4 all-gathers per block and 2 around
    # them, 2 reduce-scatters per block, 2 all-reduces per block and one per norm weight
    # (2 per block and the final one). Predicted from the split, measured by the probe.
    assert comm["tp-sp", "all_gather"][2:4] == ["18 / 18", "4.5 MiB / 4.5 MiB"]  # shards in
    assert comm["tp-sp", "reduce_scatter"][2:4] == ["8 / 8", "4.0 MiB / 4.0 MiB"]
    assert comm["tp-sp", "all_reduce"][2] == "17 / 17"
    assert all(float(comm["tp-sp", op][4]) > 0 for op in ("all_gather", "reduce_scatter"))
    # Compared with single where the machine's cores hold 2 processes; else said why not.
    assert "pp-gpipe-m2 vs single: step time" in report or (
        "pp-gpipe-m2:" in report and "oversubscribed" in report
    )


def test_a_workload_without_sequence_parallelism_leaves_tp_sp_out() -> None:
    overrides: dict[str, object] = {"dist.nproc": 2, "workload.name": "text-cls"}
    options, notes = parallelism.options_from_args(_args(), overrides)
    assert "tp-sp" not in options["layouts"] and "tp" in options["layouts"]
    assert any("tp-sp left out" in n and "text-cls" in n for n in notes)
    options, _ = parallelism.options_from_args(_args(), {"dist.nproc": 2})
    assert "tp-sp" in options["layouts"]  # the default gpt-char splits its sequence
