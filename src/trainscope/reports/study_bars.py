"""Bar figures of a study's configurations, one bar each: the data a section builder
gathers (:class:`Bars`) and the figure it adds to the report (:func:`bar_figure`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from trainscope.analysis.stats import error_bar
from trainscope.render.document import Document
from trainscope.render.study_plots import bar_plot
from trainscope.util.spread import Spread


@dataclass
class Bars:
    """A bar figure's data: one bar per configuration, each its median and spread."""

    values: list[float | None] = field(default_factory=list)
    errors: list[tuple[float, float] | None] = field(default_factory=list)

    def add(self, sp: Spread | None) -> None:
        """The next configuration's bar; None (no measured run) leaves a gap."""
        self.values.append(None if sp is None else sp.median)
        self.errors.append(None if sp is None else error_bar(sp))


class BarTexts(NamedTuple):
    """What a bar figure says: its y axis label, title, and caption in the report."""

    ylabel: str
    title: str
    caption: str


def bar_figure(doc: Document, labels: list[str], bars: Bars, png: Path, texts: BarTexts) -> None:
    """Draw ``bars`` (a gap marked "not applicable") into ``png`` and add the figure to
    ``doc`` when there was anything to draw."""
    ylabel, title, caption = texts
    files = bar_plot(
        labels, bars.values, bars.errors, png, ylabel=ylabel, title=title, na_text="not applicable"
    )
    if files:
        doc.figure(files[0], caption, None)
