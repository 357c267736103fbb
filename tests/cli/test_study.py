"""``trainscope study``: bad input, and a real tiny study that resumes, reports and compares.

Runs :func:`trainscope.cli.main` in-process, like tests/cli/test_commands.py. A profile
study runs each run in a process of its own by default; here those processes are forked
from the test process (the ``forked_launch`` fixture, tests/forked_launch.py): these tests
read what the runs record and the study says, not how a process starts. Real processes
per run are tested in tests/launch/test_processes.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.studies.heap import frozen
from trainscope.cli import main

# Each test with the test process's heap frozen: the garbage collection a study makes
# after each run skips it (tests/studies/heap.py).
pytestmark = [pytest.mark.timeout(120), pytest.mark.usefixtures("frozen")]
__all__ = ["frozen"]  # a fixture, used through pytestmark


def tiny_profile(out: Path, repeats: int = 1) -> list[str]:
    """A real but tiny ``study profile`` on the CPU, without warm-up."""
    return [
        "study", "profile", "--epochs", "1", "--max-steps-per-epoch", "3", "--device", "cpu",
        "--repeats", str(repeats), "--no-warmup", "--out", str(out),
    ]  # fmt: skip


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Default study directories (studies/...) land in tmp_path; no debug tracebacks.
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TRAINSCOPE_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("TRAINSCOPE_DEBUG", raising=False)


def run_main(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """Run the CLI in-process: (exit code, stdout, stderr)."""
    try:
        code = main(list(argv))
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    out, err = capsys.readouterr()
    return code, out, err


def one_error_line(err: str, *needles: str) -> str:
    """stderr is exactly one trainscope error line holding every needle, no traceback."""
    assert "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got {lines!r}"
    assert lines[0].startswith("trainscope") and "error:" in lines[0], lines[0]
    assert "internal error" not in lines[0]
    for needle in needles:
        assert needle in lines[0], f"{needle!r} not in {lines[0]!r}"
    return lines[0]


@pytest.mark.parametrize(
    ("argv", "needles"),
    [
        (["study"], ["NAME", "loader", "profile", "precision"]),
        (["study", "precision", "--precisions", "fp32,xx"], ["--precisions", "xx"]),
        (["study", "precision", "--precisions", ","], ["--precisions", "empty"]),
        (["study", "loader", "--workers", "3-1"], ["3-1"]),
        (["study", "loader", "--iter-workers", "x"], ["'x'"]),
        (["study", "loader", "--sweep-epochs", "0"], ["--sweep-epochs"]),
        (["study", "profile", "--repeats", "0"], ["--repeats", "0"]),
        (["study", "profile", "--set", "data.batch_size=0"], ["batch_size"]),
        (["study", "nope"], ["nope"]),
        (["study", "checkpointing", "--policies", "none,every-0"], ["every-0", "policy"]),
        (["study", "checkpointing", "--policies", ","], ["--policies"]),
        (["study", "loader", "--epochs", "5"], ["--epochs", "--sweep-epochs"]),
        (["study", "loader", "--num-workers", "2"], ["--num-workers", "--workers"]),
        (["study", "precision", "--precision", "bf16"], ["--precision", "--precisions"]),
        (["study", "strategies", "--strategy", "ddp"], ["--strategy", "--strategies"]),
        (["study", "checkpointing", "--checkpointing", "full"], ["--policies"]),
    ],
)
def test_bad_study_input_is_one_line_exit_2_and_runs_nothing(capsys, tmp_path, argv, needles):
    code, out, err = run_main(capsys, *argv, "--out", str(tmp_path / "s"))
    assert code == 2
    one_error_line(err, *needles)
    assert not (tmp_path / "s").exists()
    assert not (tmp_path / "studies").exists()


def test_study_without_name(capsys, tmp_path):
    code, _, err = run_main(capsys, "study")
    assert code == 2
    one_error_line(err, "needs a NAME")


def test_precision_study_with_only_cpu_unrunnable_precisions_is_refused(capsys, tmp_path):
    code, _, err = run_main(
        capsys, "study", "precision", "--device", "cpu", "--precisions", "fp16",
        "--out", str(tmp_path / "s"),
    )  # fmt: skip
    assert code == 1
    one_error_line(err, "no configuration can run")
    assert not (tmp_path / "s").exists()


def summaries(study_dir: Path) -> dict[str, tuple[int, bytes]]:
    """Run id -> (mtime_ns, bytes) of every summary.json in a study."""
    out = {}
    for p in sorted((study_dir / "runs").glob("*/*/summary.json")):
        out[f"{p.parent.parent.name}/{p.parent.name}"] = (p.stat().st_mtime_ns, p.read_bytes())
    return out


def test_a_tiny_profile_study_resumes_reports_and_compares(capsys, tmp_path, forked_launch):
    study_dir = tmp_path / "prof"
    argv = tiny_profile(study_dir)
    code, out, err = run_main(capsys, *argv, "-q")
    assert code == 0, err
    assert err == ""  # -q: nothing but errors
    study = json.loads((study_dir / "study.json").read_text())
    assert study["status"] == "completed" and study["kind"] == "profile"
    assert [r["repeat"] for r in study["runs"]] == [1]  # --repeats 1 --no-warmup
    report = study_dir / "report"
    for name in ("report.md", "report.html", "tables.tex", "plots/stages.png"):
        assert (report / name).is_file(), name
    assert (report / "plots" / "stages.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    before = summaries(study_dir)
    assert list(before) == ["run/r1"]
    assert json.loads(before["run/r1"][1])["status"] == "completed"

    # The same command again (not quiet): nothing is rerun, the report is rebuilt.
    (report / "report.md").unlink()
    code, out, err = run_main(capsys, *argv)
    assert code == 0, err
    assert "already done" in err
    assert "0 run(s) executed, 1 kept from before" in err
    assert summaries(study_dir) == before
    assert (report / "report.md").is_file()

    # A different plan in the same directory is refused without --overwrite.
    code, _, err = run_main(capsys, *tiny_profile(study_dir, repeats=2), "-q")
    assert code == 1
    one_error_line(err, "different study")
    assert summaries(study_dir) == before

    # `report` on the study directory rebuilds the study's report.
    for name in ("report.md", "report.html", "tables.tex"):
        (report / name).unlink()
    code, out, err = run_main(capsys, "report", str(study_dir), "-q")
    assert code == 0, err
    for name in ("report.md", "report.html", "tables.tex", "plots/stages.png"):
        assert (report / name).is_file(), name
    assert "profile" in (report / "report.md").read_text()
    assert summaries(study_dir) == before


def test_a_study_says_what_it_plans_then_compare_reads_two_of_its_runs(
    capsys, tmp_path, forked_launch
):
    """The study's lines on stderr (the plan, the time left after each run but the last),
    no report with --no-report, then ``compare`` on two of its runs."""
    study_dir = tmp_path / "prof"
    code, _, err = run_main(capsys, *tiny_profile(study_dir, repeats=2), "--no-report")
    assert code == 0, err
    lines = err.splitlines()
    assert lines[0] == "study profile: 2 runs planned (1 configuration x 2 repeats)"
    assert "; about " in lines[1] and "left for 1 run" in lines[1]
    assert "left" not in lines[2]  # the last run: nothing left to estimate
    assert [kind for kind, _ in forked_launch] == ["process", "process"]  # one per run
    assert not (study_dir / "report").exists()  # --no-report
    r1, r2 = study_dir / "runs" / "run" / "r1", study_dir / "runs" / "run" / "r2"
    cmp_dir = tmp_path / "cmp"
    code, out, err = run_main(capsys, "compare", str(r1), str(r2), "--out", str(cmp_dir))
    assert code == 0, err
    for name in ("compare.md", "compare.html", "compare.tex"):
        assert (cmp_dir / name).is_file(), name
    md = (cmp_dir / "compare.md").read_text()
    header = next(line for line in md.splitlines() if line.startswith("|"))
    assert [c.strip() for c in header.strip("|").split("|")] == ["", "r1", "r2"]
    assert "Comparison of 2 runs" in md
    assert "r1" in out and "r2" in out  # the table on the console too


def test_a_tiny_checkpointing_study_measures_memory_against_time(capsys, tmp_path):
    """Two policies on LeNet's three blocks: full keeps less for backward than none, the
    losses are the same, and the report says both with the figures behind them."""
    study_dir = tmp_path / "ckpt"
    argv = [
        "study", "checkpointing", "--workload", "digits", "--epochs", "1",
        "--max-steps-per-epoch", "8", "--timing-warmup", "2", "--repeats", "2", "--no-warmup",
        "--policies", "none,full", "--out", str(study_dir), "-q",
    ]  # fmt: skip
    code, _, err = run_main(capsys, *argv)
    assert code == 0, err
    study = json.loads((study_dir / "study.json").read_text())
    assert study["kind"] == "checkpointing" and study["status"] == "completed"
    assert study["base_config"]["workload"]["name"] == "digits"  # named: no default GPT
    runs = summaries(study_dir)
    mems = {k: json.loads(v[1])["memory"] for k, v in runs.items()}
    none, full = mems["none/r1"], mems["full/r1"]
    assert none["checkpointing"]["blocks"] == 0 and full["checkpointing"]["blocks"] == 3
    assert full["activations_bytes"] < none["activations_bytes"]
    assert full["model_states_bytes"] == none["model_states_bytes"]
    md = (study_dir / "report" / "report.md").read_text()
    assert "## Activation checkpointing" in md
    assert "full vs none: activations 0." in md and "first losses identical" in md
    assert (study_dir / "report" / "plots" / "checkpointing_frontier.png").is_file()


def test_dry_run_lists_the_plan_and_runs_nothing(capsys, tmp_path):
    out_dir = tmp_path / "never"
    code, out, err = run_main(
        capsys, "study", "precision", "--repeats", "2", "--dry-run", "--out", str(out_dir),
        "--threads", "2",
    )  # fmt: skip
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("study precision: ") and "runs planned" in lines[0]
    # Every run's threads are set explicitly: the study's core budget of 2 cores.
    assert "  fp32/warmup: runtime.precision=fp32, runtime.threads=2" in lines
    assert any(line.startswith("  tf32/r1: ") and "not applicable" in line for line in lines)
    assert len([line for line in lines if "/r2:" in line]) == 2  # fp32 and bf16 only
    assert not out_dir.exists() and not (tmp_path / "studies").exists()


def test_a_dry_run_marks_a_configuration_outside_the_core_budget(capsys, tmp_path):
    argv = ["study", "strategies", "--threads", "3", "--strategies", "single,ddp"]
    code, out, err = run_main(capsys, *argv, "--dry-run", "--repeats", "1")
    assert code == 0, err
    lines = {line.split(":")[0].strip(): line for line in out.splitlines()[1:]}
    assert lines["single/r1"].endswith("runtime.threads=3")
    assert lines["ddp/r1"].endswith(
        "runtime.threads=1  (not within the core budget of 3: compared in no finding)"
    )


def test_time_left_is_the_median_run_times_the_runs_remaining():
    from trainscope.studies.base import _time_left

    assert _time_left([1.0, 100.0, 3.0], [None] * 10) == "; about 30 s left for 10 runs"
    assert _time_left([60.0], [None] * 3) == "; about 3 min left for 3 runs"
    assert _time_left([1.0], []) == "" and _time_left([], [None]) == ""


def test_default_outputs_go_under_one_root(capsys, tmp_path, monkeypatch, forked_launch):
    """Without --out: runs, studies and comparisons under runs/ (or $TRAINSCOPE_RUNS)."""
    code, _, err = run_main(capsys, *tiny_profile(tmp_path / "x")[:-2], "-q", "--no-report")
    assert code == 0, err
    (study,) = (tmp_path / "runs" / "studies").iterdir()
    assert study.name.startswith("profile-")
    root = tmp_path / "elsewhere"
    monkeypatch.setenv("TRAINSCOPE_RUNS", str(root))
    assert run_main(capsys, "run", "--epochs", "1", "--max-steps-per-epoch", "2", "-q")[0] == 0
    (run_dir,) = root.iterdir()
    assert run_dir.name.startswith("digits-")
    code, _, err = run_main(capsys, "compare", str(run_dir), "-q")
    assert code == 0, err
    (comparison,) = root.glob("compare-*")  # a folder of its own, named as runs are
    assert (comparison / "compare.md").is_file()
