"""Every function in ``trainscope/train/`` reads on one screen: 60 lines at most, counted
from its ``def`` line to its last line (docstring included, decorators not)."""

from __future__ import annotations

import ast
from pathlib import Path

import trainscope.train

TRAIN = Path(trainscope.train.__file__).parent
MAX_LINES = 60


def long_functions(folder: Path, limit: int = MAX_LINES) -> list[str]:
    """``file:function (N lines)`` for each function (methods and nested ones too) in
    ``folder``'s modules longer than ``limit`` lines."""
    found = []
    for path in sorted(folder.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > limit:
                    found.append(f"{path.name}:{node.name} ({lines} lines)")
    return found


def test_no_function_in_train_is_longer_than_60_lines() -> None:
    assert long_functions(TRAIN) == []


def test_the_check_finds_a_long_function(tmp_path: Path) -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_LINES))
    (tmp_path / "m.py").write_text(f"def short():\n    pass\n\n\ndef long():\n{body}\n")
    assert long_functions(tmp_path) == [f"m.py:long ({MAX_LINES + 1} lines)"]
