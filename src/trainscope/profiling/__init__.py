"""trainscope.profiling."""
