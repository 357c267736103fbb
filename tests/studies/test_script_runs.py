"""A study's re-run of the user's script (studies/script_runs.py): the command it
builds, and the script found where ``python SCRIPT`` finds its imports."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.script.helpers import write
from trainscope.errors import ConfigError, TrainscopeError
from trainscope.studies.script_runs import check_spec, profile_argv, run_script, script_base


def test_the_re_run_command_injects_and_ends_with_the_scripts_own_words(tmp_path: Path) -> None:
    spec = script_base(["-m pkg.train", "--lr", "1"], str(tmp_path), steps=7, threads=2,
                       inject={"num_workers": 3})["script"]  # fmt: skip
    argv = profile_argv(spec, tmp_path / "r")
    assert argv[0] == sys.executable and argv[1] == "-c"  # never `python -m` from the folder
    assert argv[argv.index("--steps") + 1] == "7" and argv[argv.index("--threads") + 1] == "2"
    assert argv[argv.index("--inject") + 1] == "num_workers=3"
    assert argv[-5:] == ["--", "-m", "pkg.train", "--lr", "1"]
    with pytest.raises(ConfigError, match="--steps must be"):
        check_spec({**spec, "steps": 0})
    with pytest.raises(ConfigError, match="whole number"):
        check_spec({**spec, "inject": {"num_workers": "x"}})


def test_a_re_run_finds_the_scripts_imports_on_pythonpath(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The re-run process drops its own '' from sys.path: the script's folder is put in
    front of PYTHONPATH's first entry, not over it (minGPT's chargpt.py imports mingpt
    from PYTHONPATH, and failed so)."""
    (tmp_path / "lib").mkdir()
    (tmp_path / "proj").mkdir()
    write(tmp_path / "lib", "mylib.py", "X = 5\n")
    write(tmp_path / "proj", "train.py", """
        import sys, torch, mylib
        assert sys.path[0].endswith("proj"), sys.path[:3]
        model = torch.nn.Linear(2, 2)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(3):
            model(torch.ones(4, 2)).sum().backward(); opt.step(); opt.zero_grad()
        """)  # fmt: skip
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "lib"))
    spec = script_base(["proj/train.py"], str(tmp_path), steps=2)["script"]
    summary = run_script(spec, tmp_path / "run")
    assert summary["status"] == "completed" and summary["steps"] == 2
    monkeypatch.delenv("PYTHONPATH")
    with pytest.raises(TrainscopeError, match="ModuleNotFoundError"):
        run_script(spec, tmp_path / "again")
