"""trainscope.records."""
