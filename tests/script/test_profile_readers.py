"""What reads a run record reads a script's: the report, the doctor, compare; the lab
says what reads it instead."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.script.helpers import profile, summary, write
from trainscope.cli import main
from trainscope.injections import for_fix

# A step the optimizer dominates (many small tensors, no DataLoader): the doctor's
# optimizer-bound rule has something to say, as a code change.
SCRIPT = """
import torch
from torch import nn
model = nn.Sequential(*[nn.Linear(4, 4) for _ in range(24)])
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
for step in range(30):
    x = torch.randn(2, 4)
    model(x).sum().backward()
    opt.step()
    opt.zero_grad()
"""


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("readers")
    write(folder, "train.py", SCRIPT)
    assert main(["profile", "-q", "--out", str(folder / "run"), str(folder / "train.py")]) == 0
    return folder / "run"


def test_the_report_says_what_ran_and_what_other_holds(run: Path) -> None:
    assert main(["report", "-q", str(run)]) == 0
    md = (run / "report" / "report.md").read_text()
    assert "| Script " in md and "train.py" in md
    assert "for a script, the script's own code" in md
    assert "Test accuracy" not in md and "| Epochs " not in md
    # Its stages are named as a script's were measured: no loss in backward (the loss is
    # the script's own code), no "val + test" in evaluation.
    assert re.search(r"\| backward +\|", md)
    assert "loss + backward" not in md and "val + test" not in md
    assert (run / "report" / "trace.json").is_file() and (run / "report" / "tables.tex").is_file()
    trace = json.loads((run / "report" / "trace.json").read_text())
    names = {e.get("name") for e in trace["traceEvents"]}
    assert {"forward", "backward"} <= names


def test_the_doctor_states_fixes_as_inject_commands_or_code_changes(
    run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["doctor", "--json", str(run)]) == 0
    findings = json.loads(capsys.readouterr().out)
    with_fix = [f for f in findings if f["fix"]]
    assert with_fix, findings
    for f in with_fix:  # an --inject line where every fix flag has a key, else code
        if for_fix(f["fix"]) is not None:
            assert " --inject " in f["fix_command"] and f["fix_command"].endswith("train.py")
        else:
            assert f["fix_command"] == ""
            assert any("code change" in n for n in f["notes"])
    optimizer = next((f for f in findings if f["rule"] == "optimizer-bound"), None)
    if optimizer is not None:  # what the script's optimizer is, not a config default
        assert "adamw" in optimizer["problem"]
        assert "--inject optimizer_impl=fused" in optimizer["fix_command"]
    # --apply re-runs the command the record names: only when told to trust it
    assert main(["doctor", "--apply", str(run)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "--trust-record-code" in line and "train.py" in line


def test_compare_puts_a_script_run_beside_another(run: Path, tmp_path: Path) -> None:
    assert main(["compare", "-q", "--out", str(tmp_path / "cmp"), str(run), str(run)]) == 0
    text = (tmp_path / "cmp" / "compare.md").read_text()
    assert "Optimizer steps" in text and "0: AdamW 30" in text


def test_the_lab_says_what_reads_a_script_run(
    run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["lab", "--from", str(run), "--only", "1", "--out", str(tmp_path / "lab")])
    assert code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "a run of trainscope profile" in line and "trainscope report" in line
    assert not (tmp_path / "lab").exists()


def test_an_existing_run_folder_is_refused_unless_overwritten(
    tmp_path: Path,
) -> None:
    write(tmp_path, "train.py", "pass\n")
    out = tmp_path / "again"
    assert profile("-q", "--out", str(out), str(tmp_path / "train.py")) == 0
    assert profile("-q", "--out", str(out), str(tmp_path / "train.py")) == 1  # as run's
    assert profile("-q", "--overwrite", "--out", str(out), str(tmp_path / "train.py")) == 0
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("the user's")
    assert profile("-q", "--overwrite", "--out", str(tmp_path / "mine"),
                   str(tmp_path / "train.py")) == 1  # fmt: skip
    assert (tmp_path / "mine" / "notes.txt").read_text() == "the user's"
    assert summary(out)["status"] == "completed"


def test_the_doctor_weighs_a_stage_against_the_whole_script_step(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A script's own code inside its steps is part of its step time: an optimizer that
    dominates the model's compute but is a small part of the whole step is not called
    optimizer-bound (Lightning's closure bookkeeping was left out, and it was)."""
    write(tmp_path, "slow_own_code.py", SCRIPT.replace(
        "    opt.zero_grad()", "    opt.zero_grad()\n    time.sleep(0.03)  # its own code"
    ).replace("import torch", "import time\nimport torch", 1))  # fmt: skip
    run = tmp_path / "run"
    assert main(["profile", "-q", "--out", str(run), str(tmp_path / "slow_own_code.py")]) == 0
    step_other = [e["stages"]["other"] for e in map(json.loads, (run / "metrics.jsonl")
                  .read_text().splitlines()) if e.get("event") == "step"][1:]  # fmt: skip
    assert min(step_other) >= 0.03 * 0.99  # the sleep sits inside the next step
    assert main(["doctor", "--json", str(run)]) == 0
    rules = {f["rule"] for f in json.loads(capsys.readouterr().out)}
    assert "optimizer-bound" not in rules
