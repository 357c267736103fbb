"""The two examples of docs/workloads.md train as documented: plain parts from
``examples/`` under every strategy (the multi-process ones with 2 gloo processes), bf16,
the fast loader and a study, each with the metrics of its task.

Every run is tiny (one epoch of a few steps on small data): what is tested is that each
combination runs to a completed record with the right metrics, not how well it learns.
The commands run from the repository root, as docs/workloads.md says, so the factory
module is found in the current directory (by the workers of ``--nproc 2`` too).

Real launches: ``test_an_example_on_two_processes[ddp-regression]`` starts torchrun and
two fresh interpreters, which must import ``examples`` from the current directory. The
other two-process runs (and the refused pipeline) fork their ranks from the test process
(tests/forked_launch.py): what they test is what the ranks train and record, and a fork
already has the module imported, so it says nothing about how a worker finds it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.forked_launch import forked_launches
from trainscope.cli import main
from trainscope.registry import STRATEGIES, multiprocess_names

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300), pytest.mark.usefixtures("one_thread")]

EXAMPLES = {
    "regression": "examples.tabular_regression:make",
    "image": "examples.image_classifier:make",
}
# One epoch of three steps; a hung collective fails in 60 s rather than at the test timeout.
TINY = [
    "--epochs", "1", "--max-steps-per-epoch", "3", "--batch-size", "32", "--device", "cpu",
    "--optimizer", "adam", "--lr", "1e-3", "--set", "dist.timeout_s=60", "-q",
]  # fmt: skip
# The image example on the digits at their own 8x8 (the smallest the CNN takes quickly).
OPTIONS = {"regression": [], "image": ["--set", "workload.options.size=8"]}


@pytest.fixture(autouse=True)
def _from_the_repository_root(
    repo_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As docs/workloads.md runs them: `examples` is found in the current directory.
    monkeypatch.chdir(repo_root)
    monkeypatch.setenv("TRAINSCOPE_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("TRAINSCOPE_DEBUG", raising=False)


# The one two-process run launched for real (torchrun, fresh interpreters): its workers
# import the example from the current directory as a user's would.
REAL_LAUNCH = ("ddp", "regression")


def run_example(example: str, out: Path, *args: str) -> dict[str, Any]:
    """``trainscope run`` of one example (in-process; --nproc starts torchrun itself);
    the summary it left, checked for the metrics of the example's task."""
    code = main(["run", "--workload", EXAMPLES[example], *TINY, *OPTIONS[example], *args,
                 "--no-progress", "--out", str(out)])  # fmt: skip
    assert code == 0, f"{example} {' '.join(args)} exited {code}"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "completed", summary.get("error")
    assert summary["workload"] == EXAMPLES[example]
    assert_task_metrics(example, summary)
    return summary


def assert_task_metrics(example: str, summary: dict[str, Any]) -> None:
    metrics = summary["test_metrics"]
    if example == "regression":
        assert summary["test_accuracy"] is None and summary["per_class_accuracy"] is None
        assert {"mse", "mae", "r2"} <= set(metrics)
        assert metrics["mse"] > 0 and metrics["mae"] > 0 and metrics["r2"] is not None
        assert metrics["mse"] == pytest.approx(summary["test_loss"], rel=1e-4)  # the loss is MSE
        assert metrics["samples"] == 67  # 15% of the 442 diabetes rows
    else:
        assert 0.0 <= summary["test_accuracy"] <= 1.0
        assert len(summary["per_class_accuracy"]) == 10
        assert metrics["samples"] == 180  # 10% of the 1,797 digits


@pytest.mark.parametrize("example", EXAMPLES)
@pytest.mark.parametrize(
    "flags",
    [
        ["--strategy", "single"],
        ["--strategy", "dp"],
        ["--precision", "bf16"],
        ["--loader", "fast"],
    ],
    ids=["single", "dp", "bf16", "fast"],
)
def test_an_example_in_one_process(example: str, flags: list[str], tmp_path: Path) -> None:
    summary = run_example(example, tmp_path / "run", *flags)
    assert summary["world_size"] == 1 and summary["steps"] == 3
    assert summary["strategy"] == (flags[1] if flags[0] == "--strategy" else "single")
    assert summary["precision"] == (flags[1] if flags[0] == "--precision" else "fp32")
    assert summary["loader"] == (flags[1] if flags[0] == "--loader" else "torch")


