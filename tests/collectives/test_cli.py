"""``trainscope collectives`` end to end: 2 gloo processes on 127.0.0.1 launched as
``trainscope run --nproc`` launches them, tiny sizes (1K, 4K) and 2 repeats; the tables,
the study directory (strict JSON, resumable, refused for another plan), the report; and
every refusal in one line before any process starts or any directory is made.

The sweep runs once per module and once more to resume, in-process, with the launch's two
ranks forked from the test process (tests/forked_launch.py): what the ranks measure and
record is tested here, not how torchrun starts them. ``trainscope collectives`` launched
for real (torchrun, fresh interpreters): tests/collectives/test_two_nodes.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.forked_launch import forked_launches
from trainscope.cli import main

pytestmark = pytest.mark.timeout(60)

TINY = [
    "collectives", "--nproc", "2", "--backend", "gloo", "--sizes", "1K,4K",
    "--repeats", "2", "--warmup", "1",
]  # fmt: skip
OPS = ("all_reduce", "broadcast", "reduce", "all_gather", "reduce_scatter", "all_to_all")


class Ended:
    """How a command ended: its exit code and what it (and its ranks) printed."""

    def __init__(self, returncode: int, stdout: str, stderr: str) -> None:
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


@contextlib.contextmanager
def fd_output(folder: Path) -> Iterator[list[str]]:
    """File descriptors 1 and 2 (and sys.stdout/err) sent to files in ``folder`` for the
    block, as a pipe would take them, so that forked ranks' output is caught too (a module
    fixture has no capfd); yields a list that then holds (stdout, stderr)."""
    got: list[str] = []
    sys.stdout.flush()
    sys.stderr.flush()
    saved, old = [os.dup(1), os.dup(2)], (sys.stdout, sys.stderr)
    paths = [folder / "stdout.txt", folder / "stderr.txt"]
    files = [open(p, "w+", encoding="utf-8") for p in paths]  # noqa: SIM115
    try:
        for fd, f in zip((1, 2), files, strict=True):
            os.dup2(f.fileno(), fd)
        sys.stdout, sys.stderr = files
        yield got
    finally:
        for f in files:
            f.flush()
        sys.stdout, sys.stderr = old
        for fd, s in zip((1, 2), saved, strict=True):
            os.dup2(s, fd)
            os.close(s)
        for f in files:
            f.close()
        got.extend(p.read_text(encoding="utf-8") for p in paths)


def trainscope(*args: str) -> Ended:
    """``trainscope ARGS`` in this process, the launch's ranks forked: how it ended.
    ``sys.argv`` is what the console script would see (the study records it)."""
    console = str(Path(sys.executable).parent / "trainscope")
    with (
        pytest.MonkeyPatch.context() as patch,
        forked_launches(),
        fd_output(Path(os.environ["TRAINSCOPE_TEST_OUTPUT"])) as got,
    ):
        patch.setattr(sys, "argv", [console, *args])
        try:
            code = main(list(args))
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 1
    return Ended(code, *got)


def strict_json(path: Path) -> dict[str, Any]:
    """The file as strict JSON: a NaN or Infinity in it fails the test."""

    def refuse(name: str) -> Any:
        raise AssertionError(f"{path} holds {name}: not strict JSON")

    return json.loads(path.read_text(encoding="utf-8"), parse_constant=refuse)


@pytest.fixture(scope="module")
def swept(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Ended]:
    """One real sweep: its study directory and how the command ended."""
    cwd = tmp_path_factory.mktemp("collectives")
    out = cwd / "sweep"
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(cwd)
        patch.setenv("TRAINSCOPE_TEST_OUTPUT", str(cwd))
        return out, trainscope(*TINY, "--out", str(out))


def test_the_sweep_prints_its_tables_and_records_every_result(swept) -> None:
    out, proc = swept
    assert proc.returncode == 0, proc.stderr
    stdout = proc.stdout
    for op in OPS:  # a before/after table per collective, then the bandwidth table
        assert f"\n{op}" in "\n" + stdout, op
    assert "Rank  Before  After" in stdout and "reduce_scatter + all_gather" in stdout
    assert "#wrong" in stdout and "\x1b" not in stdout  # piped: plain text, no colours
    assert "[12/12] all_to_all 4K" in proc.stderr
    data = strict_json(out / "study.json")
    assert data["kind"] == "collectives" and data["status"] == "completed"
    assert data["done"] == data["planned"] == 12
    opts = data["options"]
    assert opts["ops"] == list(OPS) and opts["sizes"] == [1024, 4096]
    assert (opts["world_size"], opts["backend"], opts["repeats"], opts["warmup"]) == (
        2,
        "gloo",
        2,
        1,
    )
    assert [(r["op"], r["size"]) for r in data["results"]] == [
        (op, s) for op in OPS for s in (1024, 4096)
    ]
    assert all(r["wrong"] == 0 and len(r["times_s"]) == 2 for r in data["results"])
    assert [e["op"] for e in data["examples"]] == list(OPS)
    assert all(e["ok"] for e in data["examples"]) and all(i["ok"] for i in data["identities"])
    assert len(data["machine"]["ranks"]) == 2
    fits = data["cost_model"]["fits"]  # the α–β fit is saved with the study, per backend
    assert data["cost_model"]["backend"] == "gloo"
    assert set(fits) == set(OPS)
    assert all(
        f["points"] == 2 and f["alpha_s"] >= 0 and f["beta_s_per_byte"] >= 0 for f in fits.values()
    )
    for name in ("report.md", "report.html", "tables.tex", "plots/collectives_busbw.png"):
        assert (out / "report" / name).is_file(), name


def test_the_report_rebuilds_with_every_table_and_the_plot(swept, tmp_path, capsys) -> None:
    from tests.reports.latex import latex_problems

    out, proc = swept
    assert proc.returncode == 0, proc.stderr
    assert main(["report", str(out), "--out", str(tmp_path / "r"), "-q"]) == 0
    md = (tmp_path / "r" / "report.md").read_text(encoding="utf-8")
    assert "What busbw means" in md and "2 processes" in md
    assert md.count("| Rank | Before") == 6 and md.count("#wrong") >= 6
    assert "trainscope collectives --nproc 2" in md  # how to run it again
    html = (tmp_path / "r" / "report.html").read_text(encoding="utf-8")
    assert "data:image/png;base64," in html
    tex = (tmp_path / "r" / "tables.tex").read_text(encoding="utf-8")
    assert latex_problems(tex) == []
    # examples, identities, one per op, the cost model
    assert tex.count("\\begin{table}") == 6 + 1 + 6 + 1
    assert "Cost model" in md and "tab:collectives-fit" in tex
    assert tex == (out / "report" / "tables.tex").read_text(encoding="utf-8")


@pytest.mark.slow  # pdflatex
def test_the_report_tables_compile(swept, tmp_path) -> None:
    """The sweep's tables.tex (the same as a rebuilt report's, above) compiles and fits."""
    from tests.reports.latex import compile_latex

    out, proc = swept
    assert proc.returncode == 0, proc.stderr
    compile_latex((out / "report" / "tables.tex").read_text(encoding="utf-8"), tmp_path)


def test_a_resumed_sweep_measures_only_what_is_missing(swept, tmp_path, monkeypatch) -> None:
    out, proc = swept
    assert proc.returncode == 0, proc.stderr
    again = tmp_path / "sweep"
    shutil.copytree(out, again)
    data = strict_json(again / "study.json")
    kept = data["results"][:-1]
    data["results"], data["status"] = kept, "interrupted"
    (again / "study.json").write_text(json.dumps(data), encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TRAINSCOPE_TEST_OUTPUT", str(tmp_path))
    proc = trainscope(*TINY, "--out", str(again), "--no-report")
    assert proc.returncode == 0, proc.stderr
    assert "11 kept from before" in proc.stderr and "[12/12] all_to_all 4K" in proc.stderr
    assert "[11/12]" not in proc.stderr  # nothing saved was measured again
    after = strict_json(again / "study.json")
    assert after["status"] == "completed" and after["done"] == 12
    assert after["results"][:11] == kept  # the same measurements, untouched
    assert (after["results"][11]["op"], after["results"][11]["size"]) == ("all_to_all", 4096)


def test_another_plan_in_the_same_folder_is_refused_in_one_line(swept, capsys) -> None:
    out, _ = swept
    before = (out / "study.json").read_bytes()
    other = [*TINY, "--sizes", "1K,8K", "--repeats", "3", "--out", str(out)]  # later wins
    code, err = run_main(capsys, *other)
    line = one_line(err)
    assert code == 1 and "another plan" in line
    assert "sizes 1K,8K here, 1K,4K there" in line and "repeats 3 here, 2 there" in line
    assert (out / "study.json").read_bytes() == before


def run_main(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    """The CLI in this process (a refusal launches nothing): (exit code, stderr)."""
    try:
        code = main(list(argv))
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    return code, capsys.readouterr().err


def one_line(err: str) -> str:
    """stderr is exactly one trainscope error line, no traceback."""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, lines
    assert lines[0].startswith("trainscope") and "error" in lines[0] and "internal" not in err
    return lines[0]


@pytest.mark.parametrize(
    ("flags", "needle"),
    [
        (["--sizes", "1K,x"], "bad message size 'x'"),
        (["--sizes", "0"], "is zero"),
        (["--sizes", "64K:1K"], "larger than"),
        (["--sizes", "4", "--ops", "all_gather"], "too small for all_gather"),
        (["--ops", "all_reduce,scatter"], "unknown scatter"),
        (["--nproc", "1"], "at least 2 processes"),
        (["--repeats", "0"], "--repeats"),
        (["--backend", "nccl"], "nccl"),
        (["--bandwidth", "1GB/s"], "--bandwidth only mean something with --predict"),
    ],
)
def test_bad_input_is_one_line_and_leaves_no_directory(capsys, tmp_path, flags, needle) -> None:
    if "nccl" in flags:
        import torch

        if torch.cuda.is_available():
            pytest.skip("nccl can run here")
    out = tmp_path / "never"
    code, err = run_main(capsys, "collectives", *flags, "--out", str(out))
    assert code in (1, 2) and needle in one_line(err)
    assert not out.exists()


def test_overwrite_never_touches_a_folder_trainscope_did_not_write(capsys, tmp_path) -> None:
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("the user's own")
    for extra in (["--overwrite"], []):
        code, err = run_main(capsys, *TINY, "--out", str(mine), *extra)
        assert code == 1 and "holds no trainscope marker" in one_line(err)
    assert sorted(p.name for p in mine.iterdir()) == ["notes.txt"]
    assert (mine / "notes.txt").read_text() == "the user's own"
    code, err = run_main(capsys, *TINY, "--overwrite")
    assert code == 2 and "--overwrite needs --out" in one_line(err)


def test_the_cli_and_report_copies_agree_with_the_library() -> None:
    """--help and the report are torch-free, so they hold copies of a few names and
    formatters of the torch-importing library modules: they must not drift apart."""
    from trainscope.collectives import bandwidth, semantics
    from trainscope.collectives.cli import OPS as CLI_OPS
    from trainscope.reports import collectives_tables as tables
    from trainscope.reports.study_collectives import OP_ORDER

    assert CLI_OPS == OP_ORDER == semantics.OPS == OPS
    for size in (1, 1000, 1024, 3 << 10, 1 << 20, 5 << 20, 1 << 30, 1536):
        assert tables.size_text(size) == bandwidth.format_size(size)
    for values in ([3], [1, 2], [0.5, 2.0], None, [27, 1, 0]):
        for letters in (False, True):
            assert tables.value_text(values, letters) == semantics.format_value(values, letters)


# ------------------------------------ the launcher's bookkeeping, with the launch faked


def fake_launch(
    monkeypatch: pytest.MonkeyPatch, *, wrong: int = 0, stop_after: int | None = None
) -> list[list[str]]:
    """Replace the torchrun launch by what rank 0 would leave in --out: the examples and
    every planned result (``wrong`` elements in the last), or a Ctrl-C after
    ``stop_after`` results. Returns the workers' command lines, as launched."""
    from trainscope.comm.record import Record, planned_keys
    from trainscope.records import launch_outcomes as outcomes

    calls: list[list[str]] = []

    def launch_command(d: Any, args: list[str]) -> outcomes.LaunchResult:
        calls.append(args)
        out = Path(next(a for a in args if a.startswith("--out=")).removeprefix("--out="))
        rec = Record(out)
        rec.save_checks([{"op": "all_reduce", "ok": True, "rows": []}], [], {})
        keys = planned_keys(rec.data["options"])
        for i, (op, size) in enumerate(keys):
            if stop_after is not None and i == stop_after:
                raise KeyboardInterrupt
            bad = wrong if i == len(keys) - 1 else 0
            rec.add({"op": op, "size": size, "bytes": size, "wrong": bad, "times_s": [1e-4]})
        return outcomes.LaunchResult(0)

    monkeypatch.setattr("trainscope.launch.launcher.launch_command", launch_command)
    return calls


