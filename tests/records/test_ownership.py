"""The marker, the lock and the only code that deletes: trainscope removes what it wrote
and nothing else, never through a symbolic link."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import trainscope.analysis
import trainscope.render
import trainscope.reports
from trainscope.errors import TrainscopeError
from trainscope.records.ownership import LOCK, MARKER, claim_dir, clear_owned, read_marker
from trainscope.records.run_dir import reopen_run_dir


def _tree(root: Path) -> list[str]:
    """Everything under ``root`` but trainscope's own bookkeeping (marker, lock)."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.name not in (MARKER, LOCK))


def _outside(tmp_path: Path) -> Path:
    """A folder of the user's, outside every directory trainscope writes."""
    d = tmp_path / "precious"
    d.mkdir()
    (d / "thesis.tex").write_text("years of work")
    (d / "sub").mkdir()
    (d / "sub" / "data.csv").write_text("1,2,3")
    return d


def test_claim_marks_and_locks_a_new_directory(tmp_path):
    owned = claim_dir(tmp_path / "run", "run")
    marker = read_marker(tmp_path / "run")
    assert marker is not None and marker["kind"] == "run" and marker["files"] == []
    owned.record("config.yaml", dirs=("ranks",))
    assert read_marker(tmp_path / "run")["files"] == ["config.yaml"]
    assert read_marker(tmp_path / "run")["dirs"] == ["ranks"]
    owned.release()


def test_a_second_writer_is_refused_while_the_first_holds_the_lock(tmp_path):
    first = claim_dir(tmp_path / "run", "run")
    with pytest.raises(TrainscopeError, match=r"in use by another trainscope process \(pid"):
        claim_dir(tmp_path / "run", "run", existing="clear")
    first.release()
    claim_dir(tmp_path / "run", "run", existing="clear").release()


