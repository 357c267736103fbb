"""``study time-to-target --recipes FILE`` refuses, in one line naming the recipe and the
key or flag, what it would otherwise ignore or drop (issue 43): an unknown key, a recipe
that changes nothing, a flag that is no setting (``--config``), a setting the study makes
itself, a value the run would refuse, a name given twice. All before any run trains
(``--dry-run``: nothing would train even where a check is missing)."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainscope.cli import main


def _dry_run(tmp_path: Path, recipes: str) -> int:
    path = tmp_path / "recipes.yaml"
    path.write_text(recipes)
    return main(["study", "time-to-target", "--target", "val_accuracy>=0.5", "--recipes",
                 str(path), "--threads", "1", "--out", str(tmp_path / "s"), "--dry-run",
                 "-q"])  # fmt: skip


@pytest.mark.parametrize(
    ("recipes", "says"),
    [
        ("- name: blue\n  flags: --lr 0.01\n  colour: blue\n",
         "--recipes: entry blue: unknown key 'colour' (a recipe has name, flags and set)"),
        ("- name: empty\n", "--recipes: entry empty changes nothing"),
        ("- name: empty\n  flags: ''\n", "--recipes: entry empty changes nothing"),
        ("- name: cfg\n  flags: --lr 0.01 --config other.yaml\n",
         "--recipes: entry cfg: --config is not a setting of the recipe"),
        ("- name: cores\n  flags: --threads 2\n", "--recipes: entry cores may not set "
         "runtime.threads (the study does"),
        ("- name: neg\n  flags: --lr -1\n", "--recipes: entry neg: lr must be a finite number"),
        ("- name: twice\n  flags: --lr 0.01\n- name: twice\n  flags: --lr 0.02\n",
         "--recipes: entry 2: the name 'twice' is given twice"),
    ],
)  # fmt: skip
def test_a_recipe_that_would_be_ignored_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], recipes: str, says: str
) -> None:
    assert _dry_run(tmp_path, recipes) == 2
    out, err = capsys.readouterr()
    (line,) = err.strip().splitlines()
    assert line.startswith("trainscope: error: ") and says in line, line
    assert out == "" and not (tmp_path / "s").exists()


def test_good_recipes_still_plan(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    recipes = "- name: fast\n  flags: --lr 0.01\n- name: wd\n  set: {train.weight_decay: 0.1}\n"
    assert _dry_run(tmp_path, recipes) == 0
    out = capsys.readouterr().out
    assert "fast/r1: train.lr=0.01" in out and "wd/r1: train.weight_decay=0.1" in out
