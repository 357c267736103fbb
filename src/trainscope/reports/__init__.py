"""trainscope.reports: the run report, every study's sections, comparisons and the
collectives' tables, built from run and study records.

Pure functions over run directories: what a report says. What a record means is
computed in :mod:`trainscope.analysis` (and the doctor's findings in
:mod:`trainscope.diagnosis`); how it looks, in :mod:`trainscope.render`. Nothing here
imports torch or training code, and matplotlib/rich are imported only inside the
functions that draw or print, so ``import trainscope.reports`` stays cheap and works on a
machine without a GPU. The names below are the facade the Python API documents.
"""

from trainscope.render.document import Document, escape_inline, write_document
from trainscope.render.plots import loss_curve, stage_pie
from trainscope.render.table import (
    MISSING,
    Table,
    fmt_bytes,
    fmt_float,
    fmt_pct,
    fmt_rate,
    fmt_seconds,
    latex_escape,
)
from trainscope.reports.run_report import RunReport, build_run_report, render_tables_rich
from trainscope.reports.tables import epoch_table, overview_table, per_class_table, stage_table

__all__ = [
    "MISSING",
    "Document",
    "RunReport",
    "Table",
    "build_run_report",
    "epoch_table",
    "escape_inline",
    "fmt_bytes",
    "fmt_float",
    "fmt_pct",
    "fmt_rate",
    "fmt_seconds",
    "latex_escape",
    "loss_curve",
    "overview_table",
    "per_class_table",
    "render_tables_rich",
    "stage_pie",
    "stage_table",
    "write_document",
]
