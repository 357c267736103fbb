"""Every command that writes deletes only what trainscope wrote: ``run --overwrite``,
``study --overwrite``, ``report [--out]`` and ``compare --out``, never a user's file,
never through a symbolic link, never on a config file's say-so.

Everything runs in-process. The readers start from one tiny run trained once per test
process (``built_once``, the same flags as the other reader tests) and one report of it
built once per module (:func:`reported`); each test gets its own copy. The live-run test
holds the run directory from a second process, forked from this one (a process of its
own, so its lock is another process's; nothing here depends on how it started); the
study's process per run is forked too (``forked_launch``). The reports' figures are
built but written as placeholders (tests/reports/cheap.py): which files a command
writes, keeps and deletes is tested here, not what the figures look like.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from pathlib import Path

import pytest
import yaml

from tests.conftest import scaled
from tests.forked_launch import fork_trainscope
from tests.reports.cheap import unsaved_figures
from trainscope.cli import main

pytestmark = [pytest.mark.timeout(120), pytest.mark.usefixtures("isolated_cli")]

TINY = ["--epochs", "1", "--max-steps-per-epoch", "2", "-q", "--no-progress"]
# The tiny run the reader tests share (built_once): the same flags in every file that
# reads one, so that it is trained once per test process.
READER_RUN = ("run", *TINY)


@pytest.fixture(autouse=True)
def cheap_figures(monkeypatch: pytest.MonkeyPatch) -> None:
    unsaved_figures(monkeypatch)


@pytest.fixture
def trained(built_once, tmp_path: Path) -> Path:
    """This test's own copy of a completed tiny run (trainscope's folder, marker and all)."""
    return built_once.copy(tmp_path / "run", *READER_RUN)


@pytest.fixture(scope="module")
def reported(built_once, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny run with its report built (``report RUN``), once per module: never handed
    out itself, each test copies it (:func:`with_report`)."""
    run = built_once.copy(tmp_path_factory.mktemp("reported") / "run", *READER_RUN)
    with pytest.MonkeyPatch.context() as patch:
        unsaved_figures(patch)
        assert main(["report", str(run), "-q"]) == 0
    return run


@pytest.fixture
def with_report(reported: Path, tmp_path: Path) -> Path:
    """This test's own copy of the tiny run and its report folder."""
    return Path(shutil.copytree(reported, tmp_path / "run", symlinks=True))


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    """Run the CLI in-process: (exit code, stderr)."""
    try:
        code = main(list(argv))
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    return code, capsys.readouterr().err


def tree(root: Path) -> dict[str, str]:
    """Every file under ``root`` (links not followed) with its text."""
    out = {}
    for base, _, names in os.walk(root):
        for n in names:
            p = Path(base) / n
            out[str(p.relative_to(root))] = "<link>" if p.is_symlink() else p.read_text()
    return out


def precious(root: Path) -> Path:
    """A folder of the user's own, with files in it."""
    root.mkdir(parents=True)
    (root / "paper.tex").write_text("\\documentclass{article} years of work")
    (root / "logs").mkdir()
    (root / "logs" / "wandb-run.log").write_text("an earlier experiment")
    return root


def one_line(err: str, *needles: str) -> None:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    assert "internal error" not in lines[0] and "Traceback" not in err
    for n in needles:
        assert n in lines[0], (n, lines[0])


# ----------------------------------------------------------------------- run --overwrite


def test_overwrite_refuses_a_folder_trainscope_did_not_write(capsys, tmp_path):
    project = precious(tmp_path / "project")
    (project / "report").mkdir()
    (project / "report" / "paper.tex").write_text("mine")
    (project / "wandb").mkdir()
    (project / "wandb" / "run.log").write_text("mine")
    (project / "summary.json").write_text('{"status": "mine"}')
    before = tree(project)
    code, err = cli(capsys, "run", "--out", str(project), "--overwrite", *TINY)
    assert code != 0
    one_line(err, "no trainscope marker")
    assert tree(project) == before


def test_out_dot_in_a_project_folder_is_refused(capsys, tmp_path, monkeypatch):
    project = precious(tmp_path / "project")
    monkeypatch.chdir(project)
    before = tree(project)
    code, err = cli(capsys, "run", "--out", ".", "--overwrite", *TINY)
    assert code != 0
    one_line(err, "no trainscope marker")
    assert tree(project) == before


