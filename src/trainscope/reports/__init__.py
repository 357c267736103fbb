"""trainscope.reports."""
