"""trainscope.runtime."""
