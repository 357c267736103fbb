"""trainscope.reports: tables, figures and reports (Markdown + HTML) built from run records.

Pure functions over run directories. Nothing here imports torch or training code, and
matplotlib/rich are imported only inside the functions that draw or print, so
``import trainscope.reports`` stays cheap and works on a machine without a GPU.
"""

from trainscope.reports.document import Document, escape_inline, write_document
from trainscope.reports.plots import loss_curve, stage_pie
from trainscope.reports.run_report import RunReport, build_run_report, render_tables_rich
from trainscope.reports.tables import (
    MISSING,
    Table,
    epoch_table,
    fmt_bytes,
    fmt_float,
    fmt_pct,
    fmt_rate,
    fmt_seconds,
    latex_escape,
    overview_table,
    per_class_table,
    stage_table,
)

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
