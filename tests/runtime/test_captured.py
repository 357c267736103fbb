"""Third-party import chatter goes to the run's imports.log, not the console: Python
logging without a handler, torch-style logging, print() and C-level writes alike."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

NOISY = textwrap.dedent(
    """
    import logging, os, sys
    logging.getLogger("noisylib").warning("Failed to load noisylib/_C_fast.so: not here")
    print("noisylib: a deprecation, printed", file=sys.stderr)
    os.write(2, b"noisylib: written by C\\n")
    print("noisylib: on stdout")
    """
)
FACTORY = textwrap.dedent(
    """
    from trainscope.runtime.captured import quiet_import
    from trainscope.workloads.builtin import digits

    def factory(cfg):
        quiet_import("noisylib")
        print("factory: its own line stays on the console")
        return digits(cfg, None)
    """
)


@pytest.mark.timeout(120)
def test_a_workloads_import_chatter_goes_to_the_runs_log(tmp_path: Path) -> None:
    (tmp_path / "noisylib.py").write_text(NOISY)
    (tmp_path / "noisy_workload.py").write_text(FACTORY)
    out = tmp_path / "run"
    argv = [sys.executable, "-c", "import sys; from trainscope.cli import main; "
            "sys.exit(main(sys.argv[1:]))", "run", "--workload", "noisy_workload:factory",
            "--epochs", "1", "--max-steps-per-epoch", "3", "--no-progress",
            "--no-save-weights", "--out", str(out)]  # fmt: skip
    env = {**__import__("os").environ, "PYTHONPATH": str(tmp_path)}
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    console = done.stdout + done.stderr
    assert "noisylib" not in console, console
    assert "factory: its own line stays on the console" in console
    log = (out / "imports.log").read_text()
    for line in ("Failed to load noisylib/_C_fast.so", "a deprecation, printed",
                 "written by C", "on stdout"):  # fmt: skip
        assert line in log
    notes = json.loads((out / "summary.json").read_text())["notes"]
    assert any(n.startswith("4 line(s) third-party libraries printed") for n in notes), notes


def test_a_quiet_import_leaves_no_log(tmp_path: Path) -> None:
    from trainscope.runtime.captured import import_log, quiet_import

    with import_log(tmp_path / "imports.log") as captured:
        quiet_import("json")  # imported already: nothing printed, nothing redirected
        quiet_import("colorsys")
    assert captured.lines == 0 and not (tmp_path / "imports.log").exists()
    assert quiet_import("colorsys").__name__ == "colorsys"  # outside: a plain import


def test_a_lazy_packages_heavy_part_is_imported_quietly_with_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """transformers loads modeling_utils (and through it torchao, which prints) only on
    first use of an attribute: quiet_import loads such a part with the package."""
    from trainscope.runtime import captured

    pkg = tmp_path / "lazypkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "heavy.py").write_text("import os\nos.write(2, b'heavy: Failed to load x.so\\n')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(captured.LAZY_PARTS, "lazypkg", ("lazypkg.heavy",))
    with captured.import_log(tmp_path / "imports.log") as log:
        captured.quiet_import("lazypkg")
    assert log.lines == 1 and log.first == "heavy: Failed to load x.so"
    assert "lazypkg.heavy" in sys.modules