def test_overwrite_keeps_user_files_and_never_follows_links(capsys, tmp_path, with_report):
    out = with_report  # a run, then `report` of it
    # The user adds their own work inside the run directory and its report folder, and
    # swaps the tracking folders for links to folders of their own.
    (out / "notes.md").write_text("mine")
    (out / "report" / "paper.tex").write_text("mine")
    target = precious(tmp_path / "elsewhere")
    before = tree(target)
    os.symlink(target, out / "wandb")
    os.symlink(target, out / "tensorboard")
    os.symlink(target, out / "ranks")

    code, err = cli(capsys, "run", "--out", str(out), "--overwrite", *TINY)
    assert code == 0, err
    assert tree(target) == before
    assert (out / "notes.md").read_text() == "mine"
    assert (out / "report" / "paper.tex").read_text() == "mine"
    assert not (out / "report" / "report.md").exists()  # the stale report went
    assert json.loads((out / "summary.json").read_text())["status"] == "completed"


def test_config_file_cannot_switch_deletion_on(capsys, tmp_path, trained):
    out = trained
    (out / "keep.txt").write_text("mine")
    shared = tmp_path / "shared.yaml"
    shared.write_text(yaml.safe_dump({"out": str(out), "overwrite": True}))
    code, err = cli(capsys, "run", "--config", str(shared), *TINY)
    assert code == 2
    one_line(err, "only the --overwrite flag")
    # out from the file and --overwrite typed: the directory to replace is not the file's.
    shared.write_text(yaml.safe_dump({"out": str(out)}))
    code, err = cli(capsys, "run", "--config", str(shared), "--overwrite", *TINY)
    assert code == 2
    one_line(err, "--overwrite needs --out on the command line")
    assert (out / "keep.txt").exists() and (out / "config.yaml").exists()


def test_a_second_run_into_a_live_run_directory_is_refused(capsys, tmp_path):
    out = tmp_path / "run"
    # Another trainscope process, training for long enough to be caught at it.
    argv = ["run", "--out", str(out), "--epochs", "500", "--log-every", "1", "-q", "--no-progress"]
    proc = fork_trainscope(argv, dict(os.environ))
    try:
        deadline = time.monotonic() + scaled(30)
        while (
            not (out / "metrics.jsonl").is_file()
            or "step" not in (out / "metrics.jsonl").read_text()
        ):
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.02)
        code, err = cli(capsys, "run", "--out", str(out), "--overwrite", *TINY)
        assert code != 0
        one_line(err, "in use by another trainscope process")
        assert json.loads((out / "summary.json").read_text())["status"] == "running"
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=scaled(30))
    # Its lock went with it: now the directory can be replaced.
    assert cli(capsys, "run", "--out", str(out), "--overwrite", *TINY)[0] == 0


# ---------------------------------------------------------- report, study and compare


