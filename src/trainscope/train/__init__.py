"""The training loop and the orchestration of one run."""
