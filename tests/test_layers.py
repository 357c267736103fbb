"""The package's layers, as pyproject.toml's ``[tool.importlinter]`` contracts state them,
hold: ``lint-imports`` passes here, and fails on a planted upward import, a planted cycle
and a planted torch import in a torch-free package (so the check cannot pass vacuously).

What import-linter cannot say is checked with ``ast`` beside it: no private name
(``_x``) is imported from another package, and every import of a trainscope module inside
a function has its reason, which is to delay torch or a heavy optional dependency.
"""

from __future__ import annotations

import ast
import functools
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

import trainscope

from .conftest import scaled

PACKAGE = Path(trainscope.__file__).parent
PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"
# What "heavy" means for an import delayed into a function (the list, and the
# libraries they bring).
# rich (about 37 ms to import here), numpy (140 ms) and psutil (30 ms) count too: ``--help``
# needs none of them.
HEAVY = (
    "torch",
    "matplotlib",
    "transformers",
    "peft",
    "tokenizers",
    "torchao",
    "wandb",
    "tensorboard",
    "numpy",
    "psutil",
    "playwright",
    "rich",
)
# What ``trainscope --help`` loads (measured: 135 ms median at d8b4543, 138 ms after the
# layers refactor, n=10, docs/benchmarks.md): the parsers, the configuration and its
# checks. Each command's implementation is imported inside the function that runs it, so
# --help does not pay for it; that is the second reason an import may sit in a function.
HELP_MODULES = {
    "trainscope",
    "trainscope.cli",
    "trainscope.cli.commands",
    "trainscope.cli.doctor",
    "trainscope.cli.lab",
    "trainscope.cli.profile",
    "trainscope.cli.slurm",
    "trainscope.cli.study_script",  # the study parsers' script flags
    "trainscope.cli.flags",
    "trainscope.collectives",
    "trainscope.collectives.cli",
    "trainscope.collectives.predict_cli",
    "trainscope.comm",
    "trainscope.comm.cost_model",
    "trainscope.config",
    "trainscope.data",
    "trainscope.data.mnist_split",
    "trainscope.errors",
    "trainscope.injections",  # --inject's keys, read before the script runs
    "trainscope.estimate",
    "trainscope.estimate.activations",
    "trainscope.estimate.archs",
    "trainscope.estimate.buffers",
    "trainscope.estimate.cli",
    "trainscope.estimate.core",
    "trainscope.estimate.states",
    "trainscope.recipes",
    "trainscope.registry",
    "trainscope.registry.base",
    "trainscope.registry.builtins",
    "trainscope.registry.extensions",
    "trainscope.registry.strategies",
    "trainscope.registry.studies",
    "trainscope.runtime",
    "trainscope.runtime.signals",
    "trainscope.tracking",
    "trainscope.tracking.base",
    "trainscope.tracking.sink",
    "trainscope.train",
    "trainscope.train.failures",
    "trainscope.util",
    "trainscope.util.checks",
    "trainscope.util.numfmt",
    "trainscope.util.safe_yaml",
    "trainscope.util.textsafe",
    "trainscope.util.target",  # config checks --target's form
    "trainscope.version",
    "trainscope.workloads",
}
LINT = (
    "import sys; from importlinter.cli import lint_imports; "
    "sys.exit(lint_imports(no_cache=True, no_logo=True))"
)


def _lint(cwd: Path, src: Path) -> subprocess.CompletedProcess[str]:
    pytest.importorskip("importlinter")
    env = {"PYTHONPATH": str(src), "PATH": "/usr/bin:/bin", "HOME": str(cwd)}
    return subprocess.run(
        [sys.executable, "-c", LINT],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=scaled(120),
    )


def test_lint_imports_passes_with_every_contract() -> None:
    done = _lint(PYPROJECT.parent, PACKAGE.parent)
    assert done.returncode == 0, done.stdout + done.stderr
    contracts = tomllib.loads(PYPROJECT.read_text())["tool"]["importlinter"]["contracts"]
    assert {c["type"] for c in contracts} >= {"layers", "acyclic_siblings", "forbidden"}
    assert done.stdout.count(" KEPT") == len(contracts), done.stdout


@pytest.fixture()
def copy(tmp_path: Path) -> Path:
    """A copy of the package and its pyproject.toml, to plant bad imports in."""
    shutil.copytree(
        PACKAGE, tmp_path / "src" / "trainscope", ignore=shutil.ignore_patterns("__pycache__")
    )
    shutil.copy(PYPROJECT, tmp_path / "pyproject.toml")
    return tmp_path


def _plant(copy: Path, module: str, line: str) -> str:
    path = copy / "src" / "trainscope" / module
    path.write_text(path.read_text(encoding="utf-8") + f"\n\ndef _planted() -> None:\n    {line}\n")
    done = _lint(copy, copy / "src")
    assert done.returncode != 0
    return done.stdout


def test_lint_imports_fails_on_a_planted_upward_import(copy: Path) -> None:
    out = _plant(copy, "records/jsonio.py", "from trainscope.train import run  # noqa")
    assert "trainscope.records is not allowed to import trainscope.train" in out


def test_lint_imports_fails_on_a_planted_cycle(copy: Path) -> None:
    # render.latex_layout is imported by render.table; the planted import closes a loop.
    out = _plant(copy, "render/latex_layout.py", "from trainscope.render import table  # noqa")
    assert "No cycles are allowed in trainscope.render" in out


def test_lint_imports_fails_on_an_upward_import_inside_a_coarse_layer(copy: Path) -> None:
    # Rendering is below the analyses in the "reading records" layer: never up to them.
    out = _plant(copy, "render/table.py", "from trainscope.analysis import cpu  # noqa")
    assert "trainscope.render is not allowed to import trainscope.analysis" in out


