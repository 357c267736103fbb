"""trainscope.data."""
