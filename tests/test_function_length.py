"""Every function in trainscope reads on a screen or two: at most 100 lines anywhere, and at
most 60 in the packages a contributor changes most (``train``, ``strategies``,
``studies``, ``records``, ``runtime``). Counted from the ``def`` line to the function's
last line (docstring included, decorators not); methods and nested functions count too."""

from __future__ import annotations

import ast
from pathlib import Path

import trainscope

PACKAGE = Path(trainscope.__file__).parent
MAX_LINES = 100
STRICT = {"train": 60, "strategies": 60, "studies": 60, "records": 60, "runtime": 60}


def long_functions(folder: Path, limits: dict[str, int], default: int) -> list[str]:
    """``path:function (N lines)`` for each function under ``folder`` longer than its
    limit: ``limits[top-level folder]`` where given, else ``default``."""
    found = []
    for path in sorted(folder.rglob("*.py")):
        rel = path.relative_to(folder)
        limit = limits.get(rel.parts[0], default) if len(rel.parts) > 1 else default
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > limit:
                    found.append(f"{rel.as_posix()}:{node.name} ({lines} lines)")
    return found


def test_no_function_is_longer_than_its_limit() -> None:
    assert long_functions(PACKAGE, STRICT, MAX_LINES) == []


def test_the_check_finds_a_long_function(tmp_path: Path) -> None:
    def module(lines: int) -> str:
        body = "\n".join(f"    x{i} = {i}" for i in range(lines - 1))
        return f"def short():\n    pass\n\n\ndef long():\n{body}\n"

    (tmp_path / "train").mkdir()
    (tmp_path / "train" / "m.py").write_text(module(61))
    (tmp_path / "reports").mkdir()
    (tmp_path / "reports" / "m.py").write_text(module(61))
    (tmp_path / "top.py").write_text(module(101))
    assert long_functions(tmp_path, STRICT, MAX_LINES) == [
        "top.py:long (101 lines)",
        "train/m.py:long (61 lines)",
    ]
