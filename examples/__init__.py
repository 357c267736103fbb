"""Runnable example workloads for trainscope (see docs/workloads.md)."""