def test_report_out_refuses_a_user_folder_and_keeps_user_files(capsys, tmp_path, with_report):
    run = with_report  # a run, then `report` of it
    mine = precious(tmp_path / "mine")
    (mine / "plots").mkdir()
    (mine / "plots" / "figure1.png").write_text("mine")
    before = tree(mine)
    code, err = cli(capsys, "report", str(run), "--out", str(mine))
    assert code != 0
    one_line(err, "no trainscope marker")
    assert tree(mine) == before
    # A report folder trainscope made, rebuilt: its own files replaced, the user's kept.
    (run / "report" / "plots" / "my-figure.png").write_text("mine")
    for _ in range(3):  # never listed as trainscope's, so never removed, however often
        assert cli(capsys, "report", str(run), "-q")[0] == 0
    assert (run / "report" / "plots" / "my-figure.png").read_text() == "mine"
    assert (run / "report" / "plots" / "stages.png").is_file()


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` (links not followed, a link shown as its target)."""
    out = {}
    for base, dirs, names in os.walk(root):
        for n in names + [d for d in dirs if (Path(base) / d).is_symlink()]:
            p = Path(base) / n
            rel = str(p.relative_to(root))
            out[rel] = f"-> {os.readlink(p)}".encode() if p.is_symlink() else p.read_bytes()
    return out


def test_report_never_writes_through_a_linked_plots_folder(capsys, tmp_path, with_report):
    run = with_report  # a run, then `report` of it
    # The user swaps the report's plots/ for a link to a folder of their own, holding a
    # figure with the very name a report draws.
    mine = precious(tmp_path / "figures")
    (mine / "stages.png").write_text("my own figure")
    for f in (run / "report" / "plots").iterdir():
        f.unlink()
    (run / "report" / "plots").rmdir()
    os.symlink(mine, run / "report" / "plots")
    before = snapshot(tmp_path)
    code, err = cli(capsys, "report", str(run), "-q")
    assert code != 0
    one_line(err, f"{run / 'report' / 'plots'} is a symbolic link", "remove the link")
    assert (mine / "stages.png").read_text() == "my own figure"
    assert snapshot(tmp_path) == before  # nothing written anywhere, nothing cleared
    # With the link gone, the report is built again in a folder of its own.
    os.unlink(run / "report" / "plots")
    assert cli(capsys, "report", str(run), "-q")[0] == 0
    assert (run / "report" / "plots" / "stages.png").is_file()
    assert sorted(os.listdir(mine)) == ["logs", "paper.tex", "stages.png"]


def test_compare_out_refuses_a_user_folder(capsys, tmp_path, trained):
    run = trained
    mine = precious(tmp_path / "compare")
    (mine / "compare.md").write_text("my own comparison")
    before = tree(mine)
    code, err = cli(capsys, "compare", str(run), str(run), "--out", str(mine), "-q")
    assert code != 0
    one_line(err, "no trainscope marker")
    assert tree(mine) == before
    assert cli(capsys, "compare", str(run), str(run), "--out", str(tmp_path / "c2"), "-q")[0] == 0
    assert cli(capsys, "compare", str(run), str(run), "--out", str(tmp_path / "c2"), "-q")[0] == 0


@pytest.mark.slow
def test_study_overwrite_keeps_a_user_plots_folder(capsys, tmp_path, forked_launch):
    study = tmp_path / "study"
    args = [
        "study",
        "precision",
        "--precisions",
        "fp32",
        "--repeats",
        "1",
        "--no-warmup",
        "--epochs",
        "1",
        "--max-steps-per-epoch",
        "2",
        "-q",
        "--out",
        str(study),
    ]
    assert cli(capsys, *args)[0] == 0
    (study / "report" / "plots" / "my-plot.svg").write_text("mine")
    (study / "plots").mkdir()
    (study / "plots" / "mine.png").write_text("mine")
    assert cli(capsys, *args, "--overwrite")[0] == 0
    assert cli(capsys, *args, "--overwrite")[0] == 0
    assert (study / "report" / "plots" / "my-plot.svg").read_text() == "mine"
    assert (study / "plots" / "mine.png").read_text() == "mine"
    assert json.loads((study / "study.json").read_text())["status"] == "completed"


def test_study_refuses_a_user_folder(capsys, tmp_path):
    mine = precious(tmp_path / "mine")
    before = tree(mine)
    for extra in ([], ["--overwrite"]):
        code, err = cli(
            capsys, "study", "precision", "--precisions", "fp32", "--out", str(mine), "-q", *extra
        )
        assert code != 0
        one_line(err, "no trainscope marker")
    assert tree(mine) == before


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores file permissions")
def test_read_only_out_is_one_line_for_every_writing_command(capsys, tmp_path, trained):
    run = trained
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        for argv in (
            ["report", str(run), "--out", str(ro / "rep")],
            ["compare", str(run), "--out", str(ro / "cmp")],
            ["study", "precision", "--precisions", "fp32", "--out", str(ro / "st")],
        ):
            code, err = cli(capsys, *argv, "-q")
            assert code != 0, argv
            one_line(err, "not writable")
    finally:
        ro.chmod(0o700)


def test_read_only_out_as_root_is_refused_by_the_file_system_too(capsys, tmp_path, trained):
    """As root, permissions do not stop a write; a path under a regular file does."""
    run = trained
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    for argv in (
        ["report", str(run), "--out", str(blocker / "rep")],
        ["compare", str(run), "--out", str(blocker / "cmp")],
        ["study", "precision", "--precisions", "fp32", "--out", str(blocker / "st")],
    ):
        code, err = cli(capsys, *argv, "-q")
        assert code != 0, argv
        one_line(err, "not writable")