def test_lint_imports_fails_on_torch_in_a_torch_free_package(copy: Path) -> None:
    out = _plant(copy, "analysis/stats.py", "import torch  # noqa")
    assert "trainscope.analysis is not allowed to import torch" in out


# ------------------------------------------------------------- what import-linter cannot say


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


@functools.cache
def _parsed(path: Path) -> ast.Module:
    """The module's syntax tree, parsed once for every check here (read, never changed)."""
    return ast.parse(path.read_text(encoding="utf-8"))


def _imported(node: ast.Import | ast.ImportFrom, modules: set[str]) -> list[tuple[str, str]]:
    """(module, name) pairs an import statement takes; name is "" for a whole module."""
    if isinstance(node, ast.Import):
        return [(a.name, "") for a in node.names]
    if node.level or not node.module:
        return []
    return [
        (f"{node.module}.{a.name}", "")
        if f"{node.module}.{a.name}" in modules
        else (node.module, a.name)
        for a in node.names
    ]


def _package(module: str) -> str:
    return ".".join(module.split(".")[:2])


def test_no_private_name_is_imported_from_another_package() -> None:
    modules = _modules()
    wrong = []
    for me, path in modules.items():
        for node in ast.walk(_parsed(path)):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            for module, name in _imported(node, set(modules)):
                private = (name.startswith("_") and not name.startswith("__")) or any(
                    p.startswith("_") and not p.startswith("__") for p in module.split(".")
                )
                if module.startswith("trainscope") and private and _package(module) != _package(me):
                    wrong.append(f"{me}:{node.lineno} imports {module} {name}")
    assert not wrong, "\n".join(wrong)


def _top_level_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """The imports that run when the module is imported (not those inside functions or
    under ``if TYPE_CHECKING``)."""
    found: list[ast.Import | ast.ImportFrom] = []

    def visit(body: list[ast.stmt]) -> None:
        for stmt in body:
            if isinstance(stmt, (ast.Import, ast.ImportFrom)):
                found.append(stmt)
            elif isinstance(stmt, ast.If) and "TYPE_CHECKING" not in ast.unparse(stmt.test):
                visit(stmt.body)
                visit(stmt.orelse)
            elif isinstance(stmt, ast.Try):
                visit(stmt.body)
                for handler in stmt.handlers:
                    visit(handler.body)

    visit(tree.body)
    return found


def _type_checking_only(tree: ast.Module) -> set[int]:
    """The nodes under ``if TYPE_CHECKING:`` (imports that never run)."""
    return {
        id(n)
        for stmt in tree.body
        if isinstance(stmt, ast.If) and "TYPE_CHECKING" in ast.unparse(stmt.test)
        for n in ast.walk(stmt)
    }


@functools.cache
def _loads_heavy() -> dict[str, bool]:
    """Whether importing each trainscope module loads a heavy library (through the
    imports that run at import time, its packages' ``__init__`` included)."""
    modules = _modules()
    deps: dict[str, set[str]] = {}
    heavy: dict[str, bool] = {}
    for me, path in modules.items():
        deps[me] = set()
        heavy[me] = False
        parents = [".".join(me.split(".")[:i]) for i in range(1, me.count(".") + 1)]
        deps[me] |= {p for p in parents if p in modules and p != me}
        for node in _top_level_imports(_parsed(path)):
            for module, _ in _imported(node, set(modules)):
                if module.split(".")[0] in HEAVY:
                    heavy[me] = True
                deps[me] |= {m for m in (module, module.rsplit(".", 1)[0]) if m in modules}
    changed = True
    while changed:
        changed = False
        for me in modules:
            if not heavy[me] and any(heavy[d] for d in deps[me]):
                heavy[me] = changed = True
    return heavy


HELP = """
import contextlib, io, sys
from trainscope.cli import main
with contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()):
    main(["--help"])
print(" ".join(sorted(m for m in sys.modules if m.startswith("trainscope"))))
"""


def test_help_loads_only_the_parsers() -> None:
    """--help stays as fast as it was: it loads no command's implementation."""
    done = subprocess.run(
        [sys.executable, "-c", HELP], capture_output=True, text=True, timeout=scaled(60)
    )
    assert done.returncode == 0, done.stderr
    assert set(done.stdout.split()) - HELP_MODULES == set()


def test_imports_inside_functions_delay_something_heavy() -> None:
    """An import of a trainscope module inside a function is there to keep torch (or a
    heavy optional library) out of ``--help``, config checks and reports, or, in the
    modules ``--help`` loads, to keep a command's implementation out of ``--help``; any
    other import belongs at the top of the file, where a reader looks for it."""
    heavy = _loads_heavy()
    modules = _modules()
    wrong = []
    for me, path in modules.items():
        if me in HELP_MODULES:
            # (The root's run() and report() import the API when called: every command
            # imports the root package first.)
            continue
        tree = _parsed(path)
        top = {id(n) for n in _top_level_imports(tree)} | _type_checking_only(tree)
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Import, ast.ImportFrom)) or id(node) in top:
                continue
            for module, _ in _imported(node, set(modules)):
                if module in modules and not heavy[module]:
                    wrong.append(f"{me}:{node.lineno} imports {module} inside a function")
    assert not wrong, "\n".join(wrong)


def test_the_heavy_check_sees_torch_through_a_chain() -> None:
    heavy = _loads_heavy()
    assert heavy["trainscope.train.loop"] and heavy["trainscope.techniques.precision"]
    assert not heavy["trainscope.config"] and not heavy["trainscope.reports.tables"]
