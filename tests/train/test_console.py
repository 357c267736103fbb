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