def test_the_workers_get_the_plan_and_the_claimed_folder(capsys, tmp_path, monkeypatch):
    calls = fake_launch(monkeypatch)
    out = tmp_path / "s"
    code, err = run_main(capsys, *TINY, "--sizes", "1K:4K", "--out", str(out), "--no-report")
    assert code == 0, err
    (args,) = calls
    assert args[:2] == ["collectives", "--launched"]
    assert "--sizes=1024,2048,4096" in args and "--backend=gloo" in args
    assert f"--out={out.resolve()}" in args and "--repeats=2" in args
    assert strict_json(out / "study.json")["status"] == "completed"


def test_a_wrong_element_is_one_error_line_after_the_record_and_report(
    capsys, tmp_path, monkeypatch
):
    fake_launch(monkeypatch, wrong=3)
    out = tmp_path / "s"
    code, err = run_main(capsys, *TINY, "--out", str(out))
    lines = err.strip().splitlines()
    assert code == 1
    assert lines[-1] == (
        "trainscope: error: wrong results: all_to_all at 4K: 3 wrong element(s) "
        "(see the tables above and study.json)"
    )
    assert strict_json(out / "study.json")["status"] == "completed"  # the sweep is whole
    md = (out / "report" / "report.md").read_text(encoding="utf-8")
    assert "**Wrong results:** all_to_all at 4K" in md


def test_ctrl_c_records_interrupted_after_k_of_n(capsys, tmp_path, monkeypatch):
    fake_launch(monkeypatch, stop_after=5)
    out = tmp_path / "s"
    code, err = run_main(capsys, *TINY, "--out", str(out))
    assert code == 130
    assert err.strip().splitlines()[-2:] == [
        "collectives interrupted after 5 of 12 measurements; rerun the same command to continue",
        "trainscope: interrupted",
    ]
    data = strict_json(out / "study.json")
    assert (data["status"], data["done"], data["planned"]) == ("interrupted", 5, 12)
    assert not (out / "report").exists()
