"""The lab's chapters made of several commands, each end to end at its smallest: the
commands run into the chapter's folder, a second lab run reruns none of them, and every
figure of the chapter's short answer is traced back to the records it links.

Two labs are made once per module and read by the tests: chapter 4 alone, and chapters
6, 11 and 12 (from ../shared/data) together, which share the lab's MNIST split. What is
tested is the chapters (the commands they run, their records, their text), not how the
processes they start begin, so neither lab starts a fresh interpreter:

* chapter 6's studies run each run in a process of its own: forked from the test process
  (tests/forked_launch.py);
* chapter 4 runs examples/dp_ddp/*.py: each run is forked from the test process and runs
  the script as ``__main__`` (:func:`forked_script_run`), its ranks (ddp.py's
  ``mp.spawn``) forked too. tests/examples/test_dp_ddp.py runs the scripts as a user
  does, in fresh interpreters.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import runpy
import shutil
import signal
import statistics
import subprocess
import sys
import traceback
import types
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

import pytest

from tests.conftest import scaled
from tests.forked_launch import ForkedProcess, forked_launches
from trainscope.cli import main
from trainscope.lab import chapter_dp, chapter_memory, chapter_runs


def _lab(out: Path, only: str, data: Path | None = None) -> dict[str, dict[str, object]]:
    argv = ["lab", "--quick", "--only", only, "--out", str(out), "-q"]
    assert main([*argv, *(["--data", str(data)] if data else [])]) == 0
    return json.loads((out / "lab.json").read_text())["chapters"]


def _short_answer(out: Path, number: int) -> str:
    md = (out / "report" / "report.md").read_text()
    chapter = md.split(f"\n## {number}. ", 1)[1].split("\n## ", 1)[0]
    return chapter.split("### Short answer", 1)[1].split("### The measurement", 1)[0]


def _mtimes(folder: Path) -> dict[Path, int]:
    """The records a chapter's commands wrote (chapter.json, its state, is rewritten)."""
    return {p: p.stat().st_mtime_ns for p in folder.rglob("*.json") if p.name != "chapter.json"}


def _script_child(argv: Sequence[str], log: IO[Any], env: dict[str, str], cwd: Path) -> None:
    """In a forked child: become ``python SCRIPT ARGS`` writing to ``log``, then exit."""
    code = 1
    try:
        os.setsid()  # its own group: a timeout ends ddp.py's ranks with it
        for sig in (signal.SIGTERM, signal.SIGALRM):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        # The test process's sys.stdout may be pytest's capture, not fd 1: the script's
        # prints go to the log, as a fresh interpreter's would.
        sys.stdout = open(1, "w", buffering=1, closefd=False)
        sys.stderr = open(2, "w", buffering=1, closefd=False)
        os.chdir(cwd)
        os.environ.clear()
        os.environ.update(env)
        sys.argv = list(argv[1:])
        import torch.multiprocessing as tmp

        def spawn(fn: Any, args: tuple = (), nprocs: int = 1, join: bool = True,
                  daemon: bool = False, start_method: str = "spawn") -> Any:  # fmt: skip
            # ddp.py's ranks: forked as well (spawn would start fresh interpreters).
            return tmp.start_processes(fn, args, nprocs, join, daemon, start_method="fork")

        tmp.spawn = spawn
        runpy.run_path(str(argv[1]), run_name="__main__")
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if not isinstance(e.code, (int, type(None))):
            print(e.code, file=sys.stderr)  # what the interpreter prints for exit("text")
    except BaseException:
        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def forked_script_run(argv: Sequence[str], **kwargs: Any) -> subprocess.CompletedProcess[Any]:
    """``subprocess.run`` for chapter 4's ``python SCRIPT ...``: the script run as
    ``__main__`` in a process forked from this one (torch imported already), in the
    environment, folder and log the chapter gives; any other command is run as asked."""
    if len(argv) < 2 or argv[0] != sys.executable or not str(argv[1]).endswith(".py"):
        return subprocess.run(argv, **kwargs)
    # What the scripts import, imported once here so that each fork has it: ddp.py's
    # torch.distributed, and torch._dynamo, which every optimizer's first step imports.
    import torch._dynamo  # noqa: F401
    import torch.distributed  # noqa: F401

    # Forked as tests/forked_launch.py forks (from a thread of its own, the heap frozen):
    # a child forked from a thread that ran a 2-thread region would wait forever for
    # libgomp's threads as soon as the script asks for 2 threads, as single.py and dp.py do.
    proc = ForkedProcess(_script_child, argv, kwargs["stdout"], kwargs["env"], kwargs["cwd"])
    # The chapter allows a run of its full budget 600 s; one of 8 steps, forked, takes
    # well under a second.
    timeout = min(kwargs["timeout"], scaled(120))
    try:
        return subprocess.CompletedProcess(list(argv), proc.wait(timeout))
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise subprocess.TimeoutExpired(list(argv), timeout) from None


