"""What a test that reads a report's text can skip (test helper).

:func:`unsaved_figures` replaces ``save_figure`` in the modules that draw a report's
figures: each figure is still built with all its data (a record its drawing code cannot
take still fails), but neither laid out nor rasterised, which is most of a report's time;
its PNG and SVG files are placeholders. The drawing itself is tested where the figures
are (test_timeline.py, test_run_report.py, test_escaping.py, test_study_plots.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.reports.runs import PNG_MAGIC


def unsaved_figures(monkeypatch: pytest.MonkeyPatch) -> None:
    """Within the test, report figures are built, then written as placeholders."""
    from trainscope.analysis import memory, timeline
    from trainscope.render import plots, study_plots

    def save(fig: Any, path_png: Any, path_svg: Any = None) -> list[Path]:
        written = []
        for path, data in ((path_png, PNG_MAGIC), (path_svg, b"<svg/>")):
            if path is not None:
                Path(path).parent.mkdir(parents=True, exist_ok=True)
                Path(path).write_bytes(data)
                written.append(Path(path))
        return written

    for module in (plots, memory, timeline, study_plots):
        monkeypatch.setattr(module, "save_figure", save)
