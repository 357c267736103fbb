"""Study figures: valid PNG + SVG files, annotations present, nothing drawn for no data."""

from __future__ import annotations

import math
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from trainscope.render.study_plots import (
    COMPUTE_LABEL,
    FAST_PATH_LABEL,
    bar_plot,
    loss_curves_plot,
    per_iteration_plot,
    workers_sweep_plot,
)

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
SVG_NS = "{http://www.w3.org/2000/svg}"

SWEEP = {
    "default": [(0, 4.0, 0.2), (1, 3.1, 0.1), (2, 2.2, 0.1), (4, 1.6, 0.05)],
    "persistent_workers": [(1, 2.9, 0.1), (2, 1.9, 0.1), (4, 1.2, 0.04)],
    "pin_memory": [(1, 3.0, 0.1), (2, 2.0, 0.08), (4, 1.4, 0.05)],
}


def check_files(written: list[Path], png: Path) -> str:
    """Assert a readable PNG and a parseable SVG were written; return the SVG's text."""
    import matplotlib.image

    svg = png.with_suffix(".svg")
    assert written == [png, svg]
    assert png.read_bytes()[:8] == PNG_SIGNATURE
    image = matplotlib.image.imread(png)
    assert image.shape[0] > 100 and image.shape[1] > 100
    root = ET.parse(svg).getroot()
    assert root.tag == f"{SVG_NS}svg"
    # svg.fonttype "none" keeps labels as <text> elements rather than glyph paths.
    return "\n".join("".join(t.itertext()) for t in root.iter(f"{SVG_NS}text"))


def test_workers_sweep_writes_files_with_annotations(tmp_path: Path) -> None:
    png = tmp_path / "sweep.png"
    written = workers_sweep_plot(
        SWEEP,
        png,
        default_workers=0,
        fast=(0.8, (0.05, 0.1)),
        fastest=("persistent_workers", 4),
        title="CIFAR-10 $5 data only",
    )
    text = check_files(written, png)
    assert "fastest: 4 workers, 1.20 s" in text  # three significant digits, as in tables
    assert "PyTorch default (num_workers=0)" in text
    assert FAST_PATH_LABEL in text
    assert "seconds per epoch" in text
    assert "persistent_workers" in text


def test_workers_sweep_without_default_point_still_marks_default(tmp_path: Path) -> None:
    png = tmp_path / "sweep.png"
    series = {"pin_memory": [(2, 2.0, 0.1), (4, 1.5, float("nan"))]}
    text = check_files(workers_sweep_plot(series, png, fastest=("pin_memory", 4)), png)
    assert "PyTorch default (num_workers=0)" in text
    assert "fastest: 4 workers, 1.50 s" in text


def test_workers_sweep_marks_no_fastest_when_the_caller_found_none(tmp_path: Path) -> None:
    """The plot stars a setting only when told one is faster beyond the noise; otherwise it
    says how many settings tie, and no point is called fastest."""
    png = tmp_path / "sweep.png"
    text = check_files(workers_sweep_plot(SWEEP, png, tied=3), png)
    assert "fastest: " not in text.replace("no single fastest: ", "")
    assert "no single fastest: 3 settings within noise of the lowest" in text


def test_workers_sweep_is_byte_identical_when_rebuilt(tmp_path: Path) -> None:
    a, b = tmp_path / "a" / "s.png", tmp_path / "b" / "s.png"
    workers_sweep_plot(SWEEP, a, fast=(0.8, 0.05))
    workers_sweep_plot(SWEEP, b, fast=(0.8, 0.05))
    assert a.read_bytes() == b.read_bytes()
    assert a.with_suffix(".svg").read_bytes() == b.with_suffix(".svg").read_bytes()


@pytest.mark.parametrize("series", [{}, {"default": []}, {"default": [(0, float("nan"), 0.0)]}])
def test_workers_sweep_nothing_to_draw(tmp_path: Path, series: dict) -> None:
    assert workers_sweep_plot(series, tmp_path / "s.png") == []
    assert list(tmp_path.iterdir()) == []


def test_per_iteration_writes_stacked_bars(tmp_path: Path) -> None:
    png = tmp_path / "iter.png"
    rows = [
        ("0 workers, aug off", 12.0, 1.0, 8.0, 0.5),
        ("4 workers, aug off", 0.3, 0.1, 8.2, 0.4),
        ("4 workers, aug on", 2.5, 0.4, 8.1, 0.6),
    ]
    text = check_files(per_iteration_plot(rows, png, title="per iteration"), png)
    assert "data wait" in text
    assert COMPUTE_LABEL in text
    assert "milliseconds per iteration" in text
    assert "12.0 ms" in text  # a value label inside its segment
    assert "data 0.300 ms" in text  # a segment too narrow for its label, named after the bar
    assert "0 workers, aug off" in text