def small_dp_chapter(patch: pytest.MonkeyPatch) -> None:
    """Chapter 4 under --quick at 8 steps a run and 2 repeats, its script runs forked
    (:func:`forked_script_run`)."""
    patch.setitem(chapter_dp.BUDGET, True, ("8", 2))
    shim = types.SimpleNamespace(**{**vars(subprocess), "run": forked_script_run})
    patch.setattr(chapter_dp, "subprocess", shim)


@pytest.fixture(scope="module")
def dp_lab(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``trainscope lab --quick --only 4`` of :func:`small_dp_chapter`, made once. Read
    only: tests copy it."""
    out = tmp_path_factory.mktemp("dp-lab") / "lab"
    with pytest.MonkeyPatch.context() as patch:
        small_dp_chapter(patch)
        assert _lab(out, "4")["4"]["status"] == "measured"
    return out


@pytest.fixture(scope="module")
def data_lab(tmp_path_factory: pytest.TempPathFactory, shared_data: Path) -> Path:
    """``trainscope lab --quick --only 6,11,12 --data ../shared/data`` at smaller budgets,
    made once (chapter 6's process per run forked). Read only."""
    out = tmp_path_factory.mktemp("data-lab") / "lab"
    with pytest.MonkeyPatch.context() as patch, forked_launches():
        patch.setitem(chapter_runs.PROFILE, True, ("20", "1"))
        patch.setitem(chapter_runs.APPLY, True, ("8", "2"))
        patch.setitem(chapter_runs.INT8_EPOCHS, True, "1")
        _lab(out, "6,11,12", shared_data)
    return out


def _state(lab: Path, number: int) -> dict[str, object]:
    return json.loads((lab / "lab.json").read_text())["chapters"][str(number)]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_dp_ddp_chapter_runs_the_example_scripts_and_shows_their_diffs(
    tmp_path: Path, dp_lab: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    small_dp_chapter(monkeypatch)  # the budget the lab was made with, continued below
    out = shutil.copytree(dp_lab, tmp_path / "lab")  # the second lab run below writes
    state = _state(out, 4)
    assert state["status"] == "measured"
    folder = out / Path(str(state["study_dir"])).relative_to(dp_lab)
    records = {s: sorted(folder.glob(f"{s}-r*.json")) for s in chapter_dp.SCRIPTS}
    assert all(len(r) == 2 for r in records.values())
    md = (out / "report" / "report.md").read_text()
    assert "+++ ddp.py" in md and "+    model = DDP(" in md and "+++ dp.py" in md
    # Every step time in the short answer is a median of the records' own medians.
    medians = {
        s: statistics.median(
            statistics.median(json.loads(p.read_text())["step_times_s"]) * 1e3 for p in paths
        )
        for s, paths in records.items()
    }
    # Three significant digits: 100 ms and more have no decimals.
    quoted = re.findall(r"(\d+(?:\.\d+)?) ms vs (\d+(?:\.\d+)?) ms", _short_answer(out, 4))
    assert len(quoted) == 2
    for (a, b), s in zip(quoted, ("dp", "ddp")):
        assert float(a) == pytest.approx(medians[s], rel=5e-3)
        assert float(b) == pytest.approx(medians["single"], rel=5e-3)
    # Continued: nothing reruns.
    stamps = _mtimes(folder)
    _lab(out, "4")
    assert _mtimes(folder) == stamps


@pytest.mark.timeout(120)
def test_memory_chapter_estimates_gpt2_xl_without_any_data(tmp_path: Path) -> None:
    """GPT-2 XL's estimate needs no data: chapter 11 is written without --data, and says
    that the small GPT measured beside it needs Tiny Shakespeare."""
    out = tmp_path / "lab"
    assert _lab(out, "11")["11"]["status"] == "measured"
    answer = _short_answer(out, 11)
    assert "Estimate: GPT-2 XL's 1,557,611,200 parameters" in answer
    assert "Measured here" not in answer
    md = (out / "report" / "report.md").read_text()
    assert "needs tinyshakespeare/ under --data: not measured in this lab" in md


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_memory_chapter_estimates_gpt2_xl_and_measures_a_small_gpt(data_lab: Path) -> None:
    out = data_lab
    state = _state(out, 11)
    assert state["status"] == "measured"
    folder = Path(str(state["study_dir"]))
    short = _short_answer(out, 11)
    assert "Estimate:" in short and "Measured here" in short
    # Every size in the short answer is one of the JSON answers' byte counts, formatted.
    counts: set[str] = set()

    def walk(x: object) -> None:
        if isinstance(x, dict):
            for v in x.values():
                walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)
        elif isinstance(x, int) and not isinstance(x, bool):
            counts.add(chapter_memory.gb(x))

    for p in folder.glob("*.json"):
        walk(json.loads(p.read_text()))
    sizes = re.findall(r"\d+(?:\.\d+)? (?:GB|MB|kB)", short)
    assert len(sizes) >= 10
    # Sums of two counts (weights + allowances) are the one derived figure: check the rest.
    derived = {chapter_memory.gb(sum(
        json.loads((folder / "gpt2-xl-none.json").read_text())["shardings"]["ddp"][k]
        for k in ("communication", "temporaries")))}  # fmt: skip
    assert set(sizes) <= counts | derived
    assert "1,557,611,200" in short


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_int8_chapter_trains_then_quantizes_and_quotes_quantize_json(data_lab: Path) -> None:
    pytest.importorskip("torchao")
    out = data_lab
    state = _state(out, 12)
    assert state["status"] == "measured"
    quant = json.loads((Path(str(state["study_dir"])) / "run" / "quantize.json").read_text())
    short = _short_answer(out, 12)
    for split in ("fp32", "int8"):
        assert f"{100 * quant[split]['accuracy']:.2f}%" in short
    sizes = quant["bytes"]
    assert f"{sizes['int8']['model'] / sizes['fp32']['model']:.2f}x" in short


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_time_chapter_profiles_asks_the_doctor_and_remeasures_its_fix(data_lab: Path) -> None:
    out = data_lab
    state = _state(out, 6)
    assert state["status"] == "measured"
    folder = Path(str(state["study_dir"]))
    findings = json.loads((folder / "doctor.json").read_text())
    short = _short_answer(out, 6)
    assert "Biggest stage" in short
    if findings:  # the doctor's top problem is quoted as it wrote it, and re-measured
        assert findings[0]["problem"].split(":")[0] in short
        assert (folder / "doctor" / "study.json").is_file() == any(f.get("fix") for f in findings)
    commands = json.loads((folder / "chapter.json").read_text())["commands"]
    assert commands[1].startswith("trainscope study profile")
