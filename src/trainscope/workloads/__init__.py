"""trainscope.workloads."""