def test_per_iteration_nothing_to_draw(tmp_path: Path) -> None:
    assert per_iteration_plot([], tmp_path / "i.png") == []
    assert list(tmp_path.iterdir()) == []


def test_loss_curves_mark_non_finite(tmp_path: Path) -> None:
    png = tmp_path / "loss.png"
    curves = {
        "fp32": ([0, 1, 2, 3, 4], [2.3, 1.5, 0.9, 0.5, 0.3]),
        "fp16 no scaler": ([0, 1, 2, 3, 4], [2.3, 1.6, float("nan"), 1.0, float("inf")]),
        "diverged at once": ([0, 1], [float("inf"), 1.0]),
    }
    text = check_files(loss_curves_plot(curves, png, title="precision"), png)
    assert "fp16 no scaler (non-finite from step 2)" in text
    assert "diverged at once (non-finite from step 0)" in text
    assert "fp32" in text and "fp32 (non-finite" not in text
    assert "optimizer step" in text and "training loss" in text


@pytest.mark.parametrize(
    ("losses", "scale"),
    [
        ([10.0, 3.0, 1.0, 0.3, 0.1, 0.03], "log"),  # spans > 20x, all positive
        ([2.0, 1.5, 1.2, 1.0, 0.9, 0.8], "linear"),  # narrow range
        ([10.0, 1.0, 0.1, 0.0, -0.1, -0.2], "linear"),  # not all positive
    ],
)
def test_loss_curves_y_scale(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, losses: list[float], scale: str
) -> None:
    import trainscope.render.study_plots as study_plots

    figures = []
    original = study_plots.write_figure

    def capture(fig, png_path):  # type: ignore[no-untyped-def]
        figures.append(fig)
        return original(fig, png_path)

    monkeypatch.setattr(study_plots, "write_figure", capture)
    png = tmp_path / "loss.png"
    check_files(loss_curves_plot({"a": (list(range(6)), losses)}, png), png)
    assert figures[0].axes[0].get_yscale() == scale


@pytest.mark.parametrize("curves", [{}, {"a": ([], [])}])
def test_loss_curves_nothing_to_draw(tmp_path: Path, curves: dict) -> None:
    assert loss_curves_plot(curves, tmp_path / "l.png") == []
    assert list(tmp_path.iterdir()) == []


def test_bar_plot_writes_na_for_missing_value(tmp_path: Path) -> None:
    png = tmp_path / "bars.png"
    written = bar_plot(
        ["fp32", "bf16", "fp16"],
        [1.25, None, 0.75],
        [0.05, None, None],
        png,
        ylabel="seconds per epoch",
        title="precision",
        value_fmt=lambda v: f"{v:.2f} s",
        na_text="not supported",
    )
    text = check_files(written, png)
    assert "not supported" in text
    assert "1.25 s" in text and "0.75 s" in text
    assert "bf16" in text and "seconds per epoch" in text


def test_bar_plot_all_missing_and_negative(tmp_path: Path) -> None:
    png = tmp_path / "bars.png"
    text = check_files(bar_plot(["a", "b"], [None, None], [None, None], png, ylabel="x"), png)
    assert text.count("n/a") == 2
    png2 = tmp_path / "neg.png"
    text = check_files(bar_plot(["a", "b"], [-1.0, 2.0], [0.1, math.nan], png2, ylabel="y"), png2)
    assert "-1" in text and "2" in text


def test_bar_plot_nothing_to_draw_and_length_mismatch(tmp_path: Path) -> None:
    assert bar_plot([], [], [], tmp_path / "b.png", ylabel="y") == []
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(ValueError):
        bar_plot(["a"], [1.0, 2.0], [None], tmp_path / "b.png", ylabel="y")


def test_module_imports_neither_torch_nor_matplotlib() -> None:
    code = (
        "import trainscope.render.study_plots, sys; "
        "assert 'torch' not in sys.modules and 'matplotlib' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_running_mean_is_centred_and_shrinks_at_the_ends() -> None:
    from trainscope.render.study_plots import running_mean, smoothing_window

    assert running_mean([1.0, 2.0, 3.0, 4.0, 5.0], 3) == [1.5, 2.0, 3.0, 4.0, 4.5]
    assert smoothing_window(100) == 1
    assert smoothing_window(675) == 13 and smoothing_window(200) == 5
