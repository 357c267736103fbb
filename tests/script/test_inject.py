"""``trainscope profile --inject KEY=VALUE``: each key applied to an unchanged script,
recorded, shown in the report, and refused in one line where it cannot apply."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from tests.script.helpers import printed, profile, summary, write, write_slow_data
from trainscope.cli import main
from trainscope.errors import ConfigError
from trainscope.injections import INJECTIONS, as_arguments, parse_injections

# A script that builds its DataLoaders with settings of its own, one of them positional,
# and prints what torch made of them.
LOADERS = """
import torch
from torch.utils.data import DataLoader, TensorDataset
data = TensorDataset(torch.randn(64, 4), torch.randint(0, 2, (64,)))
model = torch.nn.Linear(4, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
# num_workers given positionally (the 6th parameter), pin_memory by keyword
train = DataLoader(data, 16, True, None, None, 0, pin_memory=False)
held_out = DataLoader(data, batch_size=32)
for loader in (train, held_out):
    print("loader", loader.num_workers, loader.pin_memory, loader.prefetch_factor,
          loader.persistent_workers)
for x, y in train:
    torch.nn.functional.cross_entropy(model(x), y).backward()
    opt.step(); opt.zero_grad()
print("threads", torch.get_num_threads())
"""


def test_loader_keys_reach_every_dataloader_and_its_own_values_are_recorded(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = write(here, "loaders.py", LOADERS)
    args = ["--inject", "num_workers=2", "--inject", "pin_memory=true",
            "--inject", "prefetch_factor=3", "--inject", "persistent_workers=on"]  # fmt: skip
    assert profile("-q", "--out", "run", *args, "--", str(script)) == 0
    out = capsys.readouterr().out
    assert printed(out, "loader") == [["2", "True", "3", "True"]] * 2
    s = summary(here / "run")
    assert s["status"] == "completed" and s["steps"] == 4
    assert s["source"]["injected"] == {
        "num_workers": 2,
        "pin_memory": True,
        "prefetch_factor": 3,
        "persistent_workers": True,
    }
    assert s["source"]["injected_numerics"] == []
    first = s["script"]["injected_loaders"][0]
    assert first["had"] == {"num_workers": 0, "pin_memory": False, "persistent_workers": False,
                            "prefetch_factor": None}  # fmt: skip
    assert first["now"]["num_workers"] == 2
    assert s["num_workers"] == 2  # what the training loader ran with
    assert main(["report", "-q", str(here / "run")]) == 0
    md = (here / "run" / "report" / "report.md").read_text()
    assert "Injected" in md and "num_workers=2, pin_memory=true" in md


def test_workers_only_keys_are_left_off_a_loader_with_no_workers(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """torch refuses prefetch_factor without workers: it is left off and said, and the
    script runs as it would."""
    script = write(here, "loaders.py", LOADERS)
    assert profile("--out", "run", "--inject", "prefetch_factor=4", "--", str(script)) == 0
    said = capsys.readouterr()
    assert printed(said.out, "loader") == [["0", "False", "None", "False"]] * 2
    # trainscope's own lines go to stderr: the script's output stays its own
    assert "left off 2 DataLoader(s) with no worker processes" in said.err
    notes = summary(here / "run")["notes"]
    assert any("prefetch_factor: left off 2 DataLoader(s)" in n for n in notes)


def test_a_loader_key_on_a_script_without_a_dataloader_says_so_and_runs(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = write(
        here,
        "no_loader.py",
        """
        import torch
        model = torch.nn.Linear(4, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(3):
            model(torch.randn(8, 4)).sum().backward()
            opt.step(); opt.zero_grad()
        """,
    )
    assert profile("--out", "run", "--inject", "num_workers=4", "--", str(script)) == 0
    assert "the script built no DataLoader, nothing changed" in capsys.readouterr().err
    s = summary(here / "run")
    assert s["status"] == "completed" and s["steps"] == 3
    assert any("built no DataLoader" in n for n in s["notes"])


def test_threads_are_set_and_said(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = write(here, "loaders.py", LOADERS)
    assert profile("-q", "--out", "run", "--inject", "threads=1", "--", str(script)) == 0
    assert printed(capsys.readouterr().out, "threads") == [["1"]]
    cpu = summary(here / "run")["cpu"]
    assert "--inject threads=1" in json.dumps(cpu)


@pytest.mark.parametrize(
    "words, said",
    [
        (["--inject", "workers=2"], "unknown key; known: num_workers, pin_memory"),
        (["--inject", "num_workers"], "give KEY=VALUE"),
        (["--inject", "num_workers=-1"], "give a number in 0..64"),
        (["--inject", "num_workers=100000"], "give a number in 0..64"),
        (["--inject", "pin_memory=maybe"], "give true or false"),
        (["--inject", "num_workers=1", "--inject", "num_workers=2"], "given twice"),
        (["--threads", "2", "--inject", "threads=1"], "say the same: give one"),
    ],
)
def test_bad_injections_are_one_line_exit_2_and_no_run_folder(
    here: Path, capsys: pytest.CaptureFixture[str], words: list[str], said: str
) -> None:
    script = write(here, "loaders.py", LOADERS)
    assert main(["profile", "--out", str(here / "run"), *words, "--", str(script)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and said in err[0], err
    assert not (here / "run").exists()


def test_the_registry_reads_and_writes_its_own_words() -> None:
    given = parse_injections(["num_workers=3", "pin_memory=false", "threads=2"])
    assert given == {"num_workers": 3, "pin_memory": False, "threads": 2}
    assert parse_injections(as_arguments(given)[1::2]) == given
    assert all(
        i.help and i.needs in ("dataloader", "optimizer", "model", "nothing")
        for i in INJECTIONS.values()
    )
    with pytest.raises(ConfigError):
        parse_injections(["=3"])


def test_the_python_api_takes_the_same_settings(here: Path) -> None:
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    import trainscope

    data = TensorDataset(torch.randn(8, 2))
    with trainscope.profile(out=str(here / "run"), inject={"pin_memory": True}) as session:
        assert DataLoader(data).pin_memory is True
    assert DataLoader(data).pin_memory is False  # put back when the block ends
    assert session.summary["source"]["injected"] == {"pin_memory": True}  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match="unknown key"):
        with trainscope.profile(out=str(here / "again"), inject={"workers": 2}):
            pass
    assert not (here / "again").exists()  # refused before anything was written


def test_the_doctor_states_an_injectable_fix_as_the_profile_command_that_applies_it(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An input-bound script: the doctor's fix is the same script re-profiled with
    --inject num_workers=N, from the folder it ran in, and that command runs."""
    script = write_slow_data(here, "slow_data.py", batches=16, sleep=0.002)
    assert profile("-q", "--out", "run", "--", script.name) == 0
    capsys.readouterr()
    assert main(["doctor", "--json", str(here / "run")]) == 0
    findings = {f["rule"]: f for f in json.loads(capsys.readouterr().out)}
    fix = findings["input-bound"]["fix_command"]
    cd, _, line = fix.partition(" && ")
    assert cd == f"cd {here}"
    words = shlex.split(line)
    assert words[:2] == ["trainscope", "profile"] and words[-2:] == ["--", "slow_data.py"]
    assert any(w.startswith("num_workers=") for w in words)
    assert any("measured with --inject" in n for n in findings["input-bound"]["notes"])
    assert main(words[1:]) == 0  # the command as printed, run here
    again = summary(here / "run-input-bound")
    assert again["status"] == "completed" and again["num_workers"] >= 1
    assert again["source"]["injected"]["num_workers"] == again["num_workers"]
