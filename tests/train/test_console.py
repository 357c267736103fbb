"""The run console prints names, notes and summaries from the config literally: rich
markup is shown as text and control characters as escapes (no torch needed)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from trainscope.train.console import RunConsole

ANSI = "\x1b]0;pwned\x07\x1b[2J\r\x08\x9b"
MARKUP = "[bold red]loud[/]"
CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f]")


@pytest.fixture
def plain_console(monkeypatch: pytest.MonkeyPatch) -> None:
    """rich writing to a captured stream: no styling of its own, lines wide enough."""
    for var in ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("COLUMNS", "400")


def test_run_console_prints_record_text_literally(
    plain_console: None, capsys: pytest.CaptureFixture[str]
) -> None:
    summary = {
        "workload": f"{MARKUP}{ANSI}",
        "device": "cpu",
        "device_name": "[link=https://evil]click[/link]",
        "precision": "fp32",
        "batch_size": 8,
        "num_workers": 0,
        "status": "completed",
        "model": f"net{ANSI}",
        "per_class_accuracy": {f"{MARKUP}\x1b[31m": 0.5},
    }
    console = RunConsole(enabled=True, progress=False)
    console.start(Path("runs") / f"r\n{MARKUP}", summary)
    console.note(f"note {MARKUP}{ANSI}\nsecond line")
    console.finish(summary)
    err = capsys.readouterr().err
    assert not CONTROL.search(err), repr(CONTROL.search(err))
    assert err.startswith(f"trainscope {MARKUP}\\x1b]0;pwned\\x07")
    assert "[link=https://evil]click[/link]" in err
    assert f"runs/r\\n{MARKUP}" in err  # the run directory stays on its line
    assert f"note {MARKUP}\\x1b]0;pwned" in err and "\nsecond line" in err
    assert f"{MARKUP}\\x1b[31m" in err  # a per-class table cell


def test_end_of_run_shows_versions_and_how_to_report(
    plain_console: None, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The summary shows the torch version (from env.json, not a dash) and ends with where
    the record is and the command that makes its report (the name quoted for a shell)."""
    import torch

    from trainscope.config import from_dict
    from trainscope.train.run import run

    out = tmp_path / "my run"
    cfg = from_dict({"out": str(out), "train": {"epochs": 1, "max_steps_per_epoch": 2}})
    run(cfg, RunConsole(enabled=True, progress=False))
    err = capsys.readouterr().err
    torch_row = next(line for line in err.splitlines() if line.startswith("torch "))
    assert torch_row.split() == ["torch", torch.__version__]
    assert err.rstrip().splitlines()[-1] == f"saved to {out} - trainscope report '{out}'"


def test_piped_output_is_plain_whole_and_without_blank_lines(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """To a pipe or a file (not a terminal): no box drawing, no line wrapped at 80
    columns or cut, no blank lines from progress redraws, no trailing blanks."""
    from trainscope.config import from_dict
    from trainscope.train.run import run

    for var in ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "COLUMNS"):
        monkeypatch.delenv(var, raising=False)
    out = tmp_path / ("a-rather-long-run-directory-name-" * 3).rstrip("-")
    cfg = from_dict({"out": str(out), "train": {"epochs": 2, "max_steps_per_epoch": 2}})
    run(cfg, RunConsole(enabled=True, progress=True))
    lines = capsys.readouterr().err.splitlines()
    assert lines and all(line.strip() for line in lines)
    assert all(line == line.rstrip() for line in lines)
    assert not any(set(line) & set("│┃━─┏┗") for line in lines)
    assert any(line.startswith("Run overview: ") and line.endswith("bytes).") for line in lines)
    assert lines[0].endswith(f"-> {out}")  # the start line, whole
    assert any(re.fullmatch(r"Status\s+completed", line) for line in lines)


def _records(n: int, loss: float = 3.25) -> list[dict]:
    return [{"batch_size": 64, "loss": loss} for _ in range(n)]


def test_a_long_run_says_how_long_and_piped_prints_progress_lines(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """gpt-char's default preset on a CPU: ~15.7k steps an epoch at seconds a step. Once
    the first steps are timed the run says how long it will take; piped (no progress
    bar), a progress line follows at a steady interval, from before any step is timed
    until the epoch ends, and none after."""
    import time

    from trainscope.train.console import RunConsole

    console = RunConsole(enabled=True, progress=True, progress_interval_s=0.05)
    assert console.progress_lines and not console.show_progress  # stderr is captured
    console.epoch_start(1, 2, 15717)
    time.sleep(0.12)  # the first progress lines, before any step is timed
    console.steps(_records(2))  # 2 steps in ~0.12 s: ~30,000 steps take ~30 min
    time.sleep(0.25)
    console.epoch_end(
        {"epoch": 1, "train_loss": 3.2, "val_accuracy": None, "duration_s": 1.0,
         "samples_per_s": 128.0}
    )  # fmt: skip
    err = capsys.readouterr().err
    time.sleep(0.12)
    assert capsys.readouterr().err == ""  # the epoch's lines stopped with it
    lines = err.splitlines()
    (estimate,) = [x for x in lines if x.startswith("this run:")]
    assert estimate.startswith("this run: 31,434 steps (2 epochs x 15,717), about ")
    assert "at the current rate" in estimate and "--max-steps-per-epoch" in estimate
    assert " min " in estimate or " h " in estimate
    waiting = [x for x in lines if "no step timed yet" in x]
    going = [x for x in lines if x.startswith("epoch 1/2: step 2/15,717, loss 3.2500, ")]
    assert waiting and going, lines
    assert "about" in going[0] and "left" in going[0]
    # The rate is that of the steps read: time passing before the next ones are read
    # does not make the run look slower line by line.
    assert len(going) >= 2 and len({x.split(", ")[2] for x in going}) == 1, going
    assert lines.index(waiting[-1]) < lines.index(estimate) < lines.index(going[0])
    assert lines[-1].startswith("epoch 1: train loss 3.2000")


def test_a_short_run_gets_no_estimate_and_a_terminal_no_progress_lines(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from trainscope.train.console import RunConsole, fmt_duration

    console = RunConsole(enabled=True, progress=False, progress_interval_s=0.01)
    assert not console.progress_lines  # --no-progress: no lines either
    console.epoch_start(1, 1, 40)
    console.steps(_records(10))
    console.stop()
    assert capsys.readouterr().err == ""
    assert [fmt_duration(s) for s in (42, 600, 3 * 3600 + 1200, 7200, 3 * 86400 + 3600)] == [
        "42 s",
        "10 min",
        "3 h 20 min",
        "2 h",
        "3 d 1 h",
    ]