@pytest.mark.timeout(60)
def test_the_lock_goes_with_a_killed_process(tmp_path):
    """An OS lock, not a file: SIGKILL leaves nothing stale behind."""
    script = (
        "import sys, time\n"
        "from trainscope.records.ownership import claim_dir\n"
        f"o = claim_dir({str(tmp_path / 'run')!r}, 'run')\n"
        "o.record('metrics.jsonl')\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    with pytest.raises(TrainscopeError, match="in use"):
        claim_dir(tmp_path / "run", "run", existing="clear")
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    claim_dir(tmp_path / "run", "run", existing="clear").release()


@pytest.mark.parametrize("existing", ["refuse", "clear", "keep"])
def test_a_directory_without_a_marker_is_never_taken(tmp_path, existing):
    project = tmp_path / "project"
    project.mkdir()
    (project / "train.py").write_text("print('mine')")
    (project / "report").mkdir()
    (project / "report" / "paper.tex").write_text("mine")
    before = _tree(project)
    with pytest.raises(TrainscopeError, match="holds no trainscope marker"):
        claim_dir(project, "run", existing=existing)
    assert _tree(project) == before  # not even a lock file was left in it


def test_clear_removes_only_what_the_marker_lists(tmp_path):
    run = tmp_path / "run"
    owned = claim_dir(run, "run")
    owned.record("config.yaml", "metrics.jsonl", "tensorboard/events.1", dirs=("tensorboard",))
    for name in ("config.yaml", "metrics.jsonl"):
        (run / name).write_text("ours")
    (run / "tensorboard").mkdir()
    (run / "tensorboard" / "events.1").write_text("ours")
    (run / "tensorboard" / "notes.txt").write_text("the user's")
    (run / "mine.txt").write_text("the user's")
    (run / ".tmp-trainscope-summary.json.abc").write_text("a killed write")
    owned.release()
    clear_owned(run)
    assert _tree(run) == ["mine.txt", "tensorboard", "tensorboard/notes.txt"]
    marker = read_marker(run)  # still trainscope's, now listing nothing
    assert marker["kind"] == "run" and marker["files"] == [] and marker["dirs"] == []


def test_marked_subfolders_are_cleared_by_their_own_marker(tmp_path):
    """The report folder: its files go, the user's paper.tex beside them stays."""
    run = tmp_path / "run"
    claim_dir(run, "run").release()
    report = claim_dir(run / "report", "report", existing="clear", register=True)
    report.record("report.md", dirs=("plots",))
    (run / "report" / "report.md").write_text("ours")
    (run / "report" / "plots").mkdir()
    (run / "report" / "plots" / "a.png").write_text("ours")
    report.record_tree("plots", set())
    (run / "report" / "paper.tex").write_text("the user's")
    report.release()
    clear_owned(run)
    assert _tree(run) == ["report", "report/paper.tex"]
    assert read_marker(run / "report")["files"] == []  # the folder stays a report folder


def test_a_symlinked_folder_is_never_followed(tmp_path):
    outside = _outside(tmp_path)
    before = _tree(outside)
    run = tmp_path / "run"
    owned = claim_dir(run, "run")
    # The marker lists the folder and files in it, as if a sink had written there; then
    # the folder is replaced by a link to the user's own folder.
    owned.record("wandb/thesis.tex", "wandb/sub/data.csv", dirs=("wandb", "wandb/sub"))
    os.symlink(outside, run / "wandb")
    os.symlink(outside, run / "report")  # an unlisted link, looking like a marked folder
    owned.release()
    clear_owned(run)
    assert _tree(outside) == before
    assert (run / "wandb").is_symlink()


def test_a_listed_name_that_is_now_a_link_loses_only_the_link(tmp_path):
    outside = _outside(tmp_path)
    run = tmp_path / "run"
    owned = claim_dir(run, "run")
    owned.record("model.safetensors")
    os.symlink(outside / "thesis.tex", run / "model.safetensors")
    owned.release()
    clear_owned(run)
    assert not os.path.lexists(run / "model.safetensors")
    assert (outside / "thesis.tex").read_text() == "years of work"


def test_a_tampered_marker_cannot_reach_outside_its_directory(tmp_path):
    outside = _outside(tmp_path)
    before = _tree(outside)
    run = tmp_path / "runs" / "r"
    claim_dir(run, "run").release()
    marker = json.loads((run / MARKER).read_text())
    marker["files"] = [
        "../../precious/thesis.tex",
        str(outside / "sub" / "data.csv"),
        "./../x",
        "a/../../precious",
    ]
    marker["dirs"] = ["..", "../../precious/sub", "/"]
    (run / MARKER).write_text(json.dumps(marker))
    clear_owned(run)
    assert _tree(outside) == before


def test_an_out_that_is_a_link_is_not_cleared_through(tmp_path):
    real = tmp_path / "real"
    owned = claim_dir(real, "run")
    owned.record("config.yaml")
    (real / "config.yaml").write_text("ours")
    owned.release()
    os.symlink(real, tmp_path / "link")
    with pytest.raises(TrainscopeError, match="symbolic link"):
        claim_dir(tmp_path / "link", "run", existing="clear")
    assert (real / "config.yaml").exists()


def test_kinds_are_not_mixed(tmp_path):
    study = claim_dir(tmp_path / "s", "study")
    study.record("study.json")
    (tmp_path / "s" / "study.json").write_text("{}")
    study.release()
    with pytest.raises(TrainscopeError, match="is a trainscope study directory, not a run"):
        claim_dir(tmp_path / "s", "run", existing="clear")


def test_keep_resumes_a_marked_directory_untouched(tmp_path):
    study = claim_dir(tmp_path / "s", "study")
    study.record("study.json")
    (tmp_path / "s" / "study.json").write_text("{}")
    study.release()
    again = claim_dir(tmp_path / "s", "study", existing="keep")
    assert (tmp_path / "s" / "study.json").exists()
    assert again.files == ["study.json"]
    again.release()


def test_a_marked_directory_in_use_is_not_cleared_from_outside(tmp_path):
    run = tmp_path / "run"
    claim_dir(run, "run").release()
    report = claim_dir(run / "report", "report", existing="clear", register=True)
    with pytest.raises(TrainscopeError, match="in use"):
        clear_owned(run)
    report.release()


def test_no_marker_no_clear(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "x").write_text("")
    with pytest.raises(TrainscopeError, match="no trainscope marker"):
        clear_owned(tmp_path / "d")
    assert (tmp_path / "d" / "x").exists()


def test_a_bad_marker_is_no_marker(tmp_path):
    d = tmp_path / "d"
    d.mkdir()
    for text in ("[]", "{", '{"kind": "run", "files": "x"}', '{"kind": "nope"}', "\xff"):
        (d / MARKER).write_text(text, errors="surrogateescape")
        assert read_marker(d) is None
    os.unlink(d / MARKER)
    os.symlink(tmp_path / "elsewhere", d / MARKER)
    assert read_marker(d) is None


def test_lock_file_is_not_left_in_a_refused_directory(tmp_path):
    d = tmp_path / "d"
    d.mkdir()
    (d / "x").write_text("")
    with pytest.raises(TrainscopeError):
        claim_dir(d, "report", existing="clear")
    assert not (d / LOCK).exists() and not (d / MARKER).exists()


def test_a_run_saved_inside_a_run_is_not_cleared_with_it(tmp_path):
    """Only folders the marker lists are cleared: a run someone put inside another run
    (``--out exp/v2``, or a copy) is that run's, not the outer one's."""
    outer = claim_dir(tmp_path / "exp", "run")
    outer.record("summary.json")
    (tmp_path / "exp" / "summary.json").write_text("{}")
    outer.release()
    inner = claim_dir(tmp_path / "exp" / "v2", "run")
    inner.record("summary.json")
    (tmp_path / "exp" / "v2" / "summary.json").write_text('{"inner": true}')
    inner.release()
    claim_dir(tmp_path / "exp", "run", existing="clear").release()
    assert not (tmp_path / "exp" / "summary.json").exists()
    assert (tmp_path / "exp" / "v2" / "summary.json").read_text() == '{"inner": true}'


def test_record_tree_never_lists_what_was_there_before(tmp_path):
    owned = claim_dir(tmp_path / "run", "run")
    (tmp_path / "run" / "tensorboard").mkdir()
    (tmp_path / "run" / "tensorboard" / "mine.txt").write_text("the user's")
    before = owned.tree("tensorboard")
    (tmp_path / "run" / "tensorboard" / "events.1").write_text("the sink's")
    owned.record_tree("tensorboard", before)
    assert owned.files == ["tensorboard/events.1"]
    owned.release()
    for _ in range(2):  # cleared twice: the user's file is never listed, so never removed
        claim_dir(tmp_path / "run", "run", existing="clear").release()
    assert (tmp_path / "run" / "tensorboard" / "mine.txt").read_text() == "the user's"


def _legacy_run(root: Path) -> Path:
    root.mkdir(parents=True)
    (root / "summary.json").write_text(json.dumps({"schema_version": 1, "status": "failed"}))
    (root / "metrics.jsonl").write_text("")
    return root


def test_a_directory_written_before_markers_is_recognised(tmp_path):
    """A run, report or study an earlier trainscope wrote: only its own names, and the
    file only trainscope writes there, as it writes it."""
    run = _legacy_run(tmp_path / "old-run")
    claim_dir(run, "run", existing="clear").release()
    assert sorted(p.name for p in run.iterdir()) == [".trainscope", ".trainscope.lock"]

    report = tmp_path / "old-report"
    (report / "plots").mkdir(parents=True)
    (report / "tables.tex").write_text("% Tables of trainscope run 'x' (generated)\n")
    (report / "report.md").write_text("# old")
    (report / "plots" / "stages.png").write_bytes(b"png")
    claim_dir(report, "report", existing="clear").release()
    assert not (report / "report.md").exists() and not (report / "plots").exists()

    study = tmp_path / "old-study"
    (study / "runs" / "a" / "r1").mkdir(parents=True)
    (study / "study.json").write_text(json.dumps({"schema_version": 1, "status": "done"}))
    claim_dir(study, "study", existing="keep").release()  # resumed: nothing removed
    assert (study / "study.json").exists() and (study / "runs" / "a" / "r1").is_dir()


def _legacy_report(root: Path, *figures: str) -> Path:
    (root / "plots").mkdir(parents=True)
    (root / "tables.tex").write_text("% Tables of trainscope run 'x' (generated)\n")
    (root / "report.md").write_text("# old")
    for name in figures:
        (root / "plots" / name).write_bytes(b"png")
    return root


def test_a_users_figure_in_an_old_report_folder_is_never_taken(tmp_path):
    """A pre-marker report folder is trainscope's only when plots/ holds nothing but the
    figures trainscope draws: a figure of the user's there keeps the whole folder."""
    report = _legacy_report(tmp_path / "report", "stages.png", "loss.svg")
    (report / "plots" / "my-figure.png").write_bytes(b"the user's own")
    before = _tree(report)
    with pytest.raises(TrainscopeError, match="no trainscope marker"):
        claim_dir(report, "report", existing="clear")
    assert _tree(report) == before
    assert (report / "plots" / "my-figure.png").read_bytes() == b"the user's own"
    assert not (report / MARKER).exists()


def test_every_figure_a_report_draws_is_recognised_in_an_old_report_folder(tmp_path):
    from trainscope.records.ownership import REPORT_FIGURES

    # The names, as the report modules write them (plots / "loss.png"), not a second list.
    drawn = set()
    for package in (trainscope.reports, trainscope.analysis, trainscope.render):
        for module in Path(package.__file__).parent.glob("*.py"):
            text = module.read_text(encoding="utf-8")
            drawn |= set(re.findall(r'"(\w+)\.(?:png|svg)"', text))
    assert {"stages", "loss", "memory", "timeline", "precision_loss"} <= drawn
    assert drawn <= set(REPORT_FIGURES), drawn - set(REPORT_FIGURES)
    figures = [f"{name}.{ext}" for name in sorted(drawn) for ext in ("png", "svg")]
    report = _legacy_report(tmp_path / "report", *figures)
    claim_dir(report, "report", existing="clear").release()
    assert not (report / "plots").exists() and not (report / "report.md").exists()


@pytest.mark.parametrize(
    "files",
    [
        {"summary.json": '{"status": "mine"}'},  # not as trainscope writes it
        {"config.yaml": "lr: 1"},  # names alone prove nothing
        {"summary.json": '{"schema_version": 1, "status": "x"}', "paper.tex": "mine"},
    ],
)
def test_a_folder_that_only_resembles_an_old_run_is_not_taken(tmp_path, files):
    d = tmp_path / "d"
    d.mkdir()
    for name, text in files.items():
        (d / name).write_text(text)
    with pytest.raises(TrainscopeError, match="no trainscope marker"):
        claim_dir(d, "run", existing="clear")
    assert sorted(p.name for p in d.iterdir()) == sorted(files)


def test_a_lock_file_replaced_by_a_link_is_one_line(tmp_path):
    run = tmp_path / "run"
    claim_dir(run, "run").release()
    os.unlink(run / LOCK)
    os.symlink(tmp_path / "elsewhere", run / LOCK)
    with pytest.raises(TrainscopeError, match="is not writable"):
        claim_dir(run, "run", existing="clear")


def test_a_folder_it_writes_into_that_is_a_link_is_refused(tmp_path):
    """Writing never follows a link that deleting would not: a sub-folder trainscope is
    about to write into (or one above it) that is a link is refused in one line, before
    anything is written or listed, and the link and what it points to stay as they are."""
    outside = _outside(tmp_path)
    before = _tree(outside)
    run = tmp_path / "run"
    owned = claim_dir(run, "run")
    (run / "ranks").mkdir()
    os.symlink(outside, run / "ranks" / "rank1")
    cases = {
        "checkpoints": (["checkpoints/step-2/model.safetensors"], ["checkpoints/step-2"]),
        "tensorboard": ([], ["tensorboard"]),
        "wandb": (["wandb/run.log"], []),
        "ranks/rank1": ([], ["ranks", "ranks/rank1"]),
    }
    for link, (files, dirs) in cases.items():
        if "/" not in link:
            os.symlink(outside, run / link)
        with pytest.raises(TrainscopeError, match=f"{run / link} is a symbolic link") as e:
            owned.record(*files, dirs=dirs)
        assert "\n" not in str(e.value)
    assert read_marker(run)["files"] == [] and read_marker(run)["dirs"] == []
    # A run's or study's own report folder, claimed inside it, is no --out of the user's.
    os.symlink(outside, run / "report")
    with pytest.raises(TrainscopeError, match="report is a symbolic link"):
        claim_dir(run / "report", "report", existing="clear", register=True)
    owned.release()
    # A resumed run writes checkpoints: refused before it trains, and the lock is given back.
    (run / "summary.json").write_text('{"schema_version": 1, "status": "failed"}')
    with pytest.raises(TrainscopeError, match="checkpoints is a symbolic link"):
        reopen_run_dir(run)
    assert _tree(outside) == before
    assert all(os.path.islink(run / name) for name in [*cases, "report"])
    os.unlink(run / "checkpoints")
    reopen_run_dir(run).release()


def test_two_runs_into_one_folder_cannot_both_write_it(tmp_path, monkeypatch):
    """Run A is delayed just before it takes the lock; run B claims the folder, writes its
    record and lets go meanwhile. A must then find B's record and be refused: the lock is
    taken before the folder is checked, so there is no window between the two."""
    import threading

    from trainscope.records import ownership

    out = tmp_path / "shared"
    b_done = threading.Event()
    real_lock = ownership._lock

    def delayed_lock(path, what):
        if threading.current_thread().name == "run-a":
            assert b_done.wait(30)  # B starts and finishes inside A's claim
        return real_lock(path, what)

    monkeypatch.setattr(ownership, "_lock", delayed_lock)
    result: list[object] = []

    def run_a() -> None:
        try:
            with claim_dir(out, "run") as owned:
                result.append(owned)
        except TrainscopeError as e:
            result.append(e)

    a = threading.Thread(target=run_a, name="run-a")
    a.start()
    with claim_dir(out, "run") as b:  # B: claims, writes its record, releases
        b.record("summary.json")
        (out / "summary.json").write_text('{"status": "completed", "by": "B"}')
    b_done.set()
    a.join(30)
    assert len(result) == 1 and isinstance(result[0], TrainscopeError), result
    assert "already exists and is not empty" in str(result[0])
    assert json.loads((out / "summary.json").read_text())["by"] == "B"  # B's record alone
