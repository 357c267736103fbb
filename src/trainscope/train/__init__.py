"""trainscope.train."""