@pytest.mark.parametrize("example", EXAMPLES)
@pytest.mark.parametrize(
    "strategy", [n for n in multiprocess_names() if STRATEGIES[n].splits_batch]
)
def test_an_example_on_two_processes(example: str, strategy: str, tmp_path: Path) -> None:
    out = tmp_path / "run"
    args = ("--strategy", strategy, "--nproc", "2")
    if (strategy, example) == REAL_LAUNCH:
        summary = run_example(example, out, *args)
    else:
        with forked_launches() as launched:
            summary = run_example(example, out, *args)
        assert [kind for kind, _ in launched] == ["torchrun"]  # the ranks were forked
    assert summary["strategy"] == strategy and summary["world_size"] == 2
    assert summary["local_batch_size"] == 16 and summary["steps"] == 3
    rank1 = json.loads((out / "ranks" / "rank1" / "summary.json").read_text())
    assert rank1["rank"] == 1 and rank1["status"] == "completed"
    if strategy == "fsdp":  # the CNN's model.blocks are sharded one by one; the MLP has none
        assert summary["parallel"]["sharded_blocks"] == (2 if example == "image" else 0)


def test_a_pipeline_of_a_model_that_does_not_say_how_to_split_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "run"
    argv = ["run", "--workload", EXAMPLES["image"], *TINY, *OPTIONS["image"],
            "--strategy", "pipeline", "--nproc", "2", "--no-progress",
            "--out", str(out)]  # fmt: skip
    with forked_launches():  # the ranks' refusal is tested, not how they start
        assert main(argv) != 0
    summary = json.loads((out / "summary.json").read_text())
    # Both ranks refuse; where rank 1 ends first, the agent stops rank 0, whose record then
    # says so (``error``) beside what ended the launch (``launch_error``), as under torchrun.
    why = "strategy pipeline splits a model at its blocks; SmallCNN does not say how"
    assert summary["status"] == "failed"
    assert why in str(summary["error"]) or why in str(summary.get("launch_error"))


@pytest.fixture(scope="module")
def studies(repo_root: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A tiny ``study precision`` (fp32 and bf16, one repeat) of each example, run once for
    the tests below: the runs share this process, as ``--no-fresh-processes`` says."""
    out = {}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the one_thread fixture does for each test
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.chdir(repo_root)
            mp.setenv("TRAINSCOPE_CACHE", str(tmp_path_factory.mktemp("cache")))
            mp.delenv("TRAINSCOPE_DEBUG", raising=False)
            for example, spec in EXAMPLES.items():
                study_dir = tmp_path_factory.mktemp("study") / example
                argv = ["study", "precision", "--workload", spec, *TINY, *OPTIONS[example],
                        "--precisions", "fp32,bf16", "--repeats", "1", "--no-warmup",
                        "--no-fresh-processes", "--out", str(study_dir)]  # fmt: skip
                assert main(argv) == 0, f"study of {example} failed"
                out[example] = study_dir
    finally:
        torch.set_num_threads(threads)
    return out


@pytest.mark.parametrize("example", EXAMPLES)
def test_a_precision_study_of_an_example(example: str, studies: dict[str, Path]) -> None:
    study_dir = studies[example]
    study = json.loads((study_dir / "study.json").read_text())
    assert study["status"] == "completed" and study["kind"] == "precision"
    runs = sorted((study_dir / "runs").glob("*/r1/summary.json"))
    assert [p.parent.parent.name for p in runs] == ["bf16", "fp32"]
    for path in runs:
        summary = json.loads(path.read_text())
        assert summary["status"] == "completed" and summary["precision"] == path.parts[-3]
        assert_task_metrics(example, summary)
    assert (study_dir / "report" / "report.md").is_file()


@pytest.mark.parametrize(
    ("example", "figure"),
    [
        ("regression", "MSE"),
        ("image", "Test acc"),
    ],
)  # fmt: skip
def test_the_study_report_shows_the_metric_of_the_task(
    example: str, figure: str, studies: dict[str, Path]
) -> None:
    md = (studies[example] / "report" / "report.md").read_text()
    table = [line for line in md.splitlines() if line.startswith("| Precision")]
    assert table and figure in table[0], table
